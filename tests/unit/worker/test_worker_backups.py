"""worker/background.py: backups written beside training. Through a real tf_keras ``model.fit``
with the worker's ResizableBackupAndRestore (no cluster: the default strategy, a tiny model),
and the writer itself held mid-write by a write callback (TensorFlow runs a write's callbacks
in its background thread, before the checkpoint manager records the checkpoint)."""

from __future__ import annotations

import threading

import pytest

pytestmark = [pytest.mark.tf]


def _model_and_data():
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    tf.keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).rand(40, 4).astype("float32")
    y = (x.sum(axis=1) > 2).astype("int64")
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(10)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, data


def _backup(tmp_path, background=True):
    from worker.sync import ResizableBackupAndRestore

    return ResizableBackupAndRestore(global_batch=10, steps_per_epoch=4, backup_dir=str(tmp_path / "b"),
                                     save_freq=3, delete_checkpoint=False, background=background)


def test_background_backups_hold_the_last_saved_step_and_the_resize_fields(tmp_path):
    """Every 3 steps of 10 (4 steps an epoch, 3 epochs: steps 3, 6, 9, 12): the newest backup is
    numbered by its global step, complete once fit returns, and holds what a restore needs
    (the model's weights as at that step, the position, the global batch it was written at)."""
    import numpy as np
    import tensorflow as tf

    model, data = _model_and_data()
    backup = _backup(tmp_path)
    model.fit(data, epochs=3, steps_per_epoch=4, callbacks=[backup], verbose=0)
    latest = tf.train.latest_checkpoint(str(tmp_path / "b" / "chief"))
    assert latest is not None and latest.endswith("ckpt-12"), latest
    names = dict(tf.train.list_variables(latest))
    assert any("tfcluster_global_batch" in n for n in names) and any("ckpt_saved_batch" in n for n in names)
    assert int(tf.train.load_variable(latest, "tfcluster_global_batch/.ATTRIBUTES/VARIABLE_VALUE")) == 10
    assert int(tf.train.load_variable(latest, "ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE")) == 3
    kernel = [n for n in names if n.startswith("model/") and "kernel" in n and "optimizer" not in n]
    assert kernel, sorted(names)
    assert np.allclose(tf.train.load_variable(latest, kernel[0]), model.layers[0].kernel.numpy())
    # A blocking backup (tf_keras' own) would have used tf_keras' counter: ckpt-4, not the step.
    model2, data2 = _model_and_data()
    model2.fit(data2, epochs=3, steps_per_epoch=4, callbacks=[_backup(tmp_path / "sync", background=False)],
               verbose=0)
    assert tf.train.latest_checkpoint(str(tmp_path / "sync" / "b" / "chief")).endswith("ckpt-4")


def test_a_write_in_flight_is_not_the_newest_backup_and_training_does_not_wait_for_it(tmp_path, monkeypatch):
    """save() returns while the write is held; meanwhile the state file still names the backup
    before (a task killed now resumes from that one); finish() waits for the write."""
    import tensorflow as tf

    import worker.background as background

    release, writing = threading.Event(), threading.Event()

    def hold(path):
        writing.set()
        assert release.wait(60), "the test never released the write"

    model, _ = _model_and_data()
    writer = background.BackgroundWriter(str(tmp_path / "w"), {"model": model})
    assert writer.save(3, wait=True).endswith("ckpt-3")  # written in the caller
    monkeypatch.setattr(background, "ASYNC", tf.train.CheckpointOptions(enable_async=True,
                                                                        experimental_write_callbacks=[hold]))
    writer.save(6)  # returns with the write held in the background thread
    assert writing.wait(60)
    assert tf.train.latest_checkpoint(str(tmp_path / "w")).endswith("ckpt-3")
    release.set()
    writer.finish()
    assert tf.train.latest_checkpoint(str(tmp_path / "w")).endswith("ckpt-6")
    assert sorted(p.name for p in (tmp_path / "w").glob("ckpt-*.index")) == ["ckpt-6.index"]  # max_to_keep 1


def test_a_temporary_directory_goes_once_its_write_is_done(tmp_path):
    model, _ = _model_and_data()
    from worker.background import BackgroundWriter

    writer = BackgroundWriter(str(tmp_path / "workertemp_1"), {"model": model}, temporary=True)
    writer.save(5)
    writer.finish()
    assert not (tmp_path / "workertemp_1").exists()
    kept = BackgroundWriter(str(tmp_path / "own"), {"model": model})
    kept.save(5)
    kept.finish()
    assert (tmp_path / "own" / "checkpoint").exists()
