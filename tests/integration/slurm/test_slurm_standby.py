"""Warm standby on ``backend: slurm`` (launcher/backends/slurm/standby.py) on the real Slurm lab: the
next attempt's processes are job steps of the run's allocation on their tasks' nodes, promoted by
their promotion file (in the run's record dir, which the nodes see) and ``scancel --signal=USR1``;
no standby step outlives the run, however it ends."""

from __future__ import annotations

import re
import os
import signal

import pytest

from tests.support.cli import ROOT
from tests.support.processes import task_pids
from tests.support.slurm_helpers import assert_clean, job_id, latest_run, tf_env
from tests.support.tfrun import progress, run_and_act

from .conftest import PY, tfcluster
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"
SCRIPT = str(ROOT / "tests" / "support" / "standby_task.py")


def _events(spec) -> list[ev.RecordEvent]:
    return read_records(latest_run(spec))


def _kill_task_on(lab, spec, key: str, node: str, sig: int):
    """An action killing ``key``'s running process (not its standby, not the local srun) on ``node``."""
    def act(_proc):
        ours = set(task_pids(latest_run(spec).name, key)) & set(lab.node_pids(node))
        assert len(ours) == 1, (ours, lab.node_cmdlines(node))
        os.kill(ours.pop(), sig)
    return act


@pytest.mark.tf
@pytest.mark.timeout(500)
def test_a_killed_worker_restarts_the_group_from_promoted_standbys_with_their_gpus(lab, make_spec, tfds_dir):
    """2-worker MWMS, tfcluster's worker: once attempt 0 trains, each node gets worker's next
    process as one more step (``--overlap``: the lab's nodes have 2 GPUs, each worker's step holds
    both, and the standby's step is given the same two). worker:1 SIGKILLed on n2 once both wait:
    the restart promotes both standbys (their promotion files written, read and removed by the
    workers), TFCLUSTER_RESTART_COUNT=1 reaches them, they resume from the backup and train; then
    Ctrl-C ends the run. (Training to the end adds nothing the promotion decides: a run that ends
    after its standbys' promotion, the next attempt's standbys stopped with it, is
    test_no_standby_step_outlives_the_run's "success"; a slurm run trained to the end is
    test_slurm_backend.py's. max_restarts: 1, the restart it takes: the promoted attempt keeps
    no standbys, two TensorFlow imports less.)"""
    # 200 steps of 0.3 s at least: time for two standbys to import TensorFlow beside the training.
    spec = make_spec(["python", "-m", "worker", "--epochs", "2", "--steps-per-epoch", "100", "--step-delay", "0.3",
                      "--save-freq", "5", "--progress-every", "5"], env=tf_env(tfds_dir), restart={"max_restarts": 1})
    plan = tfcluster(lab, "plan", str(spec))
    assert "warm standby: on (auto: tfcluster's worker)" in plan.stdout, plan.stdout + plan.stderr
    # The promoted attempt's own lines: its start from the backup (global_step > 0: attempt 0
    # started at 0), then a step it trained.
    code, out = run_and_act(spec, [(READY, lambda p: None),
                                   (READY, _kill_task_on(lab, spec, "worker:1", "n2", signal.SIGKILL)),
                                   (r"^\[worker:0\] tfcluster-start .*\bglobal_step=[1-9]", lambda p: None),
                                   (r"^\[worker:0\] tfcluster-step ", lambda p: p.send_signal(signal.SIGINT))],
                            timeout=400, env=lab.env())
    assert code == 130, out[-5000:]
    assert "worker:1 failed: killed by SIGKILL (exit 137)" in out, out[-4000:]
    assert "restarting the whole group (restart 1 of 1)" in out
    recorded = _events(spec)
    job = job_id(spec)
    promoted = {e["task"]: e for e in recorded if isinstance(e, ev.StandbyPromoted)}
    assert sorted(promoted) == ["worker:0", "worker:1"], [e for e in recorded if isinstance(e, (ev.StandbyStart, ev.StandbyPromoted, ev.StandbyStopped))]
    assert {k: (e["node"], e["slurm_job"]) for k, e in promoted.items()} == {"worker:0": ("n1", job),
                                                                           "worker:1": ("n2", job)}
    starts = [e for e in recorded if isinstance(e, ev.Start)]
    # Attempt 1 started no new step: its tasks are the standbys' steps.
    assert {e["task"]: e["slurm_step"] for e in starts if e["attempt"] == 1} == \
        {k: e["slurm_step"] for k, e in promoted.items()}, starts
    assert not {e["slurm_step"] for e in promoted.values()} & {e["slurm_step"] for e in starts if e["attempt"] == 0}
    for key in ("worker:0", "worker:1"):
        assert f"[{key}] tfcluster-standby promoted" in out, out[-4000:]
        assert re.search(rf"^\[{key}\] worker: {key} strategy=\S+ loop=\S+ restart=1 ", out, re.M), out[-4000:]
        # The standby's step got the GPUs its task's step had (a node's both): the lab's indices.
        gpus = [e["gpus"] for e in recorded if isinstance(e, ev.TaskGpus) and e["task"] == key]
        assert gpus[:2] == [[0, 1], [0, 1]], gpus
    assert "standby promotion file" not in out  # each read its file
    assert not list((latest_run(spec) / "standby").glob("*.json"))  # and removed it
    first, resumed = progress(out, "start")
    assert first["global_step"] == "0" and int(resumed["global_step"]) >= 5, resumed  # from the backup
    assert [e["attempt"] for e in recorded if isinstance(e, ev.StandbyStart)] == [1]  # (none for a restart 2)
    assert_clean(lab, spec)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["success", "failure", "ctrl-c", "down", "preempted"])
