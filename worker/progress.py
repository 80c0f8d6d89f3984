"""Progress lines the launcher and people read: where training (re)started, a heartbeat every
N steps (the hang watchdog's evidence of life), and a final summary line.

Lines start with ``tfcluster-progress`` / ``tfcluster-result`` so tests and tools can parse them.
"""

from __future__ import annotations

import time

import tf_keras as keras


def emit(kind: str, **fields) -> None:
    parts = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"tfcluster-{kind} {parts}", flush=True)


class ProgressLogger(keras.callbacks.Callback):
    def __init__(self, every: int = 10, global_batch: int = 0) -> None:
        super().__init__()
        self.every = max(1, every)
        self.global_batch = global_batch
        self._epoch = 0
        self._first = True
        self.first_step_time = None
        self.steps_run = 0
        self.train_start = None

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
            emit("start", epoch=self._epoch, step=batch, global_step=iterations, time=f"{time.time():.3f}")

    def on_train_batch_end(self, batch, logs=None):
        self.steps_run += 1
        if self.first_step_time is None:
            self.first_step_time = time.time()
            emit("first_step", epoch=self._epoch, step=batch, time=f"{self.first_step_time:.3f}")
        if (batch + 1) % self.every == 0:
            # No per-batch loss here: under MWMS tf_keras reports it summed over replicas.
            emit("step", epoch=self._epoch, step=batch + 1, global_step=int(self.model.optimizer.iterations.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        emit("epoch", epoch=epoch + 1, loss=f"{logs.get('loss', float('nan')):.4f}",
             accuracy=f"{logs.get('accuracy', float('nan')):.4f}")

    def examples_per_sec(self) -> float:
        """Training throughput after the first step (which includes tracing and warm-up)."""
        if self.first_step_time is None or self.steps_run < 2:
            return 0.0
        elapsed = time.time() - self.first_step_time
        return (self.steps_run - 1) * self.global_batch / elapsed if elapsed > 0 else 0.0
