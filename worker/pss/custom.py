"""The parameter_server chief's ``--loop custom``: ``ClusterCoordinator.schedule``/``join`` with
``strategy.run`` in a ``tf.function``, scheduling up to each boundary (progress line, epoch,
checkpoint, end) and joining there; ``tf.train.CheckpointManager`` every ``--save-freq`` steps
(``model_dir/checkpoints/custom/ckpt-N``, N = global step)."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import tensorflow as tf
import tf_keras as keras

from worker.cluster import TaskInfo
from worker.layout import Layout
from worker.model import build_cnn, gradient_step, per_example_loss
from worker.progress import Throughput, backed_up, emit, epoch_end
from worker.pss.chief import (describe_partitioning, evaluate_and_save, evaluate_plain, load_data, make_dataset_fn,
                              make_strategy, start_fields, steps_per_epoch)
from worker.tensorboard import Scalars


class _Parts:
    """The model, its optimizer and the training metrics, made in the strategy's scope (the loss
    sum and count are variables: the replicas on the workers add to them)."""

    def __init__(self, args: argparse.Namespace, data, strategy) -> None:
        with strategy.scope():
            self.model = build_cnn(data.shape, data.num_classes, args.learning_rate)
            self.optimizer = self.model.optimizer
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy()
            self.loss_sum = tf.Variable(0.0, dtype=tf.float32, trainable=False)
            self.loss_count = tf.Variable(0.0, dtype=tf.float32, trainable=False)
        describe_partitioning(self.model)
        self.loss_fn = per_example_loss()

    def epoch_figures(self) -> tuple[float, float]:
        """The mean training loss and the accuracy since the last reset."""
        n = float(self.loss_count.numpy())
        return (float(self.loss_sum.numpy()) / n if n else float("nan")), float(self.train_accuracy.result())

    def reset_epoch(self) -> None:
        self.train_accuracy.reset_states()
        self.loss_sum.assign(0.0)
        self.loss_count.assign(0.0)


def _per_worker_iterator(args: argparse.Namespace, strategy, coordinator):
    dataset_fn = make_dataset_fn(args)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    return iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))


def _train_step(strategy, parts: _Parts, batch: int):
    """The step the coordinator schedules: one batch on a worker, its loss summed over replicas."""
    @tf.function
    def train_step(iterator):
        def replica_fn(inputs):
            images, labels = inputs
            loss = gradient_step(parts.model, parts.loss_fn, parts.train_accuracy, images, labels, batch)
            parts.loss_sum.assign_add(loss)
            parts.loss_count.assign_add(1.0)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return train_step


def _checkpoint_saver(ckpt_dir: Path, parts: _Parts):
    """Restore the newest checkpoint in ``ckpt_dir`` if there is one: save(step) writes the next."""
    checkpoint = tf.train.Checkpoint(model=parts.model, optimizer=parts.optimizer)
    manager = tf.train.CheckpointManager(checkpoint, str(ckpt_dir), max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).expect_partial()
        print(f"worker: restored {manager.latest_checkpoint}", flush=True)

    def save(step: int) -> None:
        began = time.time()
        path = manager.save(checkpoint_number=step)
        emit("checkpoint", global_step=step, path=path)
        backed_up(step, began)

    return save


def _next_boundary(global_step: int, total_steps: int, per_epoch: int, save_every: int, progress_every: int) -> int:
    """The next step at which to join: a progress line, an epoch's end, a checkpoint or the end."""
    return min([total_steps, (global_step // per_epoch + 1) * per_epoch,
                (global_step // save_every + 1) * save_every,
                (global_step // progress_every + 1) * progress_every])


def run_custom(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy = make_strategy(args, task)
    data = load_data(args)
    per_epoch = steps_per_epoch(args, data)
    total_steps = args.epochs * per_epoch
    save_every = per_epoch if args.save_freq == "epoch" else int(args.save_freq)
    batch = args.batch_size

    parts = _Parts(args, data, strategy)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_iterator = _per_worker_iterator(args, strategy, coordinator)
    train_step = _train_step(strategy, parts, batch)
    p = Layout(model_dir)
    save = _checkpoint_saver(p.custom_checkpoints, parts)

    global_step = int(parts.optimizer.iterations.numpy())
    epoch, step_in_epoch = divmod(global_step, per_epoch)
    emit("start", epoch=epoch, step=step_in_epoch, global_step=global_step, time=f"{time.time():.3f}",
         **start_fields(strategy, task, batch), epochs=args.epochs, steps_per_epoch=per_epoch)
    start_global = global_step
    scalars = Scalars.train(p, task)
    train_loss = train_acc = float("nan")
    first_step_time = None
    throughput = Throughput(batch)
    scheduled = global_step
    # Schedule up to each boundary (progress line, epoch, checkpoint, end), then join: the
    # counter read after a join is exact, and a checkpoint holds every step before it.
    while global_step < total_steps:
        if first_step_time is None:
            target = global_step + 1
        else:
            target = _next_boundary(global_step, total_steps, per_epoch, save_every, args.progress_every)
        for _ in range(target - scheduled):
            coordinator.schedule(train_step, args=(per_worker_iterator,))
            if args.step_delay > 0:
                time.sleep(args.step_delay)
        scheduled = target
        coordinator.join()
        global_step = int(parts.optimizer.iterations.numpy())
        if global_step != scheduled:
            # The optimizer's counter is the source of truth (it is what checkpoints restore).
            print(f"worker: note: optimizer.iterations={global_step} after {scheduled} scheduled steps", flush=True)
            scheduled = global_step
        throughput.mark(global_step)
        if first_step_time is None:
            first_step_time = time.time()
            emit("first_step", epoch=(global_step - 1) // per_epoch, step=(global_step - 1) % per_epoch,
                 global_step=global_step, time=f"{first_step_time:.3f}")
        if global_step % args.progress_every == 0:
            emit("step", epoch=(global_step - 1) // per_epoch, step=(global_step - 1) % per_epoch + 1,
                 global_step=global_step, time=f"{time.time():.3f}")
        if global_step % per_epoch == 0 or global_step >= total_steps:
            train_loss, train_acc = parts.epoch_figures()
            tested = {}
            if args.epoch_eval:
                test_loss, test_accuracy = evaluate_plain(parts.model, data, args)[:2]
                tested = {"test_loss": f"{test_loss:.4f}", "test_accuracy": f"{test_accuracy:.4f}"}
            epoch_end(math.ceil(global_step / per_epoch), global_step, train_loss, train_acc, throughput,
                      parts.optimizer, scalars, extra=tested)
            parts.reset_epoch()
        if global_step % save_every == 0 or global_step >= total_steps:
            save(global_step)

    rate = throughput.rate()
    loss, accuracy = evaluate_and_save(parts.model, data, args, p.final)
    emit("result", task=task.key, epochs=args.epochs, steps_run=global_step - start_global, global_step=global_step,
         examples_per_sec=f"{rate:.1f}", accuracy=f"{accuracy:.4f}", loss=f"{loss:.4f}",
         train_loss=f"{train_loss:.4f}", train_accuracy=f"{train_acc:.4f}")
    return 0
