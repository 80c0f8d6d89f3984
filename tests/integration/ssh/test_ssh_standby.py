"""Warm standby on the ssh backend (launcher/supervise/standby.py), on the lab of real sshd hosts, with an
entrypoint of one's own that follows the protocol (tests/support/standby_task.py, stdlib only):
a replan's new TF_CONFIG reaches the promoted standby, the standby on a lost host goes with its
host's lease, and no standby is left on any host after a run ends, however it ends."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest

from tests.labs.ssh import GATEWAY
from tests.support.tfrun import run_and_act
from tests.support.cli import ROOT, tfcluster
from tests.support.waits import wait_for

from .conftest import PY, task_processes
from tests.support.ssh_helpers import firewall, firewall_flush
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(240)]

SCRIPT = str(ROOT / "tests" / "support" / "standby_task.py")
FENCE = str(ROOT / "tests" / "support" / "fence_task.py")
READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"
TASK = re.compile(r"^\[(?P<key>\S+)\] standby-task key=\S+ attempt=(?P<attempt>\d+) pid=\d+ .*? cluster=(?P<c>\{.*\})$",
                  re.M)


def _events(spec) -> list[ev.RecordEvent]:
    run = spec.parent / "runs" / "sshtest" / "latest"
    return read_records(run)


def _no_task_left(lab) -> None:
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left on any host: {task_processes(lab)}")


def _both_ready(action):
    return [(READY, lambda p: None), (READY, action)]


def test_a_standby_promoted_after_a_replan_gets_the_new_tf_config_and_the_lost_hosts_standby_goes(lab, make_spec):
    """h1 (worker:0) is cut off once every standby waits (one per task on h1 and h2, and on the
    spare h3 one per task: hot spares): h1 is lost and worker:0 moves to h3. worker:1's standby on
    h2 is promoted with the new plan's TF_CONFIG (worker:0 at h3's address, which it never saw at
    its start), worker:0's on h3 likewise; worker:0's standby on h1 is not promoted (another host
    now), and h1's wrappers stop it and the task there when their lease runs out; h3's spare
    standby for worker:1 is stopped once the new attempt has started."""
    spec = make_spec([PY, SCRIPT, "ack"], hosts=["h1", "h2", "h3"], restart={"max_restarts": 0, "warm_standby": True},
                     elastic={"host_wait": 3})
    h1 = lab.host("h1")
    try:
        cut = lambda p: firewall(h1, f"ip saddr {GATEWAY} drop")  # noqa: E731
        code, out = run_and_act(spec, [(READY, lambda p: None)] * 3 + [(READY, cut)], timeout=150)
        wait_for(lambda: not task_processes(lab)["h1"], 20,
                 what=f"h1's task and standby stopped by their lease: {task_processes(lab)['h1']}")
    finally:
        firewall_flush(h1)
    assert code == 0, out[-4000:]
    assert "worker:0 moved to h3" in out, out[-3000:]
    clusters = {(m["key"], int(m["attempt"])): json.loads(m["c"]) for m in TASK.finditer(out)}
    assert ("worker:1", 0) in clusters and ("worker:1", 1) in clusters, out[-3000:]
    first, second = clusters[("worker:1", 0)], clusters[("worker:1", 1)]
    assert first["worker"][0].startswith(lab.host("h1").address + ":"), first
    assert second["worker"][0].startswith(lab.host("h3").address + ":"), second
    assert clusters[("worker:0", 1)] == second, clusters
    recorded = _events(spec)
    (started, *_) = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    assert started["hosts"] == ["h1", "h2", "h3"] and started["spares"] == ["h3"], started
    promoted = {e["task"]: e["ssh_host"] for e in recorded if isinstance(e, ev.StandbyPromoted)}
    assert promoted == {"worker:0": "h3", "worker:1": "h2"}, promoted  # not worker:0's own, on h1
    assert "[worker:0] tfcluster-standby promoted" in out and "[worker:1] tfcluster-standby promoted" in out
    _no_task_left(lab)


@pytest.mark.parametrize("how", ["success", "failure", "ctrl-c", "down"])
def test_no_standby_is_left_on_any_host(lab, make_spec, how):
    """Standbys waiting on both hosts when the run ends: success (a restart promotes the first
    ones, and the next attempt's standbys are stopped at its end), a permanent failure, Ctrl-C,
    and `tfcluster down` after the launcher was SIGKILLed (down stops them at once, before the
    lease would)."""
    restart = {"max_restarts": 2, "warm_standby": True, "permanent_exit_codes": [143]}
    spec = make_spec([PY, SCRIPT, "ack"], restart=restart, ssh={"lease": 60})

    def kill(sig):
        def act(_proc):
            # The task's pid as it printed it in its log (the lab hosts share this pid namespace).
            log = (spec.parent / "runs" / "sshtest" / "latest" / "logs" / "worker-1.log").read_text()
            (pid,) = re.findall(r"^standby-task key=worker:1 attempt=0 pid=(\d+) ", log, re.M)
            os.kill(int(pid), sig)
        return act

    act = {"success": kill(signal.SIGKILL), "failure": kill(signal.SIGTERM),
           "ctrl-c": lambda p: p.send_signal(signal.SIGINT), "down": lambda p: p.kill()}[how]
    code, out = run_and_act(spec, _both_ready(act), timeout=120)
    assert code == {"success": 0, "failure": 1, "ctrl-c": 130, "down": -signal.SIGKILL}[how], out[-3000:]
    if how == "down":
        res = tfcluster("down", str(spec), timeout=60)
        assert res.returncode == 0, res.stderr
        # With a 60 s lease, only down can have stopped them this soon.
        wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"down to stop them: {task_processes(lab)}")
    else:
        assert ev.StandbyStopped in [type(e) for e in _events(spec)]
    if how == "success":
        # the restart promoted both tasks' standbys (the next attempt's were stopped at its end)
        promoted = [e for e in _events(spec) if isinstance(e, ev.StandbyPromoted)]
        assert sorted(e["task"] for e in promoted) == ["worker:0", "worker:1"]
        # on both hosts at once, not one after the other: each began before the other's ended
        assert sorted(e["ssh_host"] for e in promoted) == ["h1", "h2"], promoted
        assert max(e["began"] for e in promoted) < min(e["ended"] for e in promoted), promoted
    _no_task_left(lab)


def test_a_stale_task_of_a_lost_host_cannot_reach_the_next_attempt(lab, make_spec, tmp_path):
    """h2 pauses (every process stopped, as a VM whose live migration hangs) once every standby
    waits; the launcher hears nothing from it for ssh.lease s, h2 is lost, and worker:1 moves to
    the hot spare h3. Once the new attempt serves, h2 resumes: its old worker:1 runs again (for a
    while after its wrapper finds its lease run out) and dials its old cluster's addresses, as
    TensorFlow's runtime does. None of them may belong to the new attempt (with TensorFlow its
    chief would abort: "Incarnation ID mismatch ... The task has restarted"): the new attempt's
    tasks hear each other and never the old worker:1. A stand-in task (tests/support/
    fence_task.py): the fence is the plan's (fresh ports on a replan: launcher/plan/elastic.py);
    what TensorFlow does when it is reached, TensorFlow's."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    spec = make_spec(
        [PY, FENCE, str(out_dir)], hosts=["h1", "h2", "h3"],
        restart={"max_restarts": 0, "warm_standby": True}, elastic={"host_wait": 3},
        watchdog={"startup_timeout": 120, "stop_grace": 10})
    paused: list[int] = []
    resumed: list[float] = []
    done: list[object] = []

    def stale_dials() -> list[float]:
        path = out_dir / "dials-0-worker-1"
        return [float(t) for t in path.read_text().split()] if path.exists() else []

    def then_stop() -> None:
        """The new attempt runs until h2's old worker:1 has dialled after its resume and is gone."""
        try:
            wait_for(lambda: [t for t in stale_dials() if t > resumed[0]], 30,
                     what="h2's old worker:1 to dial again once resumed")
            wait_for(lambda: not task_processes(lab)["h2"], 40,
                     what=f"h2's old worker:1 stopped by its wrapper (lease run out): {task_processes(lab)['h2']}")
            done.append(True)
        except AssertionError as exc:
            done.append(exc)
        finally:
            (out_dir / "stop").touch()

    def resume(_proc) -> None:
        resumed.append(time.time())
        lab.resume(paused)
        threading.Thread(target=then_stop, daemon=True).start()

    pause = lambda p: paused.extend(lab.pause("h2"))  # noqa: E731
    try:
        code, out = run_and_act(spec, [(READY, lambda p: None)] * 3 + [
            (READY, pause), (r"worker:1 moved to h3", lambda p: None),
            (r"^\[worker:0\] task worker:0 attempt 1 serving", resume)], timeout=150)
    finally:
        lab.resume(paused)
        (out_dir / "stop").touch()
    assert code == 0, out[-6000:]
    assert done == [True], done
    promoted = {e["task"]: e["ssh_host"] for e in _events(spec) if isinstance(e, ev.StandbyPromoted)}
    assert promoted == {"worker:0": "h1", "worker:1": "h3"}, promoted  # the move was a hot one
    heard = {p.name: p.read_text() for p in out_dir.glob("heard-1-*")}
    # The new attempt's tasks reached each other (what a reached address looks like)...
    assert "worker:1 attempt 1" in heard.get("heard-1-worker-0", ""), heard
    # ... and nothing of attempt 0 reached them.
    assert not [name for name, text in heard.items() if "attempt 0" in text], heard
    _no_task_left(lab)


