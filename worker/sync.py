"""Synchronous training under every strategy but parameter_server: default, one_device,
mirrored, central_storage, multi_worker_mirrored and tpu (made in strategies.py). The same
CNN, data and seed; global batch = ``--batch-size`` per replica x replicas.

* ``--loop fit`` (default): tf_keras ``model.fit``. ``BackupAndRestore`` (every epoch, or every
  N steps) lets a restarted task (group) resume where it stopped; ``ModelCheckpoint`` writes
  the per-epoch weights the evaluator reads (the chief only: tf_keras sends other workers'
  copies to temporary directories and removes them).
* ``--loop custom``: ``strategy.experimental_distribute_dataset``, ``strategy.run`` and
  ``strategy.reduce``, with checkpoints through ``tf.train.CheckpointManager`` (the chief writes
  the real one, other workers a temporary copy that is removed).
* On private disks (``TFCLUSTER_STATE_PRIVATE=1``, state.sync: copy) every worker keeps its own
  backups and checkpoints in its state dir, as the chief does: the launcher copies the newest
  from a host still there when the chief's host is lost.
* Either way a SIGTERM saves the step all replicas agree on and exits 143: preemption loses
  no step (preemption.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional

import tensorflow as tf
import tf_keras as keras

from worker import data as data_lib
from worker.background import BackgroundWriter
from worker import strategies
from worker.cluster import TaskInfo
from worker.layout import Layout
from worker.model import build_cnn, create_step_variables, gradient_step, per_example_loss
from worker.preemption import PREEMPTED_EXIT, Preempted, PreemptionFlag, SaveOnPreemption
from worker.progress import ProgressLogger, Throughput, backed_up, emit, epoch_end, fit_result, start_fields
from worker.resize import Position, describe, resume_position
from worker.tensorboard import Scalars


class StepDelay(keras.callbacks.Callback):
    """Sleep per step: slows the demo down for fault-injection tests and live demos."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class ResizableBackupAndRestore(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` whose backups also record the global batch and steps per epoch they
    were written with; a restore with different ones (the group resumed with fewer or more
    workers) converts the interrupted epoch's position by the examples it had consumed
    (resize.py) before tf_keras reads it, so epoch and step numbers stay right and the epoch
    is neither stretched nor run past its end."""

    def __init__(self, *, global_batch: int, steps_per_epoch: int, keep_own: bool = False,
                 background: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.global_batch, self.steps_per_epoch = global_batch, steps_per_epoch
        self.keep_own = keep_own
        # Backups written beside training (background.py), else tf_keras' own, which training waits for.
        self.background = background
        self.writer: Optional[BackgroundWriter] = None

    def _backup(self, epoch, batch=0, wait=False):
        """One backup; ``wait``: its files written before this returns (a save that ends the process)."""
        began = time.time()
        global_step = int(self.model.optimizer.iterations.numpy())
        if self.writer is not None:
            self.writer.save(global_step, wait=wait)
        else:
            super()._backup(epoch, batch)
        backed_up(global_step, began)

    def back_up_now(self, epoch, batch=0):
        """A backup whose files are written when this returns (a preemption's agreed save)."""
        self._backup(epoch, batch, wait=True)

    def on_train_end(self, logs=None):
        self.finish()
        super().on_train_end(logs)

    def finish(self) -> None:
        """The backup in flight written (before the final model, or the process's end)."""
        if self.writer is not None:
            self.writer.finish()

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)  # restores model, optimizer, epoch and batch from the backup
        state = self._training_state
        if self.keep_own:
            # A worker that is not the chief writes to a temporary directory that tf_keras
            # removes after each save; on a private disk it keeps its backups where it restores
            # from, as the chief does (TaskInfo.keeps_own_backup; for the chief a no-op).
            state.write_checkpoint_manager = state.read_checkpoint_manager
        written_batch = tf.Variable(-1, dtype=tf.int64, trainable=False, name="tfcluster_global_batch")
        written_steps = tf.Variable(-1, dtype=tf.int64, trainable=False, name="tfcluster_steps_per_epoch")
        # Added to the backup's checkpoint after its restore: TF restores a dependency attached
        # later from the checkpoint already read (stays -1 in a backup written before these).
        checkpoint = state.read_checkpoint_manager.checkpoint
        checkpoint.tfcluster_global_batch = written_batch
        checkpoint.tfcluster_steps_per_epoch = written_steps
        epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
        old_batch, old_steps = int(written_batch.numpy()), int(written_steps.numpy())
        if epoch >= 0 and batch >= 0 and old_batch > 0 and (old_batch, old_steps) != (self.global_batch,
                                                                                        self.steps_per_epoch):
            before = Position(epoch, batch + 1)
            after = resume_position(epoch, batch + 1, old_batch, old_steps, self.global_batch, self.steps_per_epoch)
            # Back in tf_keras' terms: the epoch and the index of its last batch done, from which
            # it resumes at the next batch (or at the next epoch after an epoch's last batch).
            if after.done > 0:
                saved = (after.epoch, after.done - 1)
            elif after.epoch > 0:
                saved = (after.epoch - 1, self.steps_per_epoch - 1)
            else:
                saved = (-1, -1)
            state._ckpt_saved_epoch.assign(saved[0])
            state._ckpt_saved_batch.assign(saved[1])
            print(describe(old_batch, old_steps, before, self.global_batch, self.steps_per_epoch, after), flush=True)
        # What the backups of this attempt are written with.
        written_batch.assign(self.global_batch)
        written_steps.assign(self.steps_per_epoch)
        if self.background:
            self.writer = self._background_writer(state, checkpoint)

    def _background_writer(self, state, checkpoint) -> BackgroundWriter:
        """The writer of this attempt's backups, over the objects tf_keras' WorkerTrainingState
        checkpoints (tf_keras 2.21) and the two added above, into the directory tf_keras would
        write (the chief's, this task's own on a private disk, else a temporary one)."""
        write = state.write_checkpoint_manager
        items = dict(model=self.model, ckpt_saved_epoch=state._ckpt_saved_epoch,
                     ckpt_saved_batch=state._ckpt_saved_batch, train_counter=self.model._train_counter,
                     tfcluster_global_batch=checkpoint.tfcluster_global_batch,
                     tfcluster_steps_per_epoch=checkpoint.tfcluster_steps_per_epoch)
        return BackgroundWriter(write.directory, items, temporary=write is not state.read_checkpoint_manager,
                                save_counter=checkpoint.save_counter)


