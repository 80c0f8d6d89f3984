"""Progress records the launcher and people read: where training (re)started, a heartbeat every
N steps, and a final summary line, on the task's control channel (``emit``).

Records start with ``tfcluster-<kind>`` (start, first_step, step, epoch, result, ...) followed by
``key=value`` fields, so tests and tools can parse them; fields are only ever added.
"""

from __future__ import annotations

import time
from typing import Optional

import tf_keras as keras

# The one place examples/s is computed (TF-free: the launcher's live view and tfcluster compare use it too),
# and the one place the line format is written (launcher/contract/progress.py owns it: ``format_line``/``parse``).
from launcher.contract.progress import Throughput, format_line, report  # noqa: F401

from worker.tensorboard import Scalars, learning_rate


def emit(kind: str, **fields) -> None:
    """One progress record, on the task's control channel (``progress.report``)."""
    report(format_line(kind, **fields))


def backed_up(global_step: int, began: float) -> None:
    """A backup (or checkpoint) written at ``global_step``, begun at ``began``: the
    ``tfcluster-backup`` line, whose ``seconds`` tfcluster counts as checkpoint time in the run's
    goodput (launcher/record/goodput.py)."""
    now = time.time()
    emit("backup", global_step=global_step, seconds=f"{now - began:.3f}", time=f"{now:.3f}")


def start_fields(name: str, strategy, global_batch: int, **extra) -> dict:
    """The strategy part of every ``tfcluster-start`` line: the strategy the task was asked for
    (``name``, the spec's), the ``tf.distribute`` class TensorFlow built for it
    (``strategy_class``, module and class name, so a reader can tell OneDeviceStrategy from the
    default strategy), its replicas and the examples a step consumes; then ``extra``."""
    cls = type(strategy)
    return {"strategy": name, "strategy_class": f"{cls.__module__}.{cls.__qualname__}",
            "replicas": strategy.num_replicas_in_sync, "global_batch": global_batch, **extra}


def epoch_end(epoch: int, global_step: int, loss: float, accuracy: float, throughput: Throughput, optimizer,
              scalars: Optional[Scalars], extra: Optional[dict] = None, at: Optional[float] = None) -> None:
    """The end of an epoch, reported in one place by every loop: the ``tfcluster-epoch`` line
    and (the chief's ``scalars``) the same numbers as TensorBoard scalars at ``global_step``.
    examples/s is the epoch's own (``Throughput.lap``; the first epoch of an attempt leaves
    out its first step). ``extra``: more fields for the line (--epoch-eval's test_loss and
    test_accuracy). ``at``: when the epoch's steps were done, if not now (PSS's fit: before its
    saves)."""
    rate, lr = throughput.lap(), learning_rate(optimizer)
    emit("epoch", epoch=epoch, global_step=global_step, loss=f"{loss:.4f}", accuracy=f"{accuracy:.4f}",
         examples_per_sec=f"{rate:.1f}", learning_rate=f"{lr:.6g}", **(extra or {}),
         time=f"{time.time() if at is None else at:.3f}")
    if scalars is not None:
        scalars.write(global_step, loss=loss, accuracy=accuracy, examples_per_sec=rate, learning_rate=lr)


def fit_result(task_key: str, epochs: int, history, progress: "ProgressLogger", loss: float, accuracy: float,
               **extra) -> None:
    """The ``tfcluster-result`` line after ``model.fit`` (every strategy's fit path): test
    ``loss``/``accuracy``, this attempt's steps and examples/s from ``progress``, and the last
    epoch's training metrics as History recorded them (what every callback saw)."""
    last = {k: history.history.get(k, [float("nan")])[-1] for k in ("loss", "accuracy")}
    emit("result", task=task_key, epochs=epochs, epochs_run=len(history.history.get("loss", [])),
         steps_run=progress.steps_run, examples_per_sec=f"{progress.examples_per_sec():.1f}",
         accuracy=f"{accuracy:.4f}", loss=f"{loss:.4f}", train_loss=f"{last['loss']:.4f}",
         train_accuracy=f"{last['accuracy']:.4f}", **extra)


class ProgressLogger(keras.callbacks.Callback):
    def __init__(self, every: int = 10, global_batch: int = 0, start_fields: dict | None = None,
                 scalars: Optional[Scalars] = None) -> None:
        super().__init__()
        self.scalars = scalars
        self.start_fields = dict(start_fields or {})  # appended to the start line (strategy, replicas, ...)
        self.every = max(1, every)
        self.global_batch = global_batch
        self._epoch = 0
        self._first = True
        self.first_step_time = None
        self.steps_run = 0
        self.train_start = None
        self.throughput = Throughput(global_batch)

    def on_train_begin(self, logs=None):
        self.train_start = time.time()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._first:
            self._first = False
            iterations = int(self.model.optimizer.iterations.numpy())
            # Where this attempt starts: epoch/step inside the epoch, and the global step,
            # which BackupAndRestore restores (so a resume shows global_step > 0).
            emit("start", epoch=self._epoch, step=batch, global_step=iterations, time=f"{time.time():.3f}",
                 **self.start_fields)

    def on_train_batch_end(self, batch, logs=None):
        self.steps_run += 1
        self.throughput.mark(self.steps_run)
        if self.first_step_time is None:
            self.first_step_time = time.time()
            emit("first_step", epoch=self._epoch, step=batch, global_step=int(self.model.optimizer.iterations.numpy()),
                 time=f"{self.first_step_time:.3f}")
        if (batch + 1) % self.every == 0:
            # The epoch's running loss and accuracy so far (true under MWMS only with the
            # model's distribute_reduction_method "first": see sync.run_fit).
            logs = logs or {}
            emit("step", epoch=self._epoch, step=batch + 1, global_step=int(self.model.optimizer.iterations.numpy()),
                 loss=f"{float(logs.get('loss', float('nan'))):.4f}",
                 accuracy=f"{float(logs.get('accuracy', float('nan'))):.4f}", time=f"{time.time():.3f}")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        # With validation_data (--epoch-eval) fit has evaluated the test split: test_* fields.
        tested = {f"test_{k}": f"{float(logs['val_' + k]):.4f}" for k in ("loss", "accuracy") if "val_" + k in logs}
        epoch_end(epoch + 1, int(self.model.optimizer.iterations.numpy()), float(logs.get("loss", float("nan"))),
                  float(logs.get("accuracy", float("nan"))), self.throughput, self.model.optimizer, self.scalars,
                  extra=tested)

    def on_train_end(self, logs=None):
        if self._first:  # no step left (a restart after the last one): say where it resumed
            self._first = False
            emit("start", epoch=self.params.get("epochs", self._epoch), step=0,
                 global_step=int(self.model.optimizer.iterations.numpy()), time=f"{time.time():.3f}",
                 **self.start_fields)

    def examples_per_sec(self) -> float:
        return self.throughput.rate()
