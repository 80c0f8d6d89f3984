"""``backend: slurm`` against a real Slurm 22.05 cluster (slurmctld + one slurmd per network
namespace, see tests/labs/slurm.py): placement from the allocation, MWMS and PSS training, restarts and
preemption inside one allocation, teardown and ``tfcluster down``, preflight errors."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.support.tfrun import progress, wait_line
from tests.support.slurm_helpers import assert_clean, job_id, latest_run, tf_env
from tests.support.waits import read_rest, wait_for

from .conftest import PY, start_tfcluster, tfcluster
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(300)]

SHOW = (
    "import json,os,socket;c=json.loads(os.environ['TF_CONFIG']);"
    "print('TASK', os.environ['TFCLUSTER_TASK'], os.environ['SLURMD_NODENAME'], os.environ['SLURM_JOB_ID'], "
    "json.dumps(c['cluster']), sep='|', flush=True)"
)
TRAIN = ["python", "-m", "worker", "--epochs", "2", "--steps-per-epoch", "12", "--batch-size", "16",
         "--progress-every", "4"]


def test_tasks_run_as_steps_on_their_nodes_with_node_addresses(lab, make_spec):
    spec = make_spec([PY, "-c", SHOW], tasks={"worker": 3})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split("] ", 1)[1].split("|") for line in proc.stdout.splitlines() if "] TASK|" in line]
    by_task = {r[1]: r for r in rows}
    assert set(by_task) == {"worker:0", "worker:1", "worker:2"}, proc.stdout
    job = job_id(spec)
    # One allocation (one job id for every task), one task per node in Slurm's node order.
    assert {r[3] for r in rows} == {job}
    assert [by_task[f"worker:{i}"][2] for i in range(3)] == ["n1", "n2", "n3"]
    # TF_CONFIG carries each node's NodeAddr, not its name.
    assert json.loads(by_task["worker:0"][4]) == {"worker": [f"{lab.node_address(n)}:23456" for n in lab.nodes]}
    record = json.loads((latest_run(spec) / "slurm.json").read_text())
    assert record["nodes"] == ["n1", "n2", "n3"]
    assert record["addresses"] == {n: lab.node_address(n) for n in lab.nodes}
    plan = json.loads((latest_run(spec) / "plan.json").read_text())
    assert [t["host"] for t in plan["tasks"]] == ["n1", "n2", "n3"]
    # Output is prefixed per task and kept in the task's log; the step-id line is not output.
    assert "TASK|worker:2|n3|" in (latest_run(spec) / "logs" / "worker-2.log").read_text()
    assert "tfcluster-slurm-step" not in proc.stdout
    assert f"slurm job {job}" in proc.stderr
    assert_clean(lab, spec)


def test_tasks_per_node_packs_tasks_and_gives_each_its_own_port(lab, make_spec):
    spec = make_spec([PY, "-c", SHOW], tasks={"worker": 4}, slurm={"tasks_per_node": 2})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r[1]: r for r in (line.split("] ", 1)[1].split("|") for line in proc.stdout.splitlines()
                              if "] TASK|" in line)}
    assert [rows[f"worker:{i}"][2] for i in range(4)] == ["n1", "n1", "n2", "n2"]
    a1, a2 = lab.node_address("n1"), lab.node_address("n2")
    assert json.loads(rows["worker:0"][4]) == {"worker": [f"{a1}:23456", f"{a1}:23457", f"{a2}:23456",
                                                          f"{a2}:23457"]}
    assert_clean(lab, spec)


def test_a_failing_task_fails_the_run_with_its_own_exit_code(lab, make_spec):
    # worker:1 dies of SIGKILL (retryable) in both attempts; worker:0 would sleep on.
    spec = make_spec([PY, "-c", "import os,time; os.environ['TFCLUSTER_TASK']=='worker:1' and os.kill(os.getpid(), 9); "
                      "time.sleep(60)"], restart={"max_restarts": 1})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.count("worker:1 failed: killed by SIGKILL (exit 137)") == 2, proc.stderr
    assert "gave up after 2 attempt(s)" in proc.stderr
    # The restart was a new step in the same allocation: one job, two step launches of worker:1.
    events = read_records(latest_run(spec))
    starts = [e for e in events if isinstance(e, ev.Start) and e["task"] == "worker:1"]
    assert len(starts) == 2 and {e["slurm_job"] for e in starts} == {job_id(spec)}
    assert len([e for e in events if isinstance(e, ev.SlurmSubmitted)]) == 1
    assert_clean(lab, spec)


@pytest.mark.tf
def test_mwms_two_workers_on_two_nodes_train_and_finish(lab, make_spec, tfds_dir):
    spec = make_spec(TRAIN, env=tf_env(tfds_dir))
    proc = tfcluster(lab, "up", str(spec), "--verbose", timeout=280)  # (verbose: the tasks' records shown)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    for key in ("worker:0", "worker:1"):
        (start,) = progress(proc.stdout, "start", key)
        assert start["strategy"] == "multi_worker_mirrored" and start["global_step"] == "0", start
    (result,) = progress(proc.stdout, "result", "worker:0")
    assert 0.2 < float(result["accuracy"]) <= 1.0, result  # above chance (10 classes)
    epochs = progress(proc.stdout, "epoch", "worker:0")
    assert [e["epoch"] for e in epochs] == ["1", "2"], epochs
    assert_clean(lab, spec)


# ---------------------------------------------------------------- teardown

SLEEPER = [PY, "-c", "import os,time; print('ATTEMPT', os.environ['TFCLUSTER_RESTART_COUNT'], "
           "os.environ['SLURMD_NODENAME'], flush=True); time.sleep(120)"]


def _wait_started(proc, count: int, timeout: float = 60) -> list[str]:
    """Read the launcher's output until ``count`` tasks printed ATTEMPT (line by line, bounded by
    wait_line's watchdog: a select() on the pipe would miss lines already in the file's buffer)."""
    seen: list[str] = []
    for _ in range(count):
        wait_line(proc, r"\] ATTEMPT ", seen, timeout)
    return seen


def _finish(proc, timeout: float = 60) -> str:
    try:
        out = read_rest(proc, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return out


def test_ctrl_c_cancels_the_job_and_leaves_nothing_on_any_node(lab, make_spec):
    spec = make_spec(SLEEPER)
    proc = start_tfcluster(lab, "up", str(spec))
    try:
        _wait_started(proc, 2)
        job = job_id(spec)
        assert job in lab.jobs()
        assert all(lab.node_pids(n) for n in ("n1", "n2"))  # the steps really run there
        proc.send_signal(signal.SIGINT)
        out = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-3000:]
    assert job not in lab.jobs()  # close() waited until Slurm no longer lists it as live
    assert_clean(lab, spec)


def test_down_stops_the_run_and_its_job(lab, make_spec):
    spec = make_spec(SLEEPER)
    proc = start_tfcluster(lab, "up", str(spec))
    try:
        _wait_started(proc, 2)
        job = job_id(spec)
        down = tfcluster(lab, "down", str(spec), timeout=90)
        assert down.returncode == 0, down.stderr
        out = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out[-3000:]
    assert job not in lab.jobs()
    assert_clean(lab, spec)


def test_down_cancels_the_job_of_a_launcher_that_was_killed(lab, make_spec):
    """SIGKILL of the launcher: its steps die with their srun (taskwrap's lifeline), but the
    allocation stays until ``tfcluster down`` cancels it by the job id in the run record."""
    spec = make_spec(SLEEPER)
    proc = start_tfcluster(lab, "up", str(spec))
    try:
        _wait_started(proc, 2)
        job = job_id(spec)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for node in ("n1", "n2"):
        wait_for(lambda node=node: not any("ATTEMPT" in c or "time.sleep" in c for c in lab.node_cmdlines(node)),
                 30, what=f"the orphaned step on {node} to stop")
    assert job in lab.jobs()  # the allocation outlives its launcher...
    down = tfcluster(lab, "down", str(spec), timeout=90)
    assert down.returncode == 0, down.stderr
    assert f"cancelled slurm job {job}" in down.stderr
    assert job not in lab.jobs()  # ...until down cancels it by id
    assert_clean(lab, spec)


# ---------------------------------------------------------------- preflight

def test_more_nodes_than_the_partition_has_fails_in_preflight(lab, make_spec):
    spec = make_spec(SLEEPER, slurm={"nodes": 5})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tfcluster: error: slurm.nodes: 5 node(s) requested but partition 'debug' has 3; lower slurm.nodes (or raise "
        "slurm.tasks_per_node) or choose a bigger partition"], proc.stderr
    assert "Traceback" not in proc.stderr and lab.jobs() == []


def test_unknown_partition_fails_in_preflight_naming_the_partitions(lab, make_spec):
    spec = make_spec(SLEEPER, slurm={"partition": "gpu"})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("tfcluster: error: slurm.partition: partition 'gpu' does not exist (partitions: "
                                   "debug, urgent); fix slurm.partition"), proc.stderr
    assert lab.jobs() == []


def test_a_request_no_node_can_satisfy_fails_in_preflight_with_slurms_reason(lab, make_spec):
    spec = make_spec(SLEEPER, slurm={"sbatch": ["--mem=999999"]})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcluster: error: slurm: the allocation can never be granted ("), lines
    assert "--mem=999999" in lines[0] and "fix slurm:" in lines[0]
    assert lab.jobs() == []


def test_a_job_pending_beyond_queue_timeout_is_cancelled_with_slurms_reason(lab, make_spec):
    # Every node busy with another job: the run's allocation pends (reason Resources).
    blocker = lab.block_all_nodes()
    spec = make_spec(SLEEPER, slurm={"queue_timeout": 3})
    t0 = time.monotonic()
    proc = tfcluster(lab, "up", str(spec))
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    job = job_id(spec)
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"tfcluster: error: slurm: job {job} still pending after slurm.queue_timeout=3 s (reason: "
                    "Resources); cancelled it; free nodes, choose another partition or raise slurm.queue_timeout"), \
        proc.stderr
    assert 3 <= took < 30
    assert lab.jobs() == [blocker]  # ours cancelled by id; the other job untouched


@pytest.mark.parametrize("unshared", ["state_dir", "workdir"])
def test_nodes_that_do_not_share_the_workdir_or_state_dir_stop_the_run_before_any_task(lab, make_spec, tmp_path,
                                                                                        unshared):
    """A spec on a disk only this machine has (``lab.private``: every node sees an empty tmpfs
    there instead): once the nodes are known the run stops, naming the first node and the fix;
    no task is started and the allocation is cancelled."""
    private = lab.private / tmp_path.name
    private.mkdir(parents=True)
    extra = {"run_dir": str(private / "runs")} if unshared == "state_dir" else {"workdir": str(private)}
    spec = make_spec(SLEEPER, **extra)
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1, proc.stderr
    runs = private / "runs" if unshared == "state_dir" else spec.parent / "runs"
    what = (f"does not see the state dir {runs / 'slurmtest' / 'state'}" if unshared == "state_dir"
            else f"has no workdir {private}")
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tfcluster: error: slurm: node n1 {what} (and 1 more node(s)); the tasks there would run without this "
        "machine's code or lose their checkpoints: put the workdir and run_dir (the state dir) on a file system "
        "every node mounts (home or scratch on NFS/Lustre)"), proc.stderr
    assert "Traceback" not in proc.stderr
    record = (runs / "slurmtest" / "latest").resolve()
    kinds = [type(e) for e in read_records(record)]
    assert ev.SlurmRunning in kinds and ev.Start not in kinds, kinds
    assert ev.SlurmCancelled in kinds, kinds
    wait_for(lambda: lab.jobs() == [], 30, what="the allocation to be cancelled")
    assert not list((runs / "slurmtest" / "state").glob(".tfcluster-shared-*"))  # the marker is removed


def test_an_allocation_ended_by_slurm_fails_the_run_in_one_line(lab, make_spec):
    """Slurm ends the job under the run (an admin's scancel, a preemption that cancels, the time
    limit): no restart can run in it; the run fails saying so, and nothing is left."""
    spec = make_spec(SLEEPER, restart={"max_restarts": 1})
    proc = start_tfcluster(lab, "up", str(spec))
    try:
        _wait_started(proc, 2)
        job = job_id(spec)
        lab.run("scancel", job)
        out = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out[-3000:]
    assert f"slurm: allocation job {job} is no longer running (CANCELLED" in out, out[-3000:]
    assert "run tfcluster up again to resume" in out
    assert_clean(lab, spec)


def test_dry_run_checks_the_request_and_shows_placeholders_without_submitting(lab, make_spec):
    spec = make_spec(SLEEPER)
    proc = tfcluster(lab, "up", "--dry-run", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert "placeholder placement: slurm assigns the nodes when the job starts" in proc.stdout
    assert "dry run: preflight passed" in proc.stderr
    assert lab.jobs() == []  # sbatch --test-only submits nothing


def _queued_run(lab, make_spec):
    """Every node held by another job, then ``up``: (the blocking job, the spec, the launcher
    waiting in the queue)."""
    blocker = lab.block_all_nodes()
    spec = make_spec(SLEEPER, slurm={"queue_timeout": 120})
    return blocker, spec, start_tfcluster(lab, "up", str(spec))


def _queued_job(spec) -> str:
    """The queued run's job id, from its run record (written before the launcher waits)."""
    record = spec.parent / "runs" / "slurmtest" / "latest" / "slurm.json"
    wait_for(lambda: record.exists(), 30, what="the job id in the run record")
    return json.loads(record.read_text())["job_id"]


def test_down_while_the_allocation_pends_cancels_the_queued_job(lab, make_spec):
    """The run record (with the job id) exists before the launcher waits in the queue, so
    ``tfcluster down`` can cancel a job that never ran."""
    blocker, spec, proc = _queued_run(lab, make_spec)
    try:
        job = _queued_job(spec)
        assert lab.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "PENDING"
        down = tfcluster(lab, "down", str(spec), timeout=90)
        assert down.returncode == 0, down.stderr
        out = _finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # The waiting launcher took down's SIGTERM like Ctrl-C and cancelled its job itself.
    assert proc.returncode == 130, out
    assert job not in lab.jobs() and lab.jobs() == [blocker]


def test_down_cancels_the_queued_job_of_a_launcher_killed_while_waiting(lab, make_spec):
    blocker, spec, proc = _queued_run(lab, make_spec)
    try:
        job = _queued_job(spec)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert job in lab.jobs()  # still queued: nobody cancelled it...
    down = tfcluster(lab, "down", str(spec), timeout=90)
    assert down.returncode == 0, down.stderr
    assert f"cancelled slurm job {job}" in down.stderr, down.stderr  # ...until down did, from the record
    assert lab.jobs() == [blocker]


def test_startup_watchdog_dials_the_node_addresses(lab, make_spec):
    """worker:0 listens on its port, worker:1 never does: the watchdog (which dials each task at
    its node's address) names worker:1 alone."""
    listen = [PY, "-c", "import os,socket,time; t=os.environ['TFCLUSTER_TASK']; s=socket.socket(); "
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 23456)); "
              "t=='worker:0' and s.listen(); print('ATTEMPT', t, flush=True); time.sleep(120)"]
    spec = make_spec(listen, watchdog={"startup_timeout": 6, "stop_grace": 1})
    proc = tfcluster(lab, "up", str(spec), timeout=90)
    assert proc.returncode == 1, proc.stderr
    a2 = lab.node_address("n2")
    assert ("worker:1 failed: never came up: no TF server listening within watchdog.startup_timeout=6 s: "
            f"worker:1 ({a2}:23456)") in proc.stderr, proc.stderr
    assert_clean(lab, spec)


