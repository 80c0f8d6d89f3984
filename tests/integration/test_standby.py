"""Warm standby on the local backend with an entrypoint of one's own (tests/support/standby_task.py,
stdlib only: these tests are about the launcher's side of the protocol, cheap enough to run often;
the reference worker's side is test_fault_tolerance.py's and bench/recovery.py's): promotion with
the environment written at promotion, a promoted standby that never answers, a script without
standby support, and no standby outliving the run (success, failure, Ctrl-C, down). The script is
started through ``env`` (a command that is not ``python SCRIPT``): such an entrypoint runs as it is
and speaks the protocol itself; ``python SCRIPT`` and ``python -m MODULE`` get the standby stub
instead (test_standby_plain_script.py)."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest

from launcher.supervise.standby import ACK_BOUND
from tests.support.tfrun import assert_no_processes, events, kill_task, run_and_act, run_dir
from tests.support.cli import ROOT, tfcluster
from tests.support.specs import local_spec
import launcher.record.events as ev

pytestmark = [pytest.mark.integration]

SCRIPT = ROOT / "tests" / "support" / "standby_task.py"
TASK = re.compile(r"^\[(?P<key>\S+)\] standby-task key=\S+ attempt=(?P<attempt>\d+) pid=(?P<pid>\d+) ", re.M)


def spec_for(tmp_path: Path, mode: str, restart: str = "{max_restarts: 1, warm_standby: true}") -> Path:
    return local_spec(tmp_path, f"[env, {sys.executable}, {SCRIPT}, {mode}]", name="demo",
                      watchdog="{startup_timeout: 60, stop_grace: 2}", extra=f"restart: {restart}\n")


READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"


def when_both_ready(action):
    """run_and_act's steps: both standbys said they are ready (in either order), then ``action``."""
    return [(READY, lambda p: None), (READY, action)]


def pids_of(out: str, attempt: int) -> dict[str, int]:
    return {m["key"]: int(m["pid"]) for m in TASK.finditer(out) if int(m["attempt"]) == attempt}


def test_a_restart_promotes_the_standbys_which_take_the_environment_written_at_promotion(tmp_path):
    spec = spec_for(tmp_path, "ack")
    code, out = run_and_act(spec, when_both_ready(lambda p: kill_task(spec, "worker:1", signal.SIGKILL)), timeout=60)
    assert code == 0, out[-3000:]
    recorded = events(spec)
    (started,) = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    promoted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.StandbyPromoted)}
    restarted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.Start) and e["attempt"] == 1}
    assert promoted == restarted == started["pids"], (promoted, restarted, started)
    assert "[worker:0] tfcluster-standby promoted" in out and "[worker:1] tfcluster-standby promoted" in out
    # Its TF_CONFIG came from the promotion file: the file was read (and is the launcher's, 0600).
    files = sorted((run_dir(spec) / "standby").glob("*.json"))
    assert [f.name.split(".")[0] for f in files] == ["worker-0", "worker-1"], files
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert '"TFCLUSTER_RESTART_COUNT": "1"' in files[1].read_text() and '"TF_CONFIG"' in files[1].read_text()
    assert set(pids_of(out, 1)) == {"worker:0", "worker:1"}
    assert_no_processes(spec)


def test_a_promoted_standby_that_never_answers_is_started_cold_after_the_bound(tmp_path):
    spec = spec_for(tmp_path, "no-ack")
    code, out = run_and_act(spec, when_both_ready(lambda p: kill_task(spec, "worker:1", signal.SIGKILL)), timeout=60)
    assert code == 0, out[-3000:]
    for key in ("worker:0", "worker:1"):
        assert (f"{key}: its warm standby did not answer the promotion within {ACK_BOUND:g} s "
                "(no 'tfcluster-standby promoted' line); starting it cold") in out, out[-3000:]
    recorded = events(spec)
    (started,) = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    cold = pids_of(out, 1)
    assert set(cold) == {"worker:0", "worker:1"} and not set(cold.values()) & set(started["pids"].values())
    assert not [e for e in recorded if isinstance(e, ev.Failure) and e["attempt"] == 1]
    assert_no_processes(spec)


def test_an_entrypoint_that_is_not_a_python_script_is_not_pre_started_by_default(tmp_path):
    """warm_standby left out (auto): a command that is not ``python SCRIPT`` (here ``env python
    SCRIPT``) and ignores TFCLUSTER_STANDBY would start training as a standby, so none is started;
    its restart is cold and works as before."""
    spec = spec_for(tmp_path, "ignore", restart="{max_restarts: 1}")
    plan = tfcluster("plan", str(spec))
    assert "warm standby: off: the entrypoint (env " in plan.stdout, plan.stdout
    assert "is neither tfcluster's worker nor a Python script or module (not a Python interpreter)" in plan.stdout
    code, out = run_and_act(spec, [(r"^\[worker:1\] standby-task .*attempt=0",
                                    lambda p: kill_task(spec, "worker:1", signal.SIGKILL))], timeout=60)
    assert code == 0, out[-3000:]
    kinds = [type(e) for e in events(spec)]
    assert ev.StandbyStart not in kinds and "(standby)" not in out
    assert set(pids_of(out, 1)) == {"worker:0", "worker:1"}
    assert_no_processes(spec)


@pytest.mark.parametrize("how", ["success", "failure", "ctrl-c", "down"])
def test_no_standby_outlives_the_run(tmp_path, how):
    """Standbys waiting when the run ends: success (a restart promotes the first ones; the next
    attempt's, kept for the restart still allowed, go unused), a permanent failure (exit 143 made
    permanent), Ctrl-C, and `tfcluster down` after the launcher was SIGKILLed (its lifeline pipes
    close as well)."""
    restart = "{max_restarts: 2, warm_standby: true, permanent_exit_codes: [143]}"
    spec = spec_for(tmp_path, "ack", restart=restart)
    if how == "success":
        act = lambda p: kill_task(spec, "worker:1", signal.SIGKILL)  # noqa: E731
    elif how == "failure":
        act = lambda p: kill_task(spec, "worker:1", signal.SIGTERM)  # noqa: E731
    elif how == "ctrl-c":
        act = lambda p: p.send_signal(signal.SIGINT)  # noqa: E731
    else:
        act = lambda p: p.kill()  # noqa: E731
    code, out = run_and_act(spec, when_both_ready(act), timeout=60)
    assert code == {"success": 0, "failure": 1, "ctrl-c": 130, "down": -signal.SIGKILL}[how], out[-3000:]
    if how == "down":
        tfcluster("down", str(spec), timeout=60)
    else:
        assert ev.StandbyStopped in [type(e) for e in events(spec)]
    if how == "success":  # attempt 1's own standbys (started after the promotion) were stopped unused
        kinds = [type(e) for e in events(spec)]
        last = len(kinds) - 1 - kinds[::-1].index(ev.StandbyStart)
        assert kinds.index(ev.StandbyPromoted) < last < kinds.index(ev.StandbyStopped, last), kinds
    assert_no_processes(spec)
