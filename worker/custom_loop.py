"""MultiWorkerMirroredStrategy with a custom training loop (``--loop custom``).

``strategy.experimental_distribute_dataset``, ``strategy.run`` and ``strategy.reduce`` as in
the seeds, with checkpoints through ``tf.train.CheckpointManager``: the chief writes the real
checkpoint, the other workers write theirs to a temporary directory that is removed.

Graceful preemption with zero lost steps (see preemption.py): the SIGTERM flag is
all-reduced inside the training step itself, so it costs no extra collective.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import tensorflow as tf
import tf_keras as keras

from . import data as data_lib
from .cluster import TaskInfo
from .model import build_cnn, gradient_step, per_example_loss
from .mwms import paths, save_final_model
from .preemption import PREEMPTED_EXIT, PreemptionFlag
from .progress import Throughput, emit


def run_mwms_custom(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    flag = None if args.no_graceful_preemption else PreemptionFlag()
    if flag is not None:
        flag.install()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    print(f"worker: {task.key} custom loop, {replicas} replica(s), global batch {global_batch}", flush=True)

    pipes = data_lib.training_pipelines(args, global_batch, drop_test_remainder=True)
    data, train, test, steps_per_epoch = pipes.data, pipes.train, pipes.test, pipes.steps_per_epoch
    dist_train = strategy.experimental_distribute_dataset(train)
    dist_test = strategy.experimental_distribute_dataset(test)

    with strategy.scope():
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)
        optimizer = model.optimizer
        train_accuracy = keras.metrics.SparseCategoricalAccuracy()
        test_accuracy = keras.metrics.SparseCategoricalAccuracy()
        test_loss = keras.metrics.Mean()
    loss_fn = per_example_loss()

    def step_fn(inputs, preempt):
        images, labels = inputs
        return gradient_step(model, loss_fn, train_accuracy, images, labels, global_batch), preempt

    @tf.function
    def train_step(iterator, preempt):
        loss, flags = strategy.run(step_fn, args=(next(iterator), preempt))
        # The same sums on every worker: they agree on the step at which to stop.
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None))

    @tf.function
    def test_step(iterator):
        def fn(inputs):
            images, labels = inputs
            logits = model(images, training=False)
            test_accuracy.update_state(labels, logits)
            test_loss.update_state(loss_fn(labels, logits))
        strategy.run(fn, args=(next(iterator),))

    # Checkpoints: everyone reads the chief's; only the chief's writes are kept.
    p = paths(model_dir)
    ckpt_dir = p["checkpoints"] / "custom"
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    latest = tf.train.latest_checkpoint(str(ckpt_dir))
    if latest:
        checkpoint.restore(latest).expect_partial()
    write_dir = str(ckpt_dir) if task.is_chief else tempfile.mkdtemp(prefix=f"tfcluster-ckpt-{task.index}-")
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=3)

    def save(step: int) -> None:
        manager.save(checkpoint_number=step)  # all workers: saving runs collectives
        if not task.is_chief:
            shutil.rmtree(write_dir, ignore_errors=True)

    global_step = int(optimizer.iterations.numpy())
    total_steps = args.epochs * steps_per_epoch
    epoch, step_in_epoch = divmod(global_step, steps_per_epoch)
    emit("start", epoch=epoch, step=step_in_epoch, global_step=global_step, time=f"{time.time():.3f}")
    save_every = steps_per_epoch if args.save_freq == "epoch" else int(args.save_freq)
    iterator = iter(dist_train)
    first_step_time = None
    steps_run = 0
    throughput = Throughput(global_batch)
    loss_sum, loss_steps = 0.0, 0  # the epoch's mean loss, as fit reports it
    train_loss = train_acc = float("nan")
    while global_step < total_steps:
        loss, preempted = train_step(iterator, tf.constant(1 if flag is not None and flag.raised else 0, tf.int32))
        global_step += 1
        steps_run += 1
        loss_sum, loss_steps = loss_sum + float(loss), loss_steps + 1
        throughput.mark(steps_run)
        if first_step_time is None:
            first_step_time = time.time()
            emit("first_step", epoch=global_step // steps_per_epoch, step=(global_step - 1) % steps_per_epoch,
                 time=f"{first_step_time:.3f}")
        if int(preempted.numpy()) > 0:
            save(global_step)
            emit("preempted", global_step=global_step, saved=ckpt_dir)
            return PREEMPTED_EXIT
        if global_step % args.progress_every == 0:
            emit("step", epoch=(global_step - 1) // steps_per_epoch, step=(global_step - 1) % steps_per_epoch + 1,
                 global_step=global_step)
        if args.step_delay > 0:
            time.sleep(args.step_delay)
        if global_step % steps_per_epoch == 0:
            train_loss, train_acc = loss_sum / loss_steps, float(train_accuracy.result())
            emit("epoch", epoch=global_step // steps_per_epoch, loss=f"{train_loss:.4f}",
                 accuracy=f"{train_acc:.4f}", time=f"{time.time():.3f}")
            train_accuracy.reset_states()
            loss_sum, loss_steps = 0.0, 0
        if global_step % save_every == 0 or global_step == total_steps:  # the evaluator waits for the last
            save(global_step)

    test_iterator = iter(dist_test)
    for _ in range(data.num_test // global_batch):
        test_step(test_iterator)
    save_final_model(model, p["final"], task)
    emit("result", task=task.key, epochs=args.epochs, steps_run=steps_run,
         examples_per_sec=f"{throughput.rate():.1f}", accuracy=f"{float(test_accuracy.result()):.4f}",
         loss=f"{float(test_loss.result()):.4f}", train_loss=f"{train_loss:.4f}", train_accuracy=f"{train_acc:.4f}")
    return 0
