"""The hang watchdog on slurm (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py) as two steps on two nodes, worker:1's callback spinning.
``tfcluster stacks`` on the live run, before the watchdog acts, shows each task's own stacks (the
stacks' signal reaches the tasks through ``scancel --signal``: their wrapper survives it); then the
stuck task is named at its line, every task's stacks are in the record, goodput counts ``hung``,
and nothing is left."""

from __future__ import annotations

import pytest

from tests.support.hang_live import SCRIPT, check_failure, check_output_is_data, stacks_while_stuck, stop, stuck_line
from tests.support.slurm_helpers import assert_clean, latest_run

from .conftest import PY, start_tfcluster, tfcluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(600)]

NAME = "hang_script.py"


def test_a_busy_callback_on_a_node_shows_its_stacks_live_then_is_named(lab, make_spec):
    # An explicit limit: the run is live, its task stuck, for 30 s before the watchdog acts: time
    # for the one ``tfcluster stacks`` (a CLI start and one ``scancel --signal``, a few seconds on a
    # loaded machine, with room for a CI machine 1.4 times slower at the labs' tests), while
    # worker:1's callback spins a CPU the whole time.
    # Its tasks also print every line of tfcluster's protocol first (the step's own line among them:
    # on slurm the step's frames come from its node), and fake beats every second (docs/concepts/
    # trust.md, rule 9): none steers the run; the stall is found all the same, and the run fails at
    # it (max_restarts: 0: that a stall is retried, the lies with it, is the supervisor's decision,
    # tests/integration/test_hang.py's on local; a restart here would only import TensorFlow twice more).
    spec = make_spec([PY, str(SCRIPT), "busy", "--task", "worker:1", "--lies"],
                     env={"TF_CPP_MIN_LOG_LEVEL": "2"}, restart={"max_restarts": 0},
                     watchdog={"startup_timeout": 240, "stop_grace": 2, "hang_timeout": 30})
    proc = start_tfcluster(lab, "up", str(spec), "--plain")
    try:
        out = stacks_while_stuck(proc, lambda *a: tfcluster(lab, "stacks", str(spec), *a), "busy", "worker:1",
                                 NAME, 400, one_task=False)
    finally:
        stop(proc)
    assert proc.returncode == 1, out[-4000:]
    assert "worker:1 failed: stuck " in out and stuck_line("busy", NAME) in out, out[-4000:]
    status = tfcluster(lab, "status", str(spec), "--json")
    check_failure(latest_run(spec), status, "worker:1", stuck_line("busy", NAME))
    check_output_is_data(latest_run(spec), status, out, restarted=False)
    assert_clean(lab, spec)
