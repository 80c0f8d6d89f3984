"""Hosts that come and go, on the ssh lab: sshd hosts with private disks. A host goes down the
way a VM shuts down (tests/labs/ssh.py ``shutdown``): SIGTERM to every process of the host while
its sshd still accepts new connections, SIGKILL and the link down a few seconds later. The task's
lost session is the infrastructure's, not the training's: every test runs with
``restart.max_restarts: 0``, and none may spend it.

The reference worker trains where what training does across a change is the point (a spare taking
the chief's place from a survivor's backup, a shrink and a grow with 0 steps redone, a
parameter_server group going on without a worker); elsewhere a stand-in (tests/support/
group_task.py) pays only for the membership checked. Every decision here (which host is suspect,
where a task moves, wait or shrink, max_host_losses) is checked at unit speed against scripted
hosts in tests/unit/supervise/test_supervisor_scripted.py, with each case of a task and host
(worker:1 to a spare, a parameter server to a spare) there."""

from __future__ import annotations

import json
import re
import threading

import pytest

from tests.support.waits import wait_for
from tests.support.tfrun import last_step_of_first_attempt, last_step_before, progress, run_and_act

from tests.support.cli import tfcluster

from tests.support.ssh_helpers import NOTICE, private_state, bring_back, group_task, wait_attempt_up
from .conftest import PY, task_processes
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

class Background:
    """Actions for run_and_act that run in a thread of their own (a shutdown takes its notice),
    so the launcher's output is read meanwhile; ``join`` waits for them all."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.went: dict[str, float] = {}  # host -> when its shutdown killed its sshd (time.time())

    def __call__(self, fn):
        def act(_proc):
            thread = threading.Thread(target=fn, daemon=True)
            thread.start()
            self.threads.append(thread)
        return act

    def shutdown(self, lab, name: str, reboot: bool = False, once=None):
        """``once``: called first in the thread (what must hold before the host goes down)."""
        def go():
            if once is not None:
                once()
            self.went.setdefault(name, lab.shutdown(name, NOTICE, reboot=reboot))
        return self(go)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(NOTICE + 60)


def session_lost(spec, background: Background, host: str) -> str:
    """The pattern of ``host``'s loss: its session lost while its sshd still answered. (A
    launcher that looked only after the notice, on a machine loaded beyond it, finds it not
    answering; the host_lost event's time tells which.)"""
    lost = next(e for e in events_of(spec) if isinstance(e, ev.HostLost) and e["host"] == host)
    state = "still" if lost["time"] < background.went[host] else "(?:still|not)"
    return rf"session lost at \d\d:\d\d:\d\d, host {state} answering"


def events_of(spec) -> list[ev.RecordEvent]:
    run = spec.parent / "runs" / "sshtest" / "latest"
    return read_records(run)


def last_hosts(events) -> dict[str, str]:
    """The host each task last ran on (its last start event)."""
    return {e["task"]: e["host"] for e in events if isinstance(e, ev.Start)}


def nothing_left(lab) -> None:
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


