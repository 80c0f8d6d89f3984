"""worker/progress.Throughput, the one place examples/s is computed, and worker/layout.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prereq import require_tf

pytestmark = [pytest.mark.tf]


@pytest.fixture
def Throughput():  # noqa: N802
    require_tf()
    from worker.progress import Throughput

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
