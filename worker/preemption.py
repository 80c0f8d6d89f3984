"""Graceful preemption with zero lost steps, for the custom loop and for ``model.fit``.

SIGTERM (from ``tfcluster down``, Ctrl-C on the launcher, or a host shutting down) only raises
a local flag. The flags are all-reduced every step, so all workers learn of a preemption at the
same step, save exactly that step and exit with 143 (128 + SIGTERM), which the launcher treats
as retryable; the next attempt resumes at the step after it.

tf_keras' own ``save_before_preemption`` is not used: in TF 2.21 it only activates on GCP (it
asks the GCE metadata server), and TF's default SIGTERM handler swallows the signal.
"""

from __future__ import annotations

import signal
import time

import tensorflow as tf
import tf_keras as keras

from .progress import emit

PREEMPTED_EXIT = 128 + signal.SIGTERM


class PreemptionFlag:
    """Set by SIGTERM; read once per step and all-reduced across workers."""

    def __init__(self) -> None:
        self.raised = False
        self.received_at = None

    def install(self) -> None:
        # Installed after the strategy exists, replacing the handler TF sets (which swallows SIGTERM).
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        if not self.raised:
            self.raised = True
            self.received_at = time.time()
            print("worker: SIGTERM received; saving at the next step all workers agree on", flush=True)


class Preempted(Exception):
    """Raised out of ``model.fit`` once the agreed step is saved."""


class SaveOnPreemption(keras.callbacks.Callback):
    """The fit-loop twin of the custom loop's per-step flag: after every batch, all-reduce the
    workers' flags; when any is set, every worker has BackupAndRestore save this very batch and
    leaves ``fit`` (raising ``Preempted``). List it after the ``BackupAndRestore`` it saves
    through, which must use an integer ``save_freq``: only then does a restore resume inside
    an epoch (with ``"epoch"`` tf_keras would skip the rest of the interrupted epoch)."""

    def __init__(self, strategy: tf.distribute.Strategy, backup: keras.callbacks.BackupAndRestore,
                 flag: PreemptionFlag, every: int = 1) -> None:
        super().__init__()
        if not isinstance(backup.save_freq, int):
            raise ValueError("SaveOnPreemption needs BackupAndRestore(save_freq=<int>) to resume mid-epoch")
        self.backup = backup
        self.flag = flag
        self.every = max(1, every)  # the same count on every worker, so they all check together
        self._batches = 0
        self._epoch = 0

        @tf.function
        def agree(raised):
            flags = strategy.run(tf.identity, args=(raised,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)

        self._agree = agree

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches % self.every:
            return
        if int(self._agree(tf.constant(1 if self.flag.raised else 0, tf.int32)).numpy()) == 0:
            return
        # Everyone at the same batch: back it up (the checkpoint records epoch and batch).
        self.backup._backup(epoch=self._epoch, batch=batch)
        emit("preempted", epoch=self._epoch, step=batch + 1,
             global_step=int(self.model.optimizer.iterations.numpy()), saved=self.backup.backup_dir)
        raise Preempted()