@pytest.mark.tf
def test_a_spare_replaces_a_host_shutting_down_without_spending_a_restart(lab, make_spec, tmp_path):
    """A host shuts down: its sessions drop while its sshd still answers. It is suspect, and its
    worker moves to the spare h3 at once: not a failure of the training (max_restarts: 0). The
    hardest host to lose is h1 (worker:0, the chief, which wrote the backups): every worker keeps
    its own backups on its private disk (TFCLUSTER_STATE_PRIVATE), so the copy comes from h2, never
    from the suspect h1, and the group resumes at the saved step, not at the attempt's start.
    (worker:1's host lost instead is the same decision with the chief's own backup to copy:
    test_supervisor_scripted.py's test_a_lost_session_makes_its_host_suspect_and_its_tasks_move_to_the_spare_at_once.)"""
    down, key, other, other_key = "h1", "worker:0", "h2", "worker:1"
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", "2", "--steps-per-epoch", "12", "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        hosts=["h1", "h2", "h3"], workers=2, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        restart={"max_restarts": 0}, ssh={"require": ["tensorflow", "tf_keras"]},
        state={"dir": private_state(lab, tmp_path)},  # no elastic: block: the spare turns it on
    )
    plan = tfcluster("plan", str(spec))
    assert plan.returncode == 0, plan.stderr
    assert "spare hosts: h3 (no task; a lost host's tasks move there)" in plan.stdout, plan.stdout
    background = Background()

    try:
        code, out = run_and_act(spec, [(rf"\[{key}\] tfcluster-step epoch=0 step=5 ", background.shutdown(lab, down))],
                                timeout=280)
        background.join()
    finally:
        bring_back(lab, down)
    assert code == 0, out[-6000:]
    said = [line for line in out.splitlines() if line.startswith(f"tfcluster: {down}: session lost")]
    lost = session_lost(spec, background, down)
    assert len(said) == 1 and re.search(f"{down}: {lost}; suspect until it answers for 30 s; {key} moved to h3 "
                                        r"\(spare\); restarting the group there", said[0]), out[-4000:]
    assert "restart.max_restarts is 0" not in out and f"{key} failed" not in out
    # Both workers resume from the step they agreed to save on the shutdown's SIGTERM, 0 steps
    # redone: the survivor was asked to save too and its save awaited (not killed with the lost
    # session), and the worker on the host going down went on to its part of the save with no
    # reader for its lines. The last periodic backup (every 3 steps) would be a step behind.
    (saving,) = progress(out, "saving", other_key)
    (saved,) = progress(out, "preempted", other_key)
    assert saving["global_step"] == saved["global_step"], (saving, saved)
    # The survivor's save was not cut short: its preempted line (the save done) is above. Whether
    # the supervisor still had it to stop depends on the load, and each way is the product's: it
    # was still running when the attempt's failure was handled (a ``stopped`` event: the stopping
    # line, its save awaited, then, saved, stopped without waiting for TensorFlow's shutdown), or
    # it had saved and exited on its own before the supervisor noticed the lost session (an
    # ``exit`` event of attempt 0, 143, written before the failure's: no one left to stop, no line).
    recorded = events_of(spec)
    replanned = next(e["time"] for e in recorded if isinstance(e, ev.Replan))
    (end,) = [e for e in recorded if e.get("task") == other_key and isinstance(e, (ev.Exit, ev.Stopped))
              and e.get("attempt", 0) == 0 and e["time"] <= replanned]
    if isinstance(end, ev.Stopped):
        assert re.search(rf"stopping {other_key} \(SIGTERM; a save they start within \d+\.\d s is awaited", out), \
            out[-4000:]
    else:
        assert end["code"] == 143, end
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    assert len(w0) == len(w1) == 2, out[-4000:]
    n0, n1 = int(w0[1]["global_step"]), int(w1[1]["global_step"])
    # How far the first attempt got: its step lines may reach the console after the line that
    # reported the lost session (a periodic backup at step 6 with "session lost" printed at 5).
    last_seen = max(last_step_of_first_attempt(out, k) for k in ("worker:0", "worker:1"))
    assert n0 == n1 == int(saved["global_step"]) and 5 <= n0 <= last_seen + 1, (n0, n1, saved, last_seen)
    redone = max(last_seen, n0) - n0
    assert redone == 0, (n0, last_seen)
    assert f"state: copied {other}'s latest backup" in out and " to h3 in " in out, out[-4000:]
    (res,) = progress(out, "result", "worker:0")
    assert int(res["steps_run"]) == 24 - n0, res  # the rest of both epochs, nothing more
    run = spec.parent / "runs" / "sshtest" / "latest"
    assert [t["host"] for t in json.loads((run / "plan.json").read_text())["tasks"]] == ["h1", "h2"]
    second = json.loads((run / "plan-2.json").read_text())
    assert [t["host"] for t in second["tasks"]] == [h if h != down else "h3" for h in ("h1", "h2")]
    assert second["cluster"]["worker"][int(key[-1])].startswith(lab.host("h3").address + ":")
    recorded = events_of(spec)
    assert last_hosts(recorded) == {key: "h3", other_key: other}
    kinds = [e for e in recorded if isinstance(e, (ev.HostLost, ev.Replan, ev.GroupRestart))]
    assert [type(e) for e in kinds] == [ev.HostLost, ev.Replan], kinds
    assert kinds[0]["host"] == down and kinds[1]["moved"] == {key: {"from": down, "to": "h3"}}, kinds
    assert "plans used: 1: h1, h2" in out and f"2: {other}, h3 ({down}: session lost at " in out, out[-3000:]
    assert f"{key} moved to h3 (spare); resumed at step {n0}, {redone} steps redone)" in out, out[-3000:]
    fetched = [line for line in out.splitlines() if "fetched final_model" in line]
    chief_host = "h3" if key == "worker:0" else "h1"
    assert len(fetched) == 1 and f" from {chief_host} (" in fetched[0], out[-3000:]
    status = tfcluster("status", str(spec))
    assert status.returncode == 0, status.stderr
    assert f"{key}  h3 " in status.stdout and "spare hosts" not in status.stdout, status.stdout
    assert f"suspect hosts: {down} (until it answers for 30 s without a break)" in status.stdout, status.stdout
    assert f"{key} moved to h3 (spare); resumed at step {n0}, {redone} steps redone" in status.stdout, status.stdout
    nothing_left(lab)