def test_no_standby_step_outlives_the_run(lab, make_spec, how):
    """Standbys (an entrypoint of one's own that follows the protocol: tests/support/standby_task.py,
    which fails without its promotion file) wait on both nodes when the run ends: success (worker:1
    SIGKILLed, both standbys promoted, the next attempt's stopped at the end), a permanent failure,
    Ctrl-C, ``tfcluster down`` after the launcher was SIGKILLed, and a real preemption (a job of the
    lab's higher-priority partition: no restart, not even a promotion, goes into the doomed
    allocation; with TensorFlow and no standbys, test_slurm_faults.py's preemption test). Then no
    step of the job is left and no process on any node."""
    from tests.labs.slurm import URGENT

    def preempt(_proc):
        lab.run("sbatch", "--parsable", "-N3", "--exclusive", "-p", URGENT, "-o", "/dev/null", "--wrap", "sleep 1")

    # (143 permanent: the SIGTERM'd worker:1 of "failure" ends the run; a preemption's 143 is retryable.)
    permanent = {"permanent_exit_codes": [143]} if how != "preempted" else {}
    spec = make_spec([PY, SCRIPT, "ack"], devices={"gpus": 0},
                     restart={"max_restarts": 2, "warm_standby": True, **permanent})
    act = {"success": _kill_task_on(lab, spec, "worker:1", "n2", signal.SIGKILL),
           "failure": _kill_task_on(lab, spec, "worker:1", "n2", signal.SIGTERM),
           "ctrl-c": lambda p: p.send_signal(signal.SIGINT), "down": lambda p: p.kill(), "preempted": preempt}[how]
    code, out = run_and_act(spec, [(READY, lambda p: None), (READY, act)], timeout=150, env=lab.env())
    assert code == {"success": 0, "failure": 1, "ctrl-c": 130, "down": -signal.SIGKILL, "preempted": 1}[how], out[-3000:]
    recorded = _events(spec)
    started = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    assert started and started[0]["hosts"] == ["n1", "n2"], started
    # Each node's MemAvailable, read on the node (one step over the nodes): the lab's nodes share
    # this machine's memory, so both say what /proc/meminfo says here, give or take.
    here = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable:")).split()[1]) // 1024
    available = started[0]["available_mb"]
    assert sorted(available) == ["n1", "n2"] and all(abs(v - here) < 0.5 * here for v in available.values()), \
        (available, here)
    job = job_id(spec)
    if how == "down":
        assert job in lab.jobs()  # the launcher died: its job and the steps are left for down
        res = tfcluster(lab, "down", str(spec), timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"cancelled slurm job {job}" in res.stdout + res.stderr
    else:
        assert ev.StandbyStopped in [type(e) for e in recorded], [type(e) for e in recorded]
    if how == "preempted":
        assert f"slurm: allocation job {job} was preempted at " in out, out[-3000:]
        assert not [e for e in recorded if isinstance(e, (ev.StandbyPromoted, ev.Start)) and e["attempt"] > 0]
    if how == "success":
        assert sorted(e["task"] for e in recorded if isinstance(e, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
        assert re.search(r"^\[worker:1\] standby-task key=worker:1 attempt=1 pid=\d+ ", out, re.M), out
    assert_clean(lab, spec)
    assert not lab.run("squeue", "-h", "-s", "-j", job, check=False).stdout.strip()
