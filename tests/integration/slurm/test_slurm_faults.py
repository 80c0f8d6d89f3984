"""Faults of a ``backend: slurm`` run on the real Slurm lab: a worker's process SIGKILLed on its
node and Slurm's own SIGTERM (``scancel --signal=TERM``), in one run, each end in a group restart
as new steps of the same allocation that resumes from the backup (the SIGTERM's: the step it
saved), with stub tasks; with real TensorFlow workers, a PSS worker killed restarts alone and a real
preemption (a job of the lab's higher-priority partition) ends the run at once after the save,
and ``up`` again resumes there."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support.processes import pids_with_env
from tests.support.cli import ROOT
from tests.support.tfrun import cold, progress, run_and_act, wait_line
from tests.support.waits import read_rest, wait_for

from .conftest import PY, start_tfcluster
from tests.support.slurm_helpers import assert_clean, job_id, latest_run, tf_env
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(400)]

STEPS = str(ROOT / "tests" / "support" / "steps_task.py")


def _train(epochs: int = 2, steps_per_epoch: int = 30) -> list[str]:
    return ["python", "-m", "worker", "--epochs", str(epochs), "--steps-per-epoch", str(steps_per_epoch),
            "--step-delay", "0.05", "--progress-every", "5"]


def _run_and_act(lab, spec, pattern, action, timeout=300) -> tuple[int, str]:
    proc = start_tfcluster(lab, "up", str(spec), "--verbose")  # (the records it waits for: verbose shows them)
    seen: list[str] = []
    try:
        wait_line(proc, pattern, seen, timeout)
        action()
        rest = read_rest(proc, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode, "\n".join(seen) + "\n" + rest


def _events(spec) -> list[ev.RecordEvent]:
    return read_records(latest_run(spec))


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _worker_pid(lab, node: str, marker: str = "-m worker") -> int:
    """The training process (``python -m worker``, or whose command line holds ``marker``) on
    ``node``: found in the node's namespace, not the warm standby beside it (started with
    TFCLUSTER_STANDBY=1), nor the task wrapper whose command line holds the task's (the task is its
    child)."""
    def find():
        standbys = set(pids_with_env("TFCLUSTER_STANDBY", "1"))
        found = [p for p in lab.node_pids(node) if marker in _cmdline(p) and p not in standbys]
        return [p for p in found if p not in {_ppid(q) for q in found}]
    (pid,) = wait_for(find, 30, what=f"the worker process on {node}")
    return pid


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_sigkill_then_slurms_sigterm_restart_the_group_in_the_allocation_and_resume(lab, make_spec):
    """One run, two faults, each a group restart as new steps of the same allocation: worker:1's
    process SIGKILLed on n2 (the restart resumes from the last backup, every 5 steps), then, once
    the restarted group steps, Slurm's own SIGTERM to the job (``scancel --signal=TERM``) reaches
    every task: both save the step they agree on and exit 143, and the next restart resumes there,
    0 steps redone. The tasks are tests/support/steps_task.py (no TensorFlow): what is Slurm's here
    is where each attempt runs and what ends it. The same with the reference worker: a SIGKILLed
    worker's group resumes from its backup, test_slurm_standby.py's (TensorFlow, on slurm); Slurm's
    SIGTERM saved and resumed at with 0 steps redone, the preemption test below (custom loop); the
    Keras loop's save on SIGTERM and its resume, tests/integration/test_fault_tolerance.py's
    test_host_sigterm_to_one_worker_saves_all_and_group_resumes (both loops)."""
    # 100 steps of 0.1 s: after the kill's trigger (step 10) and the SIGTERM's (the restart's first
    # step), time for each to land before the attempt could end. Every restart cold (the tasks import
    # nothing): one path, whatever a standby's timing (standbys on slurm: test_slurm_standby.py).
    spec = make_spec([PY, STEPS, "100", "5", "0.1"], restart=cold(2))
    # The kill once worker:0 said step 10: it writes the backups, each before its step's line, and
    # the stand-ins step on their own clocks (worker:1's step 10 may come before worker:0's backup).
    code, out = run_and_act(spec, [
        (r"\[worker:0\] tfcluster-step .*\bglobal_step=10 ",
         lambda p: os.kill(_worker_pid(lab, "n2", STEPS), signal.SIGKILL)),
        (r"\[worker:0\] tfcluster-start .*\bglobal_step=[1-9]", lambda p: None),  # (attempt 0 started at 0)
        (r"\[worker:0\] tfcluster-step ", lambda p: lab.run("scancel", "--signal=TERM", job_id(spec)))],
        timeout=300, env=lab.env())
    assert code == 0, out[-4000:]
    assert "worker:1 failed: killed by SIGKILL (exit 137)" in out, out[-4000:]
    assert "restarting the whole group (restart 1 of 2)" in out and "restarting the whole group (restart 2 of 2)" in out
    assert "(exit 143)" in out.split("restarting the whole group (restart 1 of 2)")[1], out[-4000:]
    first, resumed, last = progress(out, "start")
    assert first["global_step"] == "0"
    # Each attempt's tasks started at the same step (the stand-ins wait for their peers, as MWMS).
    assert [s["global_step"] for s in progress(out, "start", "worker:1")] == [
        s["global_step"] for s in (first, resumed, last)], out[-4000:]
    # Killed after global step 10 with a backup every 5 steps (written before the step's line).
    assert int(resumed["global_step"]) >= 10, resumed
    after = out.split("restarting the whole group (restart 1 of 2)")[1]  # (attempt 0's survivor saved nothing)
    saved = {p["global_step"] for t in ("worker:0", "worker:1") for p in progress(after, "preempted", t)}
    assert len(saved) == 1, out[-3000:]  # both workers saved the same step
    step = int(saved.pop())
    assert step >= int(resumed["global_step"]) and int(last["global_step"]) == step, (resumed, step, last)  # 0 redone
    for key in ("worker:0", "worker:1"):
        (result,) = progress(out, "result", key)
        assert int(result["steps_run"]) == 100 - step, (key, result)
    events = _events(spec)
    # No re-queueing: one allocation, the later attempts' steps in the same job on the same nodes.
    assert [type(e) for e in events].count(ev.SlurmSubmitted) == 1
    starts = [e for e in events if isinstance(e, ev.Start)]
    assert len(starts) == 6 and {e["slurm_job"] for e in starts} == {job_id(spec)}
    assert [e["node"] for e in starts] == ["n1", "n2"] * 3
    assert len({e["slurm_step"] for e in starts}) == 6  # every launch its own step
    assert_clean(lab, spec)


@pytest.mark.tf
def test_pss_chief_two_workers_and_ps_train_and_a_killed_worker_restarts_alone(lab, make_spec, tfds_dir):
    """worker:1 SIGKILLed on n2: a new step on its node, alone, rejoins and training goes on; then
    Ctrl-C stops every task (a PSS run trained to its end: tests/integration/test_pss.py)."""
    spec = make_spec(["python", "-m", "worker", "--epochs", "3", "--steps-per-epoch", "30", "--step-delay", "0.25",
                      "--progress-every", "5"], env=tf_env(tfds_dir), strategy="parameter_server",
                     tasks={"chief": 1, "worker": 2, "ps": 1}, slurm={"nodes": 3, "tasks_per_node": 2},
                     restart=cold(2))
    code, out = run_and_act(spec, [
        (r"\[chief:0\] tfcluster-step epoch=0 step=10 ", lambda p: os.kill(_worker_pid(lab, "n2"), signal.SIGKILL)),
        (r"\[chief:0\] tfcluster-worker_recovered task=worker:1 ", lambda p: None),
        (r"\[chief:0\] tfcluster-step ", lambda p: p.send_signal(signal.SIGINT))], timeout=300, env=lab.env())
    assert code == 130, out[-5000:]
    starts = [e for e in _events(spec) if isinstance(e, ev.Start)]
    # 4 tasks on 3 nodes, spread in Slurm's node order: n1 chief + worker:0, n2 worker:1, n3 ps:0.
    assert {e["task"]: e["node"] for e in starts[:4]} == {"chief:0": "n1", "worker:0": "n1", "worker:1": "n2",
                                                          "ps:0": "n3"}
    plan = json.loads((latest_run(spec) / "plan.json").read_text())
    cluster = plan["cluster"]  # held once (the compact plan.json)
    a = {n: lab.node_address(n) for n in lab.nodes}
    assert cluster == {"chief": [f"{a['n1']}:23456"], "worker": [f"{a['n1']}:23457", f"{a['n2']}:23456"],
                       "ps": [f"{a['n3']}:23456"]}
    assert "worker:1 exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 2), training continues" in out
    assert "restarting the whole group" not in out
    assert len(progress(out, "start", "chief:0")) == 1  # training never restarted
    assert starts[4]["task"] == "worker:1" and starts[4]["node"] == "n2"  # a new step on its node
    assert starts[4]["slurm_job"] == starts[0]["slurm_job"] and starts[4]["slurm_step"] != starts[2]["slurm_step"]
    recovered = out.index("[chief:0] tfcluster-worker_recovered task=worker:1 ")
    assert progress(out[recovered:], "step", "chief:0"), out[-3000:]  # trained on with worker:1 back
    stopped = {e["task"] for e in _events(spec) if isinstance(e, ev.Stopped)}
    assert {"worker:0", "worker:1", "ps:0"} <= stopped  # the servers were stopped at the end
    assert_clean(lab, spec)


@pytest.mark.tf
def test_slurm_preemption_saves_the_step_ends_the_run_at_once_and_up_again_resumes_there(lab, make_spec, tfds_dir):
    """Real preemption (slurm.conf: PreemptType=preempt/partition_prio, PreemptMode=CANCEL,
    GraceTime on the lab's partition): a job in the higher-priority partition wants every node.
    Slurm sends every step SIGTERM at once; both workers save the same step and exit 143. No
    restart goes into the doomed allocation: the run ends in one line naming the preemption and
    cancels its job at once (the preemptor runs without waiting out the GraceTime). ``up``
    again, once the nodes are free, resumes at the saved step with zero steps redone."""
    from tests.labs.slurm import GRACE, URGENT

    # 120 steps: after the trigger at step 10, 110 (8 s or more) for sbatch, slurmctld's
    # preemption and its SIGTERM to land in.
    # max_restarts: 2, which no restart spends (the run ends at the preemption), every restart cold:
    # a standby would import TensorFlow for a restart that never comes, in both runs.
    spec = make_spec(_train(steps_per_epoch=60) + ["--loop", "custom"], env=tf_env(tfds_dir), restart=cold(2))
    urgent: list[str] = []

    def preempt():
        urgent.append(lab.run("sbatch", "--parsable", "-N3", "--exclusive", "-p", URGENT, "-o", "/dev/null",
                              "--wrap", "sleep 1").stdout.strip())

    code, out = _run_and_act(lab, spec, r"\[worker:0\] tfcluster-step epoch=0 step=10 ", preempt)
    assert code == 1, out[-4000:]
    job = job_id(spec)
    saved = {p["global_step"] for t in ("worker:0", "worker:1") for p in progress(out, "preempted", t)}
    assert len(saved) == 1, out[-3000:]  # both workers saved the same step
    step = int(saved.pop())
    assert step >= 10
    failed = [line for line in out.splitlines() if "prepare failed:" in line]
    assert len(failed) == 1 and f"slurm: allocation job {job} was preempted at " in failed[0], out[-3000:]
    assert "run tfcluster up again to resume" in failed[0] and "not retried" not in out
    events = _events(spec)
    assert [e["attempt"] for e in events if isinstance(e, ev.Start)] == [0, 0]  # nothing started in the doomed job
    assert [e["outcome"] for e in events if isinstance(e, ev.RunOutcome)] == ["failed"]
    # Cancelled at once, not GRACE s after the preemption: the preemptor gets the nodes, runs
    # and is gone well before that.
    assert ev.SlurmCancelled in [type(e) for e in events]
    wait_for(lambda: not lab.jobs(), GRACE / 3, what="our job cancelled and the preemptor run")

    code, out = _run_and_act(lab, spec, r"tfcluster-start ", lambda: None)
    assert code == 0, out[-4000:]
    assert [int(s["global_step"]) for s in progress(out, "start")] == [step]  # zero steps redone
    (result,) = progress(out, "result")
    assert int(result["steps_run"]) == 120 - step and 0.1 <= float(result["accuracy"]) <= 1.0
    assert_clean(lab, spec)
