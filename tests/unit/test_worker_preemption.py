"""worker/preemption.py's fit callback, driven directly: when it saves and leaves ``fit``, and
when it lets an epoch end first. Real tf_keras objects, no cluster."""

from __future__ import annotations

import pytest

from tests.prereq import require_tf

pytestmark = [pytest.mark.tf]


class FakeBackup:
    """Stands in for BackupAndRestore: records what would be saved."""

    save_freq = 10
    backup_dir = "/state/backup"

    def __init__(self):
        self.saved = []

    def _backup(self, epoch, batch=0):
        self.saved.append((epoch, batch))


@pytest.fixture
def callback():
    require_tf()
    import tensorflow as tf

    from worker.preemption import PreemptionFlag, SaveOnPreemption

    class Model:  # only what the callback reads once it decides to stop
        class optimizer:  # noqa: N801
            iterations = tf.Variable(37, dtype=tf.int64)

    cb = SaveOnPreemption(FakeBackup(), PreemptionFlag())
    cb.model = Model()
    cb.params = {"steps": 10, "epochs": 3}
    return cb


def test_no_flag_anywhere_trains_on(callback):
    callback.on_epoch_begin(1)
    callback.on_train_batch_end(3, {"loss": 0.5, "preempt": 0.0})
    callback.on_train_batch_end(4, None)
    assert callback.backup.saved == []


def test_a_flag_on_any_worker_saves_this_batch_and_leaves_fit(callback, capsys):
    from worker.preemption import Preempted

    callback.on_epoch_begin(1)
    with pytest.raises(Preempted):
        callback.on_train_batch_end(3, {"loss": 0.5, "preempt": 1.0})  # the all-reduced sum
    assert callback.backup.saved == [(1, 3)]
    assert "tfcluster-preempted epoch=1 step=4 global_step=37 saved=/state/backup" in capsys.readouterr().out


def test_the_epochs_last_batch_lets_the_epoch_end_first(callback):
    """Stopping there would skip the epoch's ModelCheckpoint (and, in the last epoch, the end of
    training itself); the next batch stops instead, or fit simply finishes."""
    from worker.preemption import Preempted

    callback.on_epoch_begin(0)
    callback.on_train_batch_end(9, {"preempt": 1.0})
    assert callback.backup.saved == []
    callback.on_epoch_begin(1)
    with pytest.raises(Preempted):
        callback.on_train_batch_end(0, {"preempt": 1.0})
    assert callback.backup.saved == [(1, 0)]


def test_sigterm_only_marks_the_flag_for_the_next_step(callback):
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    callback.flag.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert callback.flag.raised
        callback.on_train_batch_begin(0)
        assert float(callback._raised.numpy()) == 1.0
    finally:
        signal.signal(signal.SIGTERM, before)


def test_needs_a_step_counted_backup():
    require_tf()
    from worker.preemption import PreemptionFlag, SaveOnPreemption

    backup = FakeBackup()
    backup.save_freq = "epoch"
    with pytest.raises(ValueError, match="save_freq=<int>"):
        SaveOnPreemption(backup, PreemptionFlag())
