"""The hang watchdog over ssh (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py) on two lab hosts, its worker:1 stuck. ``tfcluster stacks`` on the
live run, before the watchdog acts, shows each task's own stacks (the stacks' signal reaches each
task's own process through its host: the pid file's task pid); then the stuck task is named at its
line, every task's stacks are in the record, goodput counts ``hung``, and nothing is left on the
hosts. Once with the supervisor here and TensorFlow (a generator that retries for ever, printing),
once with it on a host (``ssh.supervisor``, detached: ``stacks`` runs there; a silent stall beside
a chatty metrics thread on every task) with the script's stand-in (tests/support/hang_stub.py: the
same modes, functions and lines, no TensorFlow), since where the supervisor runs is no part of
TensorFlow's: one TensorFlow end-to-end hang test on ssh, not two."""

from __future__ import annotations

import re

import pytest

from tests.support.cli import start_tfcluster, tfcluster
from tests.support.hang_live import (FAULTHANDLER, SCRIPT, STUB, check_failure, check_live_stacks,
                                     check_output_is_data, stacks_while_stuck, stop, stuck_line)
from tests.support.waits import wait_for

from .conftest import PY, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(400)]

NAME, STUB_NAME = "hang_script.py", "hang_stub.py"
# An explicit limit: the run is live, its task stuck, for 40 s before the watchdog acts (with
# TensorFlow, whose native stacks py-spy takes longest); 30 s with the stand-in (both `stacks`
# of the detached run, native frames and all, took 6.8 s at load 2).
WATCHDOG = {"startup_timeout": 240, "stop_grace": 2, "hang_timeout": 40}
STUB_HANG_TIMEOUT = 30


def hang_spec(make_spec, mode: str, *args: str, restart=None, stub: bool = False, **ssh):
    """Two workers of the script (``stub``: its stand-in, which needs no TensorFlow on the hosts)."""
    script, needs = (STUB, {}) if stub else (SCRIPT, {"require": ["tensorflow", "tf_keras"]})
    watchdog = {**WATCHDOG, "hang_timeout": STUB_HANG_TIMEOUT} if stub else WATCHDOG
    return make_spec([PY, str(script), mode, "--task", "worker:1", *args], workers=2,
                     env={"TF_CPP_MIN_LOG_LEVEL": "2"}, ssh={**needs, **ssh},
                     watchdog=watchdog, **({"restart": restart} if restart else {}))


def nothing_left(lab) -> None:
    wait_for(lambda: not any(task_processes(lab).values()), 30, what="nothing of the run left on any host",
             detail=lambda: str(task_processes(lab)))


@pytest.mark.tf
def test_a_stuck_generator_on_a_remote_host_shows_its_stacks_live_then_is_named(lab, make_spec):
    """Its tasks also print every line of tfcluster's protocol first (the wrapper's lease and GCE
    notices among them: over ssh those are the wrapper's frames alone), and fake beats every second
    (docs/concepts/trust.md, rule 9): none steers the run; the stall is found all the same, and the
    run fails at it (max_restarts: 0: that a stall is retried, and the lies with it, is the
    supervisor's decision, tests/integration/test_hang.py's on local; a restart here would only
    import TensorFlow twice more)."""
    spec = hang_spec(make_spec, "generator", "--lies", restart={"max_restarts": 0})
    proc = start_tfcluster("up", str(spec), "--plain")
    try:
        out = stacks_while_stuck(proc, lambda *a: tfcluster("stacks", str(spec), *a, timeout=120), "generator",
                                 "worker:1", NAME, 300, native=True, one_task=False)
    finally:
        stop(proc)
    assert proc.returncode == 1, out[-4000:]
    assert "worker:1 failed: stuck " in out and stuck_line("generator", NAME) in out, out[-4000:]
    record = (spec.parent / "runs" / "sshtest" / "latest").resolve()
    status = tfcluster("status", str(spec), "--json")
    check_failure(record, status, "worker:1", stuck_line("generator", NAME))
    check_output_is_data(record, status, out, restarted=False)
    nothing_left(lab)


def test_stacks_reach_a_detached_supervisor_on_a_host_then_a_silent_stall_is_named(lab, make_spec, tmp_path):
    """The stand-in (no TensorFlow): what is checked is the supervisor on h1 (``stacks`` and
    ``attach`` reach it there, its record is on h1's side) and the hang watch on that side;
    the watch's reading of TensorFlow's own calls over ssh is the test above's."""
    spec = hang_spec(make_spec, "silent", stub=True, supervisor="h1")
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        run_id = re.search(r"^run (\S+) is running detached", res.stdout, re.M).group(1)
        record = tmp_path / "remote" / "sshtest" / "supervisor" / "runs" / "sshtest" / run_id
        assert not (spec.parent / "runs").exists()  # (the record is on h1's side: `stacks` must go there)
        log = record / "logs" / "worker-1.log"
        wait_for(lambda: log.is_file() and "worker:1 is stuck now (silent)" in log.read_text(), 240,
                 what="worker:1 to stall", detail=lambda: log.read_text()[-2000:] if log.is_file() else "no log")
        check_live_stacks(lambda *a: tfcluster("stacks", str(spec), *a, timeout=120), "silent", "worker:1", STUB_NAME,
                          native=True, script=STUB)
        end = tfcluster("attach", str(spec), timeout=240)
        out = end.stdout + end.stderr
        assert end.returncode != 0, out[-4000:]
        line = stuck_line("silent", STUB_NAME, script=STUB)
        assert "worker:1 failed: stuck " in out and line in out, out[-4000:]
        assert FAULTHANDLER not in out and FAULTHANDLER not in (record / "output.log").read_text(), out[-4000:]
        check_failure(record, tfcluster("status", str(spec), "--json"), "worker:1", line)
    finally:
        tfcluster("down", str(spec), timeout=120)
    nothing_left(lab)
