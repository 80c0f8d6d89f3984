"""Progress lines the launcher and people read: where training (re)started, a heartbeat every
N steps (the hang watchdog's evidence of life), and a final summary line.

Lines start with ``tfcluster-<kind>`` (start, first_step, step, epoch, result, ...) followed by
``key=value`` fields, so tests and tools can parse them; fields are only ever added.
"""

from __future__ import annotations

import time

import tf_keras as keras


class Throughput:
    """Training examples/s, the one place it is computed: over the steps after the first (which
    includes tracing and warm-up), from the first step's end to the last step's end -- the
    evaluation and saving that follow training are not counted. ``batch`` is the number of
    examples one step consumes (the global batch; under PSS one worker's batch)."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.first_time = None
        self.first_step = 0
        self.last_time = None
        self.last_step = 0

    def mark(self, step: int, now: float | None = None) -> None:
        """``step`` steps are done at ``now`` (any monotone step count: a global step or a
        count of steps run)."""
        now = time.time() if now is None else now
        if self.first_time is None:
            self.first_time, self.first_step = now, step
        self.last_time, self.last_step = now, step

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step

    def rate(self) -> float:
        if self.first_time is None:
            return 0.0
        elapsed = self.last_time - self.first_time
        return self.steps * self.batch / elapsed if self.steps > 0 and elapsed > 0 else 0.0


def emit(kind: str, **fields) -> None:
    parts = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"tfcluster-{kind} {parts}", flush=True)


class ProgressLogger(keras.callbacks.Callback):
    def __init__(self, every: int = 10, global_batch: int = 0, start_fields: dict | None = None) -> None:
        super().__init__()
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
            emit("first_step", epoch=self._epoch, step=batch, time=f"{self.first_step_time:.3f}")
        if (batch + 1) % self.every == 0:
            # The epoch's running loss and accuracy so far (true under MWMS only with the
            # model's distribute_reduction_method "first": see sync.run_fit).
            logs = logs or {}
            emit("step", epoch=self._epoch, step=batch + 1, global_step=int(self.model.optimizer.iterations.numpy()),
                 loss=f"{float(logs.get('loss', float('nan'))):.4f}",
                 accuracy=f"{float(logs.get('accuracy', float('nan'))):.4f}", time=f"{time.time():.3f}")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        emit("epoch", epoch=epoch + 1, loss=f"{logs.get('loss', float('nan')):.4f}",
             accuracy=f"{logs.get('accuracy', float('nan')):.4f}", time=f"{time.time():.3f}")

    def examples_per_sec(self) -> float:
        return self.throughput.rate()
