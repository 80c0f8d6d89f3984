"""The hang watchdog on slurm (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py) as two steps on two nodes, worker:1's callback spinning.
``tfcluster stacks`` on the live run, before the watchdog acts, shows each task's own stacks (the
stacks' signal reaches the tasks through ``scancel --signal``: their wrapper survives it); then the
stuck task is named at its line, every task's stacks are in the record, goodput counts ``hung``,
and nothing is left."""

from __future__ import annotations

import pytest

from tests.support.hang_live import SCRIPT, check_failure, stacks_while_stuck, stop, stuck_line
from tests.support.slurm_helpers import assert_clean, latest_run

from .conftest import PY, start_tfcluster, tfcluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(400)]

NAME = "hang_script.py"


def test_a_busy_callback_on_a_node_shows_its_stacks_live_then_is_named(lab, make_spec):
    # An explicit limit: the run is live, its task stuck, for 40 s before the watchdog acts.
    spec = make_spec([PY, str(SCRIPT), "busy", "--task", "worker:1"], env={"TF_CPP_MIN_LOG_LEVEL": "2"},
                     watchdog={"startup_timeout": 240, "stop_grace": 2, "hang_timeout": 40})
    proc = start_tfcluster(lab, "up", str(spec), "--plain")
    try:
        out = stacks_while_stuck(proc, lambda *a: tfcluster(lab, "stacks", str(spec), *a), "busy", "worker:1",
                                 NAME, 300)
    finally:
        stop(proc)
    assert proc.returncode != 0, out[-4000:]
    assert "worker:1 failed: stuck " in out and stuck_line("busy", NAME) in out, out[-4000:]
    check_failure(latest_run(spec), tfcluster(lab, "status", str(spec), "--json"), "worker:1", stuck_line("busy", NAME))
    assert_clean(lab, spec)
