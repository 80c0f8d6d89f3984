"""The parameter_server chief's ``--loop fit`` (the default): tf_keras ``model.fit`` with a
``DatasetCreator``, ``BackupAndRestore`` per epoch (under PSS tf_keras skips its batch-level
backups), ``ModelCheckpoint`` per epoch for the evaluator, and progress lines from the
optimizer's step counter on the ps (``PssProgress``)."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import tensorflow as tf
import tf_keras as keras

from worker.cluster import TaskInfo
from worker.layout import Layout
from worker.model import build_cnn
from worker.progress import Throughput, emit, epoch_end, fit_result
from worker.pss.chief import (describe_partitioning, evaluate_and_save, evaluate_plain, load_data, make_dataset_fn,
                              make_strategy, start_fields, steps_per_epoch)
from worker.tensorboard import Scalars


class PssProgress(keras.callbacks.Callback):
    """Progress lines under PSS. tf_keras refuses batch-level callbacks under PSS unless they
    accept RemoteValue logs (``_supports_tf_logs``); we never read the logs per batch, only the
    optimizer's step counter on the ps."""

    def __init__(self, every: int, batch: int, step_delay: float = 0.0, start_fields: dict | None = None,
                 evaluate=None, scalars: Scalars | None = None) -> None:
        super().__init__()
        self.evaluate = evaluate  # --epoch-eval: model -> (test loss, test accuracy) after every epoch
        self.scalars = scalars
        self.start_fields = dict(start_fields or {})
        self._supports_tf_logs = True
        self.every = max(1, every)
        self.batch = batch
        self.step_delay = step_delay
        self._epoch = 0
        self._emitted = 0
        self._started = False
        self.first_step_time = None
        self.start_global = 0  # the optimizer's step when this attempt began (a resume starts past 0)
        self.last_global = 0
        self.done_time: float | None = None  # when this epoch's steps were done (mark_epoch)
        self.throughput = Throughput(batch)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._emitted = 0

    def on_train_batch_begin(self, batch, logs=None):
        if not self._started:
            self._started = True
            g = self.start_global = int(self.model.optimizer.iterations.numpy())
            emit("start", epoch=self._epoch, step=batch, global_step=g, time=f"{time.time():.3f}", **self.start_fields)

    def on_train_batch_end(self, batch, logs=None):
        if self.first_step_time is None:
            # Steps are asynchronous: wait for the first one to finish so the timing is real.
            self.model._cluster_coordinator.join()
            self.first_step_time = time.time()
            self.throughput.mark(int(self.model.optimizer.iterations.numpy()), self.first_step_time)
            emit("first_step", epoch=self._epoch, step=batch, global_step=int(self.model.optimizer.iterations.numpy()),
                 time=f"{self.first_step_time:.3f}")
        # ``batch`` is the last step of the execution (several with --steps-per-execution).
        if (batch + 1) // self.every > self._emitted:
            self._emitted = (batch + 1) // self.every
            emit("step", epoch=self._epoch, step=batch + 1,
                 global_step=int(self.model.optimizer.iterations.numpy()), time=f"{time.time():.3f}")
        if self.step_delay > 0:
            time.sleep(self.step_delay)

    def steps_done(self) -> keras.callbacks.Callback:
        """A callback to put before the saves: at its epoch end the epoch's steps are done (fit
        joined them), and it marks them there, so neither examples/s nor the epoch line's time
        counts the saves that follow."""
        progress = self

        class StepsDone(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                progress.mark_epoch()

        return StepsDone()

    def mark_epoch(self) -> None:
        """The epoch's steps are done: the optimizer's step (exact: fit joined) and now."""
        self.last_global = int(self.model.optimizer.iterations.numpy())
        self.done_time = time.time()
        self.throughput.mark(self.last_global, self.done_time)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.done_time is None:  # (no steps_done() before the saves)
            self.mark_epoch()
        done, self.done_time = self.done_time, None
        tested = {}
        if self.evaluate is not None:
            test_loss, test_accuracy = self.evaluate(self.model)
            tested = {"test_loss": f"{test_loss:.4f}", "test_accuracy": f"{test_accuracy:.4f}"}
        epoch_end(epoch + 1, self.last_global, float(logs.get("loss", float("nan"))),
                  float(logs.get("accuracy", float("nan"))), self.throughput, self.model.optimizer, self.scalars,
                  extra=tested, at=done)

    def examples_per_sec(self) -> float:
        return self.throughput.rate()

    @property
    def steps_run(self) -> int:
        """Steps trained in this attempt (exact after fit: the last epoch end joined)."""
        return max(0, self.last_global - self.start_global)


def run_fit(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy = make_strategy(args, task)
    data = load_data(args)
    steps = steps_per_epoch(args, data)
    p = Layout(model_dir)
    if args.save_freq != "epoch":
        print("worker: note: under parameter_server tf_keras BackupAndRestore backs up per epoch only; "
              "use --loop custom for step-granular checkpoints", flush=True)
    with strategy.scope():
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)
        if args.steps_per_execution > 1:
            model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                          steps_per_execution=args.steps_per_execution)
    describe_partitioning(model)
    progress = PssProgress(args.progress_every, args.batch_size, args.step_delay * args.steps_per_execution,
                           start_fields={**start_fields(strategy, task, args.batch_size),
                                         "epochs": args.epochs, "steps_per_epoch": steps},
                           evaluate=(lambda m: evaluate_plain(m, data, args)[:2]) if args.epoch_eval else None,
                           scalars=Scalars.train(p, task))
    callbacks = [
        # First: the epoch's steps are done (fit joined them) before the saves below take their
        # time, which is not training time; the epoch line (progress, last) comes once they are
        # written, so a kill after it resumes at that epoch or later.
        progress.steps_done(),
        # Kept until the final model is saved (removed below): a failure in the final evaluation
        # or save resumes at the end, not at step 0 (as sync.py's fit).
        keras.callbacks.BackupAndRestore(backup_dir=str(p.backup), delete_checkpoint=False),
        keras.callbacks.ModelCheckpoint(filepath=p.fit_checkpoint(), save_weights_only=True),
        progress,
    ]
    history = model.fit(
        keras.utils.experimental.DatasetCreator(make_dataset_fn(args)),
        epochs=args.epochs,
        steps_per_epoch=steps,
        callbacks=callbacks,
        verbose=0,
    )
    global_step = int(model.optimizer.iterations.numpy())
    loss, accuracy = evaluate_and_save(model, data, args, p.final)
    shutil.rmtree(p.backup, ignore_errors=True)  # the chief: the only PSS task that writes it
    fit_result(task.key, args.epochs, history, progress, loss, accuracy, global_step=global_step)
    return 0
