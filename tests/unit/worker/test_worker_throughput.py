"""progress.Throughput (launcher/contract/progress.py, re-exported by worker/progress.py), the one place examples/s is computed, and worker/layout.py."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def Throughput():  # noqa: N802
    from launcher.contract.progress import Throughput  # no TensorFlow needed: status computes examples/s too

    return Throughput


def test_counts_steps_after_the_first_between_first_and_last_step_ends(Throughput):
    t = Throughput(batch=64)
    assert t.rate() == 0.0
    t.mark(1, now=100.0)  # the first step ends (tracing, warm-up: not counted)
    assert t.rate() == 0.0
    for step in range(2, 12):
        t.mark(step, now=100.0 + (step - 1) * 0.5)
    assert t.steps == 10
    assert t.rate() == pytest.approx(10 * 64 / 5.0)


def test_resumed_run_counts_from_its_own_first_step(Throughput):
    t = Throughput(batch=16)
    t.mark(40, now=10.0)  # global step 40: the attempt resumed at 39
    t.mark(60, now=12.0)
    assert t.rate() == pytest.approx(20 * 16 / 2.0)


def test_layout_names_match_what_the_evaluator_watches():
    from worker.layout import Layout

    layout = Layout(Path("/state"))
    assert layout.fit_checkpoint().format(epoch=3) == "/state/checkpoints/ckpt-003"
    assert layout.checkpoint_dir("fit") == Path("/state/checkpoints")
    assert layout.checkpoint_dir("custom") == Path("/state/checkpoints/custom")
    assert (Layout.checkpoint_name("fit", 3), Layout.checkpoint_name("custom", 120)) == ("ckpt-003", "ckpt-120")
    assert (layout.backup, layout.final, layout.tensorboard) == (
        Path("/state/backup"), Path("/state/final_model"), Path("/state/tensorboard"))


def test_lap_is_each_epochs_own_rate_and_leaves_the_total_alone(Throughput):
    t = Throughput(batch=10)
    assert t.lap() == 0.0  # nothing marked yet
    t.mark(1, now=0.0)  # first step: warm-up, not counted
    for step in range(2, 6):  # epoch 1 ends at step 5: 4 steps in 2 s
        t.mark(step, now=(step - 1) * 0.5)
    assert t.lap() == pytest.approx(4 * 10 / 2.0)
    for step in range(6, 11):  # epoch 2: 5 steps in 1 s
        t.mark(step, now=2.0 + (step - 5) * 0.2)
    assert t.lap() == pytest.approx(5 * 10 / 1.0)
    assert t.lap() == 0.0  # no step since the last lap
    assert t.rate() == pytest.approx(9 * 10 / 3.0)  # the whole attempt, unchanged by laps


def test_layout_tensorboard_runs_are_train_and_eval_under_one_logdir():
    from launcher.contract import statedir
    from worker.layout import Layout

    layout = Layout(Path("/state"))
    assert (layout.tensorboard_train, layout.tensorboard_eval) == (
        Path("/state/tensorboard/train"), Path("/state/tensorboard/eval"))
    assert layout.tensorboard_train.parent == layout.tensorboard == Path("/state") / statedir.TENSORBOARD


@pytest.mark.tf
def test_learning_rate_of_a_constant_a_variable_under_a_strategy_and_a_schedule():
    import tensorflow as tf
    import tf_keras as keras

    from worker.tensorboard import learning_rate

    assert learning_rate(keras.optimizers.Adam(0.002)) == pytest.approx(0.002)
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():  # a MirroredVariable, as under MWMS
        assert learning_rate(keras.optimizers.Adam(0.003)) == pytest.approx(0.003)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    opt = keras.optimizers.SGD(schedule)
    w = tf.Variable(1.0)
    for _ in range(10):
        opt.apply_gradients([(tf.constant(1.0), w)])
    # The rate the last step used (step 10 runs at iterations 9).
    assert learning_rate(opt) == pytest.approx(0.1 * 0.5 ** (9 / 10))
