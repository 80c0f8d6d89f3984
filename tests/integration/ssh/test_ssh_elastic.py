"""Hosts that come and go (issue 20), on the ssh lab: three sshd hosts with private disks, two
workers, h3 listed as a spare. A Spot preemption of h2 is SIGTERM to every process of the host,
then (after the notice) SIGKILL and its link down; its tasks must move to h3 and the run finish
without spending restart.max_restarts."""

from __future__ import annotations

import json
import threading

import pytest

from tests.support.waits import wait_for
from tests.integration.tfrun import last_step_before, progress, run_and_act

from tests.support.cli import tfcluster

from .conftest import PY, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.tf]

NOTICE = 10.0  # seconds between the SIGTERM and the SIGKILL (a Spot VM gets 30)


def _private_state(lab, tmp_path) -> str:
    return str(lab.private / tmp_path.name / "state")


def preempt(lab, name: str) -> None:
    lab.preempt(name, NOTICE)


class Background:
    """Actions for run_and_act that run in a thread of their own (a preemption takes its notice),
    so the launcher's output is read meanwhile; ``join`` waits for them all."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def __call__(self, fn):
        def act(_proc):
            thread = threading.Thread(target=fn, daemon=True)
            thread.start()
            self.threads.append(thread)
        return act

    def preempt(self, lab, name: str):
        return self(lambda: preempt(lab, name))

    def join(self) -> None:
        for thread in self.threads:
            thread.join(NOTICE + 30)


def bring_back(lab, name: str) -> None:
    lab.bring_back(name)


def test_a_spare_replaces_the_preempted_chief_host_without_spending_a_restart(lab, make_spec, tmp_path):
    """The hardest host to lose on private disks: the chief's (worker:0's), which wrote the
    backups. Every worker keeps its own backups there (TFCLUSTER_STATE_PRIVATE), so h2's copy is
    the newest and the group resumes at the saved step, not at the attempt's start (issue 23's
    soak redid 106 of 363 steps when only the chief kept them)."""
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", "2", "--steps-per-epoch", "12", "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        hosts=["h1", "h2", "h3"], workers=2, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        restart={"max_restarts": 0}, elastic={"host_wait": 3},
        ssh={"require": ["tensorflow", "tf_keras"]}, state={"dir": _private_state(lab, tmp_path)},
    )
    plan = tfcluster("plan", str(spec))
    assert plan.returncode == 0, plan.stderr
    assert "spare hosts: h3 (no task; a lost host's tasks move there)" in plan.stdout, plan.stdout
    background = Background()
    preempt_h1 = background.preempt(lab, "h1")

    try:
        code, out = run_and_act(spec, [(r"\[worker:0\] tfcluster-step epoch=0 step=5 ", preempt_h1)], timeout=280)
        background.join()
    finally:
        bring_back(lab, "h1")
    assert code == 0, out[-6000:]
    assert "h1 lost (unreachable for " in out and "worker:0 moved to h3" in out, out[-4000:]
    assert "restart.max_restarts is 0" not in out
    # Both workers resume from the same step: the one they agreed to save on the SIGTERM (graceful
    # preemption: 0 steps redone) when the save beat the end of h1's sshd session (the task's
    # lifeline), else the last periodic backup (every 3 steps) before the preemption; never from
    # step 0 (a backup at step 3 was written before the trigger at step 5).
    saved = {int(p["global_step"]) for p in progress(out, "preempted", "worker:1")}
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    assert len(w0) == len(w1) == 2, out[-4000:]
    n0, n1 = int(w0[1]["global_step"]), int(w1[1]["global_step"])
    last_seen = max(last_step_before(out, "h1 lost", k) for k in ("worker:0", "worker:1"))
    assert n0 == n1, (n0, n1)
    if saved:
        assert len(saved) == 1 and n0 == min(saved) and 5 <= n0 <= last_seen + 1, (saved, n0, last_seen)
    else:
        assert n0 % 3 == 0 and max(3, last_seen - 5) <= n0 <= last_seen, (n0, last_seen)
    redone = max([last_seen, *saved]) - n0
    # The backup comes from h2, the host of the last attempt that is still here.
    assert "state: copied h2's latest backup" in out and " to h3 in " in out, out[-4000:]
    (res,) = progress(out, "result", "worker:0")
    assert int(res["steps_run"]) == 24 - n0, res  # the rest of both epochs, nothing more
    # The record keeps both plans and says why the second one came.
    run = spec.parent / "runs" / "sshtest" / "latest"
    first = json.loads((run / "plan.json").read_text())
    second = json.loads((run / "plan-2.json").read_text())
    assert [t["host"] for t in first["tasks"]] == ["h1", "h2"]
    assert [t["host"] for t in second["tasks"]] == ["h3", "h2"]
    assert second["cluster"]["worker"][0].startswith(lab.host("h3").address + ":")
    recorded = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    kinds = [e for e in recorded if e["event"] in ("host_lost", "replan", "restart")]
    assert [e["event"] for e in kinds] == ["host_lost", "replan"], kinds
    assert kinds[0]["host"] == "h1" and kinds[1]["moved"] == {"worker:0": {"from": "h1", "to": "h3"}}, kinds
    assert "plans used: 1: h1, h2" in out and "2: h2, h3 (h1 lost at " in out, out[-3000:]
    assert f"worker:0 moved to h3; resumed at step {n0}, {redone} steps redone)" in out, out[-3000:]
    # The final model comes from the new chief's host.
    fetched = [line for line in out.splitlines() if "fetched final_model" in line]
    assert len(fetched) == 1 and " from h3 (" in fetched[0], out[-3000:]
    assert (spec.parent / "runs" / "sshtest" / "state" / "final_model" / "saved_model.pb").is_file()
    status = tfcluster("status", str(spec))
    assert status.returncode == 0, status.stderr
    assert "worker:0  h3 " in status.stdout and "spare hosts" not in status.stdout, status.stdout
    assert f"worker:0 moved to h3; resumed at step {n0}, {redone} steps redone" in status.stdout, status.stdout
    # Nothing left running on any host.
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


def test_no_spare_left_fails_in_one_line_naming_the_missing_host(lab, make_spec, tmp_path):
    spec = make_spec(
        [PY, "-c", "import time; print('up', flush=True); time.sleep(120)"],
        hosts=["h1", "h2"], workers=2, restart={"max_restarts": 3}, elastic={"host_wait": 2},
    )
    background = Background()
    preempt_h2 = background.preempt(lab, "h2")

    try:
        code, out = run_and_act(spec, [(r"\[worker:1\] up", preempt_h2)], timeout=120)
        background.join()
    finally:
        bring_back(lab, "h2")
    assert code == 1, out[-4000:]
    lines = [line for line in out.splitlines() if "no spare host left" in line]
    assert len(lines) == 1 and "host h2 (worker:1) lost and no spare host left for worker:1" in lines[0], out[-3000:]
    assert "restarting the whole group" not in out  # no restart was spent on a host that is gone
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")



def test_with_no_spare_the_group_shrinks_to_min_and_grows_back_when_the_host_returns(lab, make_spec, tmp_path):
    """h2 preempted, no spare: worker:0 goes on alone (tasks.worker.min: 1) from the last backup;
    h2 comes back flapping (up 2 s, down 2 s, twice) and is not used until it has answered for
    elastic.settle (5 s) without a break; then the group is stopped gracefully (the step worker:0
    saves on SIGTERM) and restarted with two workers there: 0 steps redone at the grow."""
    epochs, steps = 3, 30
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 1}}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        restart={"max_restarts": 0}, elastic={"host_wait": 3, "settle": 5},
        ssh={"require": ["tensorflow", "tf_keras"]}, state={"dir": _private_state(lab, tmp_path)},
    )
    background = Background()
    settled_from: list[float] = []

    try:
        code, out = run_and_act(spec, [
            (r"\[worker:1\] tfcluster-step epoch=0 step=5 ", background.preempt(lab, "h2")),
            (r"worker:1 left out: 1 worker go on",
             background(lambda: settled_from.append(lab.flap("h2", cycles=2, up=2, down=2)))),
        ], timeout=400)
        background.join()
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out, out[-4000:]
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    assert len(w0) == 3 and len(w1) == 2, out[-4000:]  # worker:1 sat out the shrunk attempt
    alone = int(w0[1]["global_step"])
    last_seen = max(last_step_before(out, "h2 lost", k) for k in ("worker:0", "worker:1"))
    assert alone <= last_seen + 1, (alone, last_seen)
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
    recorded = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in recorded if e["event"] in ("host_lost", "replan", "host_added", "restart")]
    assert kinds == ["host_lost", "replan", "host_added", "replan"], kinds
    # The flapping host was not used before it had answered for elastic.settle without a break.
    [added] = [e for e in recorded if e["event"] == "host_added"]
    assert settled_from and added["time"] >= settled_from[0] + 5 - 1.0, (added, settled_from)  # (probe: ~1 s)
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1"]
    assert [t["host"] for t in json.loads((run / "plan-3.json").read_text())["tasks"]] == ["h1", "h2"]
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


PSS_ARGS = ["--epochs", "2", "--steps-per-epoch", "40", "--step-delay", "0.25", "--progress-every", "5"]


def test_pss_goes_on_with_the_workers_left_when_a_worker_host_is_preempted(lab, make_spec):
    """No spare, tasks.worker.min: 1: worker:1's host h3 is preempted; it is not restarted onto
    the dead host; the group restarts without it from the chief's last checkpoint (TensorFlow's
    coordinator cannot train on without a worker that never answers again), spending no
    restart, and the run succeeds with worker:0 alone."""
    spec = make_spec(
        [PY, "-m", "worker", *PSS_ARGS], hosts=["h1", "h2", "h3"], strategy="parameter_server",
        tasks={"chief": {"count": 1, "hosts": ["h1"]}, "ps": {"count": 1, "hosts": ["h1"]},
               "worker": {"count": 2, "hosts": ["h2", "h3"], "min": 1}},
        restart={"max_restarts": 2}, elastic={"host_wait": 3}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        ssh={"require": ["tensorflow", "tf_keras"]},
    )
    background = Background()
    preempt_h3 = background.preempt(lab, "h3")

    try:
        code, out = run_and_act(spec, [(r"\[chief:0\] tfcluster-step epoch=1 step=10 ", preempt_h3)], timeout=300)
        background.join()
    finally:
        bring_back(lab, "h3")
    assert code == 0, out[-6000:]
    assert "worker:1 left out: 1 worker go on (no spare host); restarting the group there from the last backup" \
        in out, out[-4000:]
    assert "moved to" not in out and "restarting it alone" not in out
    # the shrunk group resumed from the chief's last backup (under parameter_server fit backs up
    # once an epoch: epoch 1's start, global step 40)
    first, second = progress(out, "start", "chief:0")
    assert int(second["global_step"]) == 40 and second["workers"] == "1", (first, second)
    (res,) = progress(out, "result", "chief:0")
    assert 80 <= int(res["global_step"]) <= 81 and (res["epochs_run"], res["steps_run"]) == ("1", "40"), res
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


def test_pss_moves_a_preempted_ps_host_to_the_spare_with_a_whole_restart(lab, make_spec):
    spec = make_spec(
        [PY, "-m", "worker", *PSS_ARGS], hosts=["h1", "h2", "h3"], strategy="parameter_server",
        tasks={"chief": {"count": 1, "hosts": ["h1"]}, "ps": {"count": 1, "hosts": ["h2"]},
               "worker": {"count": 2, "hosts": ["h1"]}},
        restart={"max_restarts": 0}, elastic={"host_wait": 3}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        ssh={"require": ["tensorflow", "tf_keras"]},
    )
    background = Background()
    preempt_h2 = background.preempt(lab, "h2")

    try:
        # In epoch 2: the chief's checkpoint of epoch 1 is there to resume from.
        code, out = run_and_act(spec, [(r"\[chief:0\] tfcluster-step epoch=1 step=5 ", preempt_h2)], timeout=300)
        background.join()
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "h2 lost (unreachable for " in out and "ps:0 moved to h3" in out, out[-4000:]
    starts = progress(out, "start", "chief:0")
    assert len(starts) == 2, out[-4000:]
    resumed = int(starts[1]["global_step"])
    last_seen = last_step_before(out, "h2 lost", "chief:0")
    assert 40 <= resumed <= last_seen, (resumed, last_seen)  # from the chief's checkpoint (epoch 1 or later)
    (res,) = progress(out, "result", "chief:0")
    assert 80 <= int(res["global_step"]) <= 81, res
    run = spec.parent / "runs" / "sshtest" / "latest"
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"] if t["type"] == "ps"] == ["h3"]
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")
