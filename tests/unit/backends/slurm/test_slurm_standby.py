"""Warm standby on ``backend: slurm`` (launcher/backends/slurm/standby.py), its pure parts: when a run
keeps none (GPU tasks dividing a node's GPUs), what ``plan`` says, a standby's srun line, and the
promotion file. The lab test (tests/integration/slurm/test_slurm_standby.py) shows Slurm doing it."""

from __future__ import annotations

import json
import stat

import pytest

from launcher.backends.base import StartRequest
from launcher.backends.slurm import gpus, standby
from launcher.errors import LaunchError
from launcher.loader.load import LoadedSpec, parse_spec
from launcher.supervise.standby import plan_line

HEAD = "name: g\nbackend: slurm\nentrypoint: python -m worker\nrestart: {max_restarts: 2}\n"
MWMS = "strategy: multi_worker_mirrored\ntasks: {worker: 2}\n"


def _loaded(tmp_path, body):
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + body)
    return LoadedSpec(parse_spec(path.read_text(), str(path)), path)


def _plan_line(tmp_path, body) -> str:
    from launcher.app.up import plan_for

    spec = _loaded(tmp_path, body).spec
    return plan_line(spec, plan_for(spec).tasks)


@pytest.mark.parametrize("body", [
    MWMS,  # one worker per node: its standby's step gets all the node's GPUs, as its task's did
    MWMS + "slurm: {tasks_per_node: 2}\ndevices: {gpus_per_task: all}\n",  # every task sees the job's GPUs
    MWMS + "slurm: {tasks_per_node: 2}\ndevices: {gpus: 0}\n",  # no GPU asked for
    MWMS + "slurm: {tasks_per_node: 2}\nenv: {CUDA_VISIBLE_DEVICES: '0'}\n",  # the spec places them itself
    # chief:0 + worker:0 on node1, worker:1 + ps:0 on node2: one GPU task per node (chief and ps: none)
    "strategy: parameter_server\ntasks: {chief: 1, worker: 2, ps: 1}\nslurm: {tasks_per_node: 2}\n",
])
def test_standby_is_on_where_each_task_keeps_its_gpus(tmp_path, body):
    assert standby.refusal(_loaded(tmp_path, body).spec) is None
    assert _plan_line(tmp_path, body).startswith("warm standby: on (auto: tfcluster's worker)")


@pytest.mark.parametrize("devices", ["", "devices: {gpus_per_task: 1}\n"])
def test_gpu_tasks_dividing_a_node_keep_none_and_plan_says_why_in_one_line(tmp_path, devices):
    line = _plan_line(tmp_path, MWMS + "slurm: {tasks_per_node: 2}\n" + devices)
    assert line == ("warm standby: off on backend slurm: GPU tasks worker:0 and worker:1 divide their node's GPUs "
                    "(slurm.tasks_per_node 2), and Slurm gives a standby's step (srun --overlap) the node's first "
                    "GPUs, not its task's (an --exact step waits until they are free); every restart starts cold "
                    "(a partition without GPUs: set devices.gpus: 0)")


