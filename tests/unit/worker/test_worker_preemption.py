"""worker/preemption.py's fit callback, driven directly: when it saves and leaves ``fit``, and
when it lets an epoch end first. Real tf_keras objects, no cluster."""

from __future__ import annotations

import pytest

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
    callback.on_train_batch_end(3, {"loss": 0.5})
    callback.on_train_batch_end(4, None)
    assert callback.backup.saved == []


def test_a_flag_on_any_worker_saves_this_batch_and_leaves_fit(callback, capsys):
    from worker.preemption import Preempted

    callback.on_epoch_begin(1)
    callback.agreed.assign(1.0)  # what the wrapped step stores: the all-reduced sum
    with pytest.raises(Preempted):
        callback.on_train_batch_end(3, {"loss": 0.5})
    assert callback.backup.saved == [(1, 3)]
    assert "tfcluster-preempted epoch=1 step=4 global_step=37 saved=/state/backup" in capsys.readouterr().out


def test_the_agreed_save_is_written_before_fit_is_left_when_backups_go_in_the_background(callback):
    """The worker's backup writes in the background (worker/background.py): the save before a
    stop must use its ``back_up_now`` (written when it returns), or the process could end first."""
    from worker.preemption import Preempted

    waited = []
    callback.backup.back_up_now = lambda epoch, batch=0: waited.append((epoch, batch))
    callback.on_epoch_begin(2)
    callback.agreed.assign(1.0)
    with pytest.raises(Preempted):
        callback.on_train_batch_end(5, {})
    assert waited == [(2, 5)] and callback.backup.saved == []


def test_the_epochs_last_batch_lets_the_epoch_end_first(callback):
    """Stopping there would skip the epoch's ModelCheckpoint (and, in the last epoch, the end of
    training itself); the next batch stops instead, or fit simply finishes."""
    from worker.preemption import Preempted

    callback.on_epoch_begin(0)
    callback.agreed.assign(1.0)
    callback.on_train_batch_end(9, {})
    assert callback.backup.saved == []
    callback.on_epoch_begin(1)
    with pytest.raises(Preempted):
        callback.on_train_batch_end(0, {})
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
    from worker.preemption import PreemptionFlag, SaveOnPreemption

    backup = FakeBackup()
    backup.save_freq = "epoch"
    with pytest.raises(ValueError, match="save_freq=<int>"):
        SaveOnPreemption(backup, PreemptionFlag())


def test_the_wrapped_step_keeps_the_models_logs_and_stores_the_flag():
    """The step's logs must stay the model's own metric names: an extra key made tf_keras keep
    the (under MWMS summed-over-workers) step logs as epoch logs, and the epoch's accuracy went above 1."""
    import numpy as np
    import tf_keras as keras

    from worker.preemption import PreemptionFlag, SaveOnPreemption

    model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,))])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    backup = FakeBackup()
    cb = SaveOnPreemption(backup, PreemptionFlag())
    cb.set_model(model)
    x, y = np.zeros((4, 3), "float32"), np.zeros((4,), "int64")
    logs = model.train_on_batch(x, y, return_dict=True)
    assert sorted(logs) == ["accuracy", "loss"]
    assert float(cb.agreed.numpy()) == 0.0
    cb._raised.assign(1.0)
    model.train_on_batch(x, y)
    assert float(cb.agreed.numpy()) == 1.0