def test_with_no_spare_and_no_min_the_group_restarts_on_the_rebooted_host_spending_no_restart(lab, make_spec, tmp_path):
    """h2 reboots (shut down as above, then its sshd back at once, on a fresh disk): no spare, no
    tasks.worker.min, so the group waits up to elastic.host_wait for h2 to answer for
    elastic.settle s without a break (longer than the notice, while its sshd still answered),
    then restarts on it, max_restarts: 0 unspent. (The stand-ins' first attempt waits to be
    stopped; the state copied to a host's fresh disk is test_a_spare_replaces_...'s.)"""
    out_dir = tmp_path / "out"
    spec = make_spec(group_task(out_dir, 2, hold=1), hosts=["h1", "h2"], workers=2,
                     restart={"max_restarts": 0}, elastic={"host_wait": 90, "settle": NOTICE + 2})
    background = Background()
    try:
        # h2 goes down once both tasks of attempt 0 are up, not at worker:1's line alone
        both_up = lambda: wait_attempt_up(out_dir, 0, 2)  # noqa: E731
        code, out = run_and_act(spec, [(r"\[worker:1\] group of 2 attempt 0",
                                        background.shutdown(lab, "h2", reboot=True, once=both_up))], timeout=240)
        background.join()
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    settle = f"{NOTICE + 2:g}"
    lost = session_lost(spec, background, 'h2')
    assert re.search(f"h2: {lost}; suspect until it answers for {settle} s; no spare host for worker:1: "
                     "waiting up to elastic.host_wait=90 s for h2 to settle", out), out[-4000:]
    assert (f"h2 answers again ({settle} s without a break, elastic.settle); restarting the group on it from the last "
            "backup") in out, out[-4000:]
    assert "restart.max_restarts is 0" not in out and "worker:1 failed" not in out
    recorded = events_of(spec)
    assert not [e for e in recorded if isinstance(e, (ev.GroupRestart, ev.Replan))]
    assert [type(e) for e in recorded if isinstance(e, (ev.HostLost, ev.HostAdded))] == [ev.HostLost, ev.HostAdded]
    lost, added = [e for e in recorded if isinstance(e, (ev.HostLost, ev.HostAdded))]
    assert added["time"] - lost["time"] >= NOTICE + 2, (lost, added)  # not while its sshd lingered
    assert last_hosts(recorded) == {"worker:0": "h1", "worker:1": "h2"}
    assert sorted(p.name for p in out_dir.iterdir()) == ["0-2-worker-0", "0-2-worker-1", "1-2-worker-0",
                                                         "1-2-worker-1"]
    assert (out_dir / "1-2-worker-1").read_text() == "h2"
    nothing_left(lab)