def test_warm_standby_true_does_not_override_the_refusal(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: g\nbackend: slurm\nentrypoint: python -m worker\nrestart: {max_restarts: 1, "
                    "warm_standby: true}\n" + MWMS + "slurm: {tasks_per_node: 2}\n")
    from launcher.app.up import plan_for

    spec = parse_spec(path.read_text(), str(path))
    line = plan_line(spec, plan_for(spec).tasks)
    assert line.startswith("warm standby: off on backend slurm: GPU tasks worker:0 and worker:1")
    assert line.endswith("(restart.warm_standby: true has no effect here)")


def _backend(tmp_path, body, per_node):
    """The backend's seams as allocate() leaves them: job 42, the plan's nodes, ``per_node`` GPUs on each."""
    from launcher.app.up import plan_for
    from launcher.backends.slurm.backend import SlurmBackend

    loaded = _loaded(tmp_path, body)
    backend = SlurmBackend.from_spec(loaded)
    job = backend.hosts.job
    job.job_id = "42"
    plan = plan_for(loaded.spec)
    job.placed = {t.key: t.host for t in plan.tasks}
    job.gpus_per_node = per_node
    job.steps = gpus.steps(job.takes(list(job.placed)), job.placed, per_node, 4)
    return backend, plan


def test_once_the_job_runs_the_steps_decide_a_cpu_partition_keeps_standbys(tmp_path):
    body = MWMS + "slurm: {tasks_per_node: 2}\n"
    backend, _ = _backend(tmp_path, body, 0)  # sinfo: no GPU in the partition, CPU steps
    spec = backend.hosts.job.spec
    assert backend.hosts.standby_off(spec) is None
    backend, _ = _backend(tmp_path, body, 2)  # two GPUs each node: one each, --exact
    assert backend.hosts.standby_off(spec).startswith("GPU tasks worker:0 and worker:1 divide their node's GPUs")
    backend.hosts.job.job_id = None  # not allocated yet (plan): what the spec says
    assert backend.hosts.standby_off(spec) == standby.refusal(spec)


def test_a_standby_step_overlaps_and_asks_for_its_tasks_gpus(tmp_path):
    backend, plan = _backend(tmp_path, MWMS, 2)
    worker = plan.task("worker:0")
    cold = backend.tasks.job.srun_argv(worker, "worker-0.1")
    warm = backend.tasks.job.srun_argv(worker, "worker-0.2", standby=True)
    assert "--overlap" not in cold and "--exact" in cold and "--gpus-per-task=2" in cold
    assert "--overlap" in warm and "--exact" in warm and "--gpus-per-task=2" in warm
    assert [a for a in warm if a != "--overlap"] == [a.replace("worker-0.1", "worker-0.2") for a in cold]


def test_a_standby_that_would_get_another_tasks_gpus_is_refused_before_any_srun(tmp_path, monkeypatch):
    import subprocess

    backend, plan = _backend(tmp_path, MWMS + "slurm: {tasks_per_node: 2}\n", 2)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("srun started"))
    with pytest.raises(LaunchError) as err:
        backend.tasks.start(StartRequest(plan.task("worker:1"), standby=True), lambda k, line: None)
    assert "the first 1 of the node's 2 GPUs" in err.value.lines[0]


def test_the_promotion_file_is_whole_and_private(tmp_path):
    path = standby.promotion_path(tmp_path / "run", "worker-0.3")
    assert path == tmp_path / "run" / "standby" / "worker-0.3.json"
    standby.write_promotion(path, {"TF_CONFIG": "{}", "TFCLUSTER_RESTART_COUNT": "1"})
    assert json.loads(path.read_text()) == {"TF_CONFIG": "{}", "TFCLUSTER_RESTART_COUNT": "1"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["worker-0.3.json"]  # no temporary left


def test_free_memory_is_each_nodes_memavailable_read_on_the_node_in_one_step():
    from launcher.backends.slurm.standby import MEMORY_STEP, memory_argv, parse_memory

    argv = memory_argv("42", ["n1", "n2"])
    assert argv[:7] == ["srun", "--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2",
                        "--overlap"] and f"--job-name={MEMORY_STEP}" in argv
    out = "n2 MemAvailable:   2048 kB\nn1 MemAvailable: 1024 kB\nn9 MemAvailable: 1 kB\nn1\ngarbage \x1b[31m\n"
    # kB -> bytes; a node not asked about, a node that said nothing usable, garbage: left out.
    assert parse_memory(out, ["n1", "n2", "n3"]) == {"n1": 1024 * 1024, "n2": 2048 * 1024}
    assert parse_memory("n1 MemAvailable: lots kB\n", ["n1"]) == {}


def test_free_memory_before_the_job_runs_is_unknown_which_keeps_the_standby():
    from launcher.backends.slurm.standby import free_memory

    assert free_memory(None, ["n1"]) == {} and free_memory("42", []) == {}