def test_up_detach_hands_over_once_every_step_listens_and_down_cancels_the_job(lab, make_spec):
    listen = [PY, "-c", "import os,socket,time; s=socket.socket(); "
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 23456)); s.listen(); "
              "print('ATTEMPT', os.environ['TFCLUSTER_TASK'], flush=True); time.sleep(300)"]
    spec = make_spec(listen)
    try:
        up = tfcluster(lab, "up", str(spec), "--detach", timeout=90)
        assert up.returncode == 0, up.stdout + up.stderr
        job = job_id(spec)
        assert job in lab.jobs()
        supervisor = int(json.loads((latest_run(spec) / "launcher.json").read_text())["pid"])
        assert os.path.exists(f"/proc/{supervisor}")  # the detached supervisor holds the run
        status = tfcluster(lab, "status", str(spec), "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["state"] == "running", status.stdout
        assert all(lab.node_pids(n) for n in ("n1", "n2"))
        down = tfcluster(lab, "down", str(spec), timeout=90)
        assert down.returncode == 0 and "stopped" in down.stderr, down.stderr
    finally:
        tfcluster(lab, "down", str(spec), timeout=90)
    assert job not in lab.jobs()
    wait_for(lambda: not os.path.exists(f"/proc/{supervisor}"), 20, what="the detached supervisor to exit")
    assert_clean(lab, spec)
