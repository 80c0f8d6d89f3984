"""Graceful preemption with zero lost steps, for the custom loop and for ``model.fit``.

SIGTERM (from ``tfcluster down``, Ctrl-C on the launcher, or a host shutting down) only raises
a local flag. The flags are all-reduced every step, so all workers learn of a preemption at the
same step, say ``tfcluster-saving``, save exactly that step, say ``tfcluster-preempted`` and
exit with 143 (128 + SIGTERM), which the launcher treats as retryable; the next attempt resumes
at the step after it. A host shutting down ends its tasks' sessions at once: the saving line
tells the launcher to let the other hosts' workers finish that save (output.py keeps the
preempted host's own worker going without its reader).

tf_keras' own ``save_before_preemption`` is not used: in TF 2.21 it only activates on GCP (it
asks the GCE metadata server), and TF's default SIGTERM handler swallows the signal.
"""

from __future__ import annotations

import signal
import time

import tensorflow as tf
import tf_keras as keras

from worker.progress import emit

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
    """The fit-loop twin of the custom loop's per-step flag. It wraps the model's ``train_step``
    so that every step also all-reduces the workers' flags, inside the same graph as the
    gradient all-reduce (an extra eager collective per step cost up to a third of fit's
    throughput here), and stores the sum in a variable this callback reads after each batch.
    When the sum is non-zero every worker has BackupAndRestore save this very batch and leaves
    ``fit`` by raising ``Preempted``.

    The step's logs stay exactly the model's own: an extra key there (as this callback once
    returned) makes tf_keras' ``_validate_and_get_metrics_result`` keep the step's logs as the
    epoch's logs instead of the metrics' results -- and under MultiWorkerMirroredStrategy those
    step logs are *summed* over workers (``reduce_per_replica``, reduction "auto"), so every
    callback saw accuracy above 1.

    List it after the ``BackupAndRestore`` it saves through, which must use an integer
    ``save_freq``: only then does a restore resume inside an epoch (with ``"epoch"`` tf_keras
    would skip the rest of the interrupted epoch)."""

    def __init__(self, backup: keras.callbacks.BackupAndRestore, flag: PreemptionFlag) -> None:
        super().__init__()
        if not isinstance(backup.save_freq, int):
            raise ValueError("SaveOnPreemption needs BackupAndRestore(save_freq=<int>) to resume mid-epoch")
        self.backup = backup
        self.flag = flag
        # Plain (not distributed) variables, created outside any strategy scope: this worker's
        # flag, and the all-reduced sum the last step stored.
        self._raised = tf.Variable(0.0, trainable=False, name="tfcluster_preempt")
        self.agreed = tf.Variable(0.0, trainable=False, name="tfcluster_preempt_agreed")
        self._told = False
        self._epoch = 0

    def set_model(self, model) -> None:
        super().set_model(model)
        if getattr(model, "_tfcluster_preempt_wrapped", False):
            return
        inner, raised, agreed = model.train_step, self._raised, self.agreed

        def train_step(data):
            logs = inner(data)
            ctx = tf.distribute.get_replica_context()
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(raised)) if ctx else tf.identity(raised)
            # Every replica stores the same sum; the logs are returned untouched.
            with tf.control_dependencies([agreed.assign(total)]):
                return tf.nest.map_structure(tf.identity, logs)

        model.train_step = train_step
        # A flag, not the variable: a variable set on the model would be tracked, checkpointed
        # with the backup, and restored as "preempted" on the next attempt.
        model._tfcluster_preempt_wrapped = True
        model.train_function = None  # fit builds it anew, around the wrapped step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.flag.raised and not self._told:
            self._told = True
            self._raised.assign(1.0)  # this step's all-reduce tells every worker

    def on_train_batch_end(self, batch, logs=None):
        if float(self.agreed.numpy()) <= 0:
            return
        steps = (self.params or {}).get("steps")
        if steps and batch + 1 >= steps:
            # The epoch's last batch (every worker sees the same count): let the epoch end, so
            # its ModelCheckpoint is written; the next batch stops, or fit simply finishes.
            return
        # Everyone at the same batch: back it up (the checkpoint records epoch and batch). The
        # saving line first: the launcher waits for this save instead of killing a preempted
        # host's peers (launcher/supervise/phases.py, _let_survivors_save).
        global_step = int(self.model.optimizer.iterations.numpy())
        emit("saving", epoch=self._epoch, step=batch + 1, global_step=global_step, time=f"{time.time():.3f}")
        # Written before the process ends (a backup in the background would die with it):
        # ResizableBackupAndRestore's back_up_now; a plain BackupAndRestore writes in the caller anyway.
        getattr(self.backup, "back_up_now", self.backup._backup)(epoch=self._epoch, batch=batch)
        emit("preempted", epoch=self._epoch, step=batch + 1, global_step=global_step, saved=self.backup.backup_dir,
             time=f"{time.time():.3f}")
        raise Preempted()