def save_final_model(model: keras.Model, target: Path, task: TaskInfo) -> None:
    """Every worker must take part in saving (it runs collectives); only the chief's copy is kept."""
    if task.is_chief:
        model.save(str(target), save_format="tf")
        emit("saved", path=target)
        return
    tmp = tempfile.mkdtemp(prefix=f"tfcluster-{task.type}-{task.index}-")
    try:
        model.save(tmp, save_format="tf")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_sync(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    strategy = strategies.make(args)  # first: logical CPUs must be set before TF initialises
    tf.keras.utils.set_random_seed(args.seed)
    # TPUs cannot read the host-side preemption variable inside the replicated step.
    flag = None if args.no_graceful_preemption or args.strategy == "tpu" else PreemptionFlag()
    if flag is not None:
        flag.install()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    print(f"worker: {task.key} {args.strategy} ({strategies.describe(strategy)}), {task.num_workers or 1} "
          f"task(s), {replicas} replica(s), global batch {global_batch}, loop {args.loop}", flush=True)
    run = run_custom if args.loop == "custom" else run_fit
    return run(args, task, Layout(model_dir), strategy, flag, global_batch)


def run_fit(args, task: TaskInfo, layout: Layout, strategy, flag, global_batch: int) -> int:
    pipes = data_lib.training_pipelines(args, global_batch)
    data, train, test, steps = pipes.data, pipes.train, pipes.test, pipes.steps_per_epoch
    with strategies.scope(strategy, args.strategy):
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)
        create_step_variables(model, train.element_spec)  # the step traced once, not twice
    # The step's metric results are already global in every replica (their variables are
    # all-reduced when read); tf_keras' default ("auto" = "sum" off TPUs) sums them again over
    # MWMS workers, so every batch-level log (TensorBoard, progress) was N workers x the truth.
    model.distribute_reduction_method = "first"

    progress = ProgressLogger(every=args.progress_every, global_batch=global_batch,
                              start_fields=start_fields(args.strategy, strategy, global_batch,
                                                        epochs=args.epochs, steps_per_epoch=steps),
                              scalars=Scalars.train(layout, task))
    backup = ResizableBackupAndRestore(
        global_batch=global_batch,
        steps_per_epoch=steps,
        backup_dir=str(layout.backup),
        # Always a step count ("epoch" = one epoch's steps): then a restore resumes inside an
        # epoch, which a preemption save needs; with "epoch" tf_keras would skip the rest of it.
        save_freq=steps if args.save_freq == "epoch" else args.save_freq,
        # Kept past fit's end until the final model is saved (then removed below): a failure in
        # the final evaluation or save (a hang, a lost host) resumes at the end, not at step 0
        # (which would train every step again).
        delete_checkpoint=False,
        keep_own=task.keeps_own_backup(),
        background=not args.blocking_backups,
        # Not save_before_preemption: tf_keras enables it only on GCP, detected by
        # querying the GCE metadata server from every worker.
    )
    # tf_keras lists the strategies it has tested BackupAndRestore with and refuses the rest;
    # its single-worker path (a CheckpointManager of model and optimizer) serves these two as
    # well (the mirrored resume test covers the same path).
    backup._supported_strategies += (tf.distribute.OneDeviceStrategy,
                                     tf.distribute.experimental.CentralStorageStrategy)
    callbacks = [backup]
    if flag is not None:
        callbacks.append(SaveOnPreemption(backup, flag))
    callbacks += [
        keras.callbacks.ModelCheckpoint(filepath=layout.fit_checkpoint(), save_weights_only=True),
        progress,
    ]
    if args.step_delay > 0:
        callbacks.append(StepDelay(args.step_delay))
    try:
        history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0,
                            validation_data=test if args.epoch_eval else None)
    except Preempted:
        return PREEMPTED_EXIT
    loss, accuracy = model.evaluate(test, verbose=0)
    save_final_model(model, layout.final, task)
    if task.keeps_own_backup():  # whoever writes the backup removes it, once nothing can need it
        shutil.rmtree(layout.backup, ignore_errors=True)
    fit_result(task.key, args.epochs, history, progress, loss, accuracy)
    return 0