def test_a_host_that_keeps_dropping_its_sessions_ends_the_run_at_max_host_losses(lab, make_spec, tmp_path):
    """h2 drops every SSH session every 4 s (its sshd accepting new ones): each loss is the
    infrastructure's, h2 settles (elastic.settle: 1) and the group restarts on it, until
    elastic.max_host_losses (2) is passed: one line, exit 1, restart.max_restarts never spent,
    nothing left on any host."""
    spec = make_spec(
        [PY, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        hosts=["h1", "h2"], workers=2, restart={"max_restarts": 0},
        elastic={"host_wait": 30, "settle": 1, "max_host_losses": 2},
    )
    stop = threading.Event()
    background = Background()
    drops: list[int] = []
    try:
        code, out = run_and_act(spec, [(r"\[worker:1\] up", background(
            lambda: drops.append(lab.drop_sessions("h2", every=4, duration=60, stop=stop))))], timeout=150)
    finally:
        stop.set()
        background.join()
    assert code == 1, out[-4000:]
    lines = [line for line in out.splitlines() if "elastic.max_host_losses" in line]
    assert len(lines) == 1 and re.search(r"h2: session lost at .*; 3 host losses in this run \(h2 3 times\), more "
                                         r"than elastic.max_host_losses=2", lines[0]), out[-4000:]
    assert out.count("h2 answers again") == 2 and "restarting the whole group" not in out, out[-4000:]
    recorded = events_of(spec)
    assert len([e for e in recorded if isinstance(e, ev.HostLost)]) == 3 and not [
        e for e in recorded if isinstance(e, ev.GroupRestart)]
    assert [e for e in recorded if isinstance(e, ev.RunOutcome)][0]["reason"] == lines[0].split("error: ", 1)[1]
    assert drops and drops[0] >= 3, drops
    nothing_left(lab)


@pytest.mark.tf
@pytest.mark.timeout(600)  # three attempts that import TensorFlow, one after another
def test_with_no_spare_the_group_shrinks_to_min_and_grows_back_when_the_host_returns(lab, make_spec, tmp_path):
    """h2 shuts down, no spare: worker:0 goes on alone at once (tasks.worker.min: 1) from the last
    backup; h2 comes back flapping (up 2 s, down 2 s, twice) and is not used until it has answered
    for elastic.settle (8 s) without a break; then the group is stopped gracefully (the step
    worker:0 saves on SIGTERM) and restarted with two workers there: 0 steps redone at the grow."""
    epochs, steps = 3, 30
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 1}}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        restart={"max_restarts": 0}, elastic={"settle": NOTICE + 2},
        ssh={"require": ["tensorflow", "tf_keras"]}, state={"dir": private_state(lab, tmp_path)},
    )
    background = Background()
    settled_from: list[float] = []

    def flap_once_down():
        # h2 comes back once worker:0 trains alone (its start line in the shrunk attempt): on a
        # loaded machine, back at once it settled while that attempt still imported TensorFlow,
        # and the group grew before the shrunk attempt had trained a step to save.
        background.threads[0].join(NOTICE + 60)
        settled_from.append(lab.flap("h2", cycles=2, up=2, down=2))

    try:
        code, out = run_and_act(spec, [
            (r"\[worker:1\] tfcluster-step epoch=0 step=5 ", background.shutdown(lab, "h2")),
            (r"\[worker:0\] tfcluster-start .*\breplicas=1\b", background(flap_once_down)),
        ], timeout=540)
        background.join()
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out, out[-4000:]
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    assert len(w0) == 3 and len(w1) == 2, out[-4000:]  # worker:1 sat out the shrunk attempt
    alone = int(w0[1]["global_step"])
    lost = session_lost(spec, background, 'h2')
    assert re.search(f"h2: {lost}; suspect until it answers for {NOTICE + 2:g} s; worker:1 left out: 1 "
                     "worker go on", out), out[-4000:]
    last_seen = max(last_step_before(out, "h2: session lost", k) for k in ("worker:0", "worker:1"))
    assert 3 <= alone <= last_seen + 1, (alone, last_seen)
    # One replica per CPU worker; the same per-replica batch (the global batch follows the workers).
    assert [int(w["replicas"]) for w in w0] == [2, 1, 2], w0
    assert [int(w["global_batch"]) for w in w0] == [2 * int(w0[1]["global_batch"]), int(w0[1]["global_batch"]),
                                                    2 * int(w0[1]["global_batch"])], w0
    # The grow: worker:0 saved the step it stopped at; both resume exactly there.
    saved = [int(p["global_step"]) for p in progress(out, "preempted", "worker:0")]
    grown = int(w0[2]["global_step"])
    assert saved and saved[-1] == grown == int(w1[1]["global_step"]) > alone, (saved, grown, w1, alone)
    (res,) = progress(out, "result", "worker:0")
    assert int(res["steps_run"]) == epochs * steps - grown, res
    assert f"resumed at step {grown}, 0 steps redone" in out, out[-3000:]
    run = spec.parent / "runs" / "sshtest" / "latest"
    recorded = read_records(run)
    kinds = [type(e) for e in recorded if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded, ev.GroupRestart))]
    assert kinds == [ev.HostLost, ev.Replan, ev.HostAdded, ev.Replan], kinds
    # The flapping host was not used before it had answered for elastic.settle without a break.
    [added] = [e for e in recorded if isinstance(e, ev.HostAdded)]
    assert settled_from and added["time"] >= settled_from[0] + NOTICE + 2 - 1.0, (added, settled_from)  # (probe: ~1 s)
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1"]
    assert [t["host"] for t in json.loads((run / "plan-3.json").read_text())["tasks"]] == ["h1", "h2"]
    assert last_hosts(recorded) == {"worker:0": "h1", "worker:1": "h2"} and "restart.max_restarts is 0" not in out
    nothing_left(lab)