def test_a_paused_hot_spare_is_lost_within_its_lease_and_the_next_loss_does_not_move_onto_it(lab, make_spec):
    """h3 is the spare, holding a standby per task (hot). Once every standby waits, h3 pauses
    (every process stopped, lab.pause): it stops answering the heartbeat, so ssh.lease (4 s) later
    its standbys' sessions are lost, the sign a working host's loss gives. The run records h3
    lost (one host_lost event, spare) without a restart, and when h1 is cut off next, worker:0
    does not move onto h3: the group shrinks to tasks.worker.min (worker:1 alone) and finishes."""
    spec = make_spec([PY, SCRIPT, "ack"], hosts=["h1", "h2", "h3"], workers={"count": 2, "min": 1},
                     restart={"max_restarts": 0, "warm_standby": True}, elastic={"host_wait": 3})
    h1 = lab.host("h1")
    paused: list[int] = []
    when: dict[str, float] = {}

    def pause(_proc) -> None:
        when["paused"] = time.time()
        paused.extend(lab.pause("h3"))

    cut = lambda p: firewall(h1, f"ip saddr {GATEWAY} drop")  # noqa: E731
    try:
        # The spare's loss: ssh.lease (4 s) of silence, then the next look at the standbys (about
        # once a second); 60 s per step leaves a loaded 2-core machine room for starts and that.
        code, out = run_and_act(spec, [(READY, lambda p: None)] * 3 + [
            (READY, pause), (r"^tfcluster: h3: a spare: its standbys' sessions lost at ", cut),
            (r"worker:0 left out", lambda p: lab.resume(paused))], timeout=60)
    finally:
        lab.resume(paused)
        firewall_flush(h1)
    assert code == 0, out[-4000:]
    recorded = _events(spec)
    (started, *_) = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    assert started["spares"] == ["h3"], started
    lost = [e for e in recorded if isinstance(e, ev.HostLost)]
    assert [(e["host"], e["spare"]) for e in lost] == [("h3", True), ("h1", False)], lost
    # The lease (4 s) counts from h3's last answer, up to a heartbeat (1 s) before the pause;
    # then the look at the standbys, about once a second, with a loaded machine's margin.
    assert 3.0 <= lost[0]["time"] - when["paused"] <= 20.0, (lost[0], when)
    (replan,) = [e for e in recorded if isinstance(e, ev.Replan)]
    assert replan["dropped"] == ["worker:0"] and not replan["moved"], replan
    starts = [e for e in recorded if isinstance(e, ev.Start) and e.get("attempt") == 1]
    assert [e["ssh_host"] for e in starts] == ["h2"], starts  # the one worker left (renumbered worker:0)
    assert not [e for e in recorded if isinstance(e, ev.GroupRestart)]
    _no_task_left(lab)