class _CustomParts:
    """The model, its optimizer and the metrics of ``--loop custom``, made in the strategy's scope."""

    def __init__(self, args, data, strategy) -> None:
        with strategies.scope(strategy, args.strategy):
            self.model = build_cnn(data.shape, data.num_classes, args.learning_rate)
            self.optimizer = self.model.optimizer
            create_step_variables(self.model)  # the step traced once, not twice
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy()
            self.test_accuracy = keras.metrics.SparseCategoricalAccuracy()
            self.test_loss = keras.metrics.Mean()
        self.loss_fn = per_example_loss()


def _custom_steps(strategy, parts: _CustomParts, global_batch: int, dist_test, num_test: int):
    """train_step(iterator, preempt) -> (loss, preempt flags), each summed over replicas and
    workers; evaluate(): the test split into parts.test_accuracy and parts.test_loss, reset first."""
    model, loss_fn = parts.model, parts.loss_fn

    def step_fn(inputs, preempt):
        images, labels = inputs
        # tf.identity: a per-replica value, which strategy.reduce needs (the input is not).
        return gradient_step(model, loss_fn, parts.train_accuracy, images, labels, global_batch), tf.identity(preempt)

    @tf.function
    def train_step(iterator, preempt):
        loss, flags = strategy.run(step_fn, args=(next(iterator), preempt))
        # The same sums on every replica and worker: they agree on the step at which to stop.
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None))

    @tf.function
    def test_step(iterator):
        def fn(inputs):
            images, labels = inputs
            logits = model(images, training=False)
            parts.test_accuracy.update_state(labels, logits)
            parts.test_loss.update_state(loss_fn(labels, logits))
        strategy.run(fn, args=(next(iterator),))

    def evaluate() -> None:
        parts.test_accuracy.reset_states()
        parts.test_loss.reset_states()
        test_iterator = iter(dist_test)
        for _ in range(num_test // global_batch):
            test_step(test_iterator)

    return train_step, evaluate


class _CustomCheckpoints:
    """Checkpoints: everyone reads the chief's; only the chief's writes are kept. Besides model
    and optimizer they hold the position in the epoch and the global batch and steps per epoch
    they were written with: a group resumed with another number of workers converts the
    position (resize.py); the global step is the optimizer's iterations either way."""

    def __init__(self, layout: Layout, task: TaskInfo, parts: _CustomParts, global_batch: int,
                 steps_per_epoch: int, blocking: bool = False) -> None:
        self.dir = layout.custom_checkpoints
        self.global_batch, self.steps_per_epoch = global_batch, steps_per_epoch
        self.position = {name: tf.Variable(-1, dtype=tf.int64, trainable=False, name=f"tfcluster_{name}")
                         for name in ("epoch", "step_in_epoch", "global_batch", "steps_per_epoch")}
        self.checkpoint = tf.train.Checkpoint(model=parts.model, optimizer=parts.optimizer, **self.position)
        latest = tf.train.latest_checkpoint(str(self.dir))
        if latest:
            self.checkpoint.restore(latest).expect_partial()
        # On a private disk every worker keeps its checkpoints (TaskInfo.keeps_own_backup).
        self.keep = task.keeps_own_backup()
        self.write_dir = str(self.dir) if self.keep else tempfile.mkdtemp(prefix=f"tfcluster-ckpt-{task.index}-")
        # Written beside training (background.py), unless --blocking-backups.
        self.background = not blocking
        self.writer = BackgroundWriter(self.write_dir, dict(model=parts.model, optimizer=parts.optimizer,
                                                            **self.position),
                                       max_to_keep=3 if self.keep else 1, temporary=not self.keep)

    def resume_at(self, global_step: int) -> tuple[int, int]:
        """The (epoch, step in it) to go on from, converted when the group's batch changed."""
        global_batch, steps_per_epoch = self.global_batch, self.steps_per_epoch
        saved = {name: int(v.numpy()) for name, v in self.position.items()}
        if saved["epoch"] < 0:  # a fresh start, or a checkpoint written before positions were recorded
            return divmod(global_step, steps_per_epoch)
        before = Position(saved["epoch"], saved["step_in_epoch"])
        epoch, done = resume_position(before.epoch, before.done, saved["global_batch"], saved["steps_per_epoch"],
                                      global_batch, steps_per_epoch)
        if (saved["global_batch"], saved["steps_per_epoch"]) != (global_batch, steps_per_epoch):
            print(describe(saved["global_batch"], saved["steps_per_epoch"], before, global_batch, steps_per_epoch,
                           Position(epoch, done)), flush=True)
        return epoch, done

    def save(self, step: int, epoch: int, done: int, wait: bool = False) -> None:
        """A checkpoint at ``step`` (all workers: saving runs collectives); ``wait``: written when
        this returns (the save before a stop, the last one: the evaluator waits for it)."""
        for name, value in (("epoch", epoch), ("step_in_epoch", done), ("global_batch", self.global_batch),
                            ("steps_per_epoch", self.steps_per_epoch)):
            self.position[name].assign(value)
        began = time.time()
        self.writer.save(step, wait=wait or not self.background)
        backed_up(step, began)
        if wait or not self.background:
            self.writer.finish()  # (a temporary directory goes: nothing is written there any more)


def _tested(parts: _CustomParts, evaluate) -> dict:
    """The test split's loss and accuracy now, as fit's validation_data reports them."""
    evaluate()
    return {"test_loss": f"{float(parts.test_loss.result()):.4f}",
            "test_accuracy": f"{float(parts.test_accuracy.result()):.4f}"}


def run_custom(args, task: TaskInfo, layout: Layout, strategy, flag, global_batch: int) -> int:
    pipes = data_lib.training_pipelines(args, global_batch, drop_test_remainder=True)
    data, train, test, steps_per_epoch = pipes.data, pipes.train, pipes.test, pipes.steps_per_epoch
    dist_train = strategy.experimental_distribute_dataset(train)
    dist_test = strategy.experimental_distribute_dataset(test)
    parts = _CustomParts(args, data, strategy)
    train_step, evaluate = _custom_steps(strategy, parts, global_batch, dist_test, data.num_test)
    ckpts = _CustomCheckpoints(layout, task, parts, global_batch, steps_per_epoch, blocking=args.blocking_backups)

    global_step = int(parts.optimizer.iterations.numpy())
    epoch, done = ckpts.resume_at(global_step)
    emit("start", epoch=epoch, step=done, global_step=global_step, time=f"{time.time():.3f}",
         **start_fields(args.strategy, strategy, global_batch, epochs=args.epochs, steps_per_epoch=steps_per_epoch))
    iterator = iter(dist_train)
    scalars = Scalars.train(layout, task)
    steps_run = 0
    throughput = Throughput(global_batch)
    loss_sum, loss_steps = 0.0, 0  # the epoch's mean loss, as fit reports it
    train_loss = train_acc = float("nan")
    while epoch < args.epochs:
        loss, preempted = train_step(iterator, tf.constant(1 if flag is not None and flag.raised else 0, tf.int32))
        global_step += 1
        done += 1
        steps_run += 1
        loss_sum, loss_steps = loss_sum + float(loss), loss_steps + 1
        throughput.mark(steps_run)
        if steps_run == 1:
            emit("first_step", epoch=epoch, step=done - 1, global_step=global_step,
                 time=f"{throughput.first_time:.3f}")
        if global_step % args.progress_every == 0:  # with the epoch's running loss and accuracy, as fit's
            emit("step", epoch=epoch, step=done, global_step=global_step, loss=f"{loss_sum / loss_steps:.4f}",
                 accuracy=f"{float(parts.train_accuracy.result()):.4f}", time=f"{time.time():.3f}")
        if args.step_delay > 0:
            time.sleep(args.step_delay)
        epoch_ended = done == steps_per_epoch
        if epoch_ended:
            train_loss, train_acc = loss_sum / loss_steps, float(parts.train_accuracy.result())
            tested = _tested(parts, evaluate) if args.epoch_eval else {}  # as fit's validation_data does
            epoch_end(epoch + 1, global_step, train_loss, train_acc, throughput, parts.optimizer, scalars,
                      extra=tested)
            parts.train_accuracy.reset_states()
            loss_sum, loss_steps = 0.0, 0
            epoch, done = epoch + 1, 0
        # Every worker got the same sum: all stop at this step (after its epoch's end, as fit
        # does, so no epoch line is lost), unless training is complete anyway.
        stop = int(preempted.numpy()) > 0 and epoch < args.epochs
        due = epoch_ended if args.save_freq == "epoch" else global_step % int(args.save_freq) == 0
        if stop:  # (the launcher waits for this save instead of killing a preempted host's peers)
            emit("saving", epoch=epoch, step=done, global_step=global_step, time=f"{time.time():.3f}")
        if due or stop or epoch == args.epochs:  # the evaluator waits for the last
            ckpts.save(global_step, epoch, done, wait=stop or epoch == args.epochs)
        if stop:
            emit("preempted", epoch=epoch, step=done, global_step=global_step, saved=ckpts.dir,
                 time=f"{time.time():.3f}")
            return PREEMPTED_EXIT

    tested = _tested(parts, evaluate)
    save_final_model(parts.model, layout.final, task)
    emit("result", task=task.key, epochs=args.epochs, steps_run=steps_run,
         examples_per_sec=f"{throughput.rate():.1f}", accuracy=tested["test_accuracy"],
         loss=tested["test_loss"], train_loss=f"{train_loss:.4f}", train_accuracy=f"{train_acc:.4f}")
    return 0