PSS_ARGS = ["--epochs", "2", "--steps-per-epoch", "40", "--step-delay", "0.25", "--progress-every", "5"]


@pytest.mark.tf
def test_pss_goes_on_with_the_workers_left_when_a_worker_host_shuts_down(lab, make_spec):
    """No spare, tasks.worker.min: 1: worker:1's host h3 shuts down. Its session drops while h3
    still answers: it is not restarted alone onto the dying host (that would spend max_restarts:
    0); the group restarts without it from the chief's last checkpoint (TensorFlow's coordinator
    cannot train on without a worker that never answers again), spending no restart, and the run
    succeeds with worker:0 alone."""
    spec = make_spec(
        [PY, "-m", "worker", *PSS_ARGS], hosts=["h1", "h2", "h3"], strategy="parameter_server",
        tasks={"chief": {"count": 1, "hosts": ["h1"]}, "ps": {"count": 1, "hosts": ["h1"]},
               "worker": {"count": 2, "hosts": ["h2", "h3"], "min": 1}},
        restart={"max_restarts": 0}, elastic={"settle": 30}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        ssh={"require": ["tensorflow", "tf_keras"]},
    )
    background = Background()
    try:
        code, out = run_and_act(spec, [(r"\[chief:0\] tfcluster-step epoch=1 step=10 ", background.shutdown(lab, "h3"))],
                                timeout=300)
        background.join()
    finally:
        bring_back(lab, "h3")
    assert code == 0, out[-6000:]
    lost = session_lost(spec, background, 'h3')
    assert re.search(f"h3: {lost}; suspect until it answers for 30 s; worker:1 left out: 1 worker go on "
                     r"\(no spare host\); restarting the group there from the last backup", out), out[-4000:]
    assert "moved to" not in out and "restarting it alone" not in out and "worker:1 failed" not in out
    # the shrunk group resumed from the chief's last backup (under parameter_server fit backs up
    # once an epoch: epoch 1's start, global step 40): 10 or so steps redone, not from step 0
    first, second = progress(out, "start", "chief:0")
    assert int(second["global_step"]) == 40 and second["workers"] == "1", (first, second)
    assert last_step_before(out, "h3: session lost", "chief:0") - 40 <= 20
    (res,) = progress(out, "result", "chief:0")
    assert 80 <= int(res["global_step"]) <= 81 and (res["epochs_run"], res["steps_run"]) == ("1", "40"), res
    recorded = events_of(spec)
    assert last_hosts(recorded) == {"chief:0": "h1", "ps:0": "h1", "worker:0": "h2", "worker:1": "h3"}
    assert [e["task"] for e in recorded if isinstance(e, ev.Start)][-3:] == ["chief:0", "worker:0", "ps:0"]
    assert not [e for e in recorded if isinstance(e, (ev.GroupRestart, ev.TaskRestart))]
    nothing_left(lab)
