"""worker/resize.py: where a backup written at one global batch resumes at another (an elastic
MWMS group restarted with fewer or more workers), and the fit loop's
ResizableBackupAndRestore doing it inside a real tf_keras ``model.fit`` (no cluster: the
default strategy, a tiny model, batches of 10 and 20 standing in for 1 and 2 workers)."""

from __future__ import annotations

import pytest

from worker.resize import Position, resume_position


@pytest.mark.parametrize("old, new, expected", [
    # digits (1437 examples), --batch-size 32: 2 workers = 64 a step, 23 steps; 1 worker = 32, 45 steps
    ((1, 6, 64, 23), (32, 45), (1, 12)),      # shrink: 6 x 64 examples = 12 x 32
    ((1, 41, 32, 45), (64, 23), (1, 20)),     # grow: 41 x 32 = 20.5 x 64 -> 20 (repeat half a step, skip none)
    ((1, 44, 32, 45), (64, 23), (1, 22)),     # one step left stays one step left
    ((1, 23, 64, 23), (32, 45), (2, 0)),      # a finished epoch resumes at the next one
    ((0, 0, 64, 23), (32, 45), (0, 0)),
    ((2, 1, 32, 45), (96, 15), (2, 0)),       # 3 workers: less than one new step done
    ((1, 7, 64, 30), (32, 30), (1, 7)),       # --steps-per-epoch 30: an epoch is 30 steps whatever their size
    ((1, 7, 64, 23), (64, 23), (1, 7)),       # nothing changed
    ((1, 7, -1, -1), (32, 45), (1, 7)),       # a backup that did not record them: as it is
    ((1, 30, -1, -1), (64, 23), (2, 0)),      # ... or, past the new epoch's end, the next epoch
])
def test_resume_position(old, new, expected):
    assert resume_position(*old, *new) == Position(*expected)


def test_resume_position_never_skips_or_overruns_an_epoch():
    num_train = 1437
    for old_batch in (32, 64, 96, 128):
        for new_batch in (32, 64, 96, 128):
            old_steps, new_steps = -(-num_train // old_batch), -(-num_train // new_batch)
            for done in range(old_steps):
                pos = resume_position(3, done, old_batch, old_steps, new_batch, new_steps)
                assert pos.epoch == 3 and 0 <= pos.done < new_steps
                # the examples the new position counts as done: none skipped, less than a step repeated
                assert done * old_batch - new_batch < pos.done * new_batch <= done * old_batch


# ---------------------------------------------------------------- a real model.fit


class Stop(Exception):
    pass


def _fit(tmp_path, batch, epochs, stop_at=None):
    """model.fit over 100 examples at ``batch`` a step (steps per epoch: one pass) with the
    worker's backup; ``stop_at=(epoch, batch index)`` backs up after that batch and leaves fit
    as the preemption callback does. Returns (the (epoch, batch) fit started at, the optimizer's
    iterations then, batches run, epochs ended)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from worker.sync import ResizableBackupAndRestore

    tf.keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).rand(100, 4).astype("float32")
    y = (x.sum(axis=1) > 2).astype("int64")
    steps = -(-100 // batch)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backup = ResizableBackupAndRestore(global_batch=batch, steps_per_epoch=steps, backup_dir=str(tmp_path / "b"),
                                       save_freq=1000, delete_checkpoint=True)
    seen = {"batches": 0, "epochs": 0}

    class Watch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, b, logs=None):
            seen.setdefault("start", (self.epoch, b, int(self.model.optimizer.iterations.numpy())))

        def on_train_batch_end(self, b, logs=None):
            seen["batches"] += 1
            if stop_at == (self.epoch, b):  # as the preemption's save: written before fit is left
                backup.back_up_now(epoch=self.epoch, batch=b)
                raise Stop()

        def on_epoch_end(self, epoch, logs=None):
            seen["epochs"] += 1

    try:
        model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=[backup, Watch()], verbose=0)
    except Stop:
        pass
    return seen["start"][:2], seen["start"][2], seen["batches"], seen["epochs"]


@pytest.mark.tf
def test_fit_backup_resumes_at_the_same_examples_with_another_global_batch(tmp_path, capsys):
    # "2 workers" (20 a step, 5 steps an epoch) stop after 3 steps of epoch 1: global step 8.
    assert _fit(tmp_path, 20, 3, stop_at=(1, 2)) == ((0, 0), 0, 8, 1)
    # "1 worker" (10 a step, 10 steps): epoch 1 with 6 steps done, 4 + 10 left; stops 2 steps later.
    assert _fit(tmp_path, 10, 3, stop_at=(1, 7)) == ((1, 6), 8, 2, 0)
    assert "epoch 1 with 3 step(s) done -> epoch 1 with 6 step(s) done" in capsys.readouterr().out
    # "2 workers" again: 8 steps of 10 = 4 of 20, 1 + 5 left (tf_keras alone would start at batch
    # 8 of a 5-step epoch, run no step and fail with "Empty logs").
    assert _fit(tmp_path, 20, 3) == ((1, 4), 10, 6, 2)


@pytest.mark.tf
def test_fit_backup_after_an_epochs_last_step_resumes_at_the_next_epoch(tmp_path):
    assert _fit(tmp_path, 10, 3, stop_at=(0, 9)) == ((0, 0), 0, 10, 0)
    assert _fit(tmp_path, 20, 3) == ((1, 0), 10, 10, 2)


def test_evaluator_takes_the_recorded_epoch_over_the_checkpoint_number():
    from worker.evaluator import is_final

    # 2 workers: 69 steps in 3 epochs; the checkpoints of a run that shrank to 1 go past 69 early.
    assert not is_final(90, 69, 2, 3)
    assert is_final(135, 69, 3, 3)
    assert is_final(62, 69, 3, 3)  # ... or, one that grew, end before it
    assert is_final(69, 69, None, 3) and not is_final(46, 69, None, 3)  # no epoch recorded (fit, PSS)
