"""backend: docker runs each container with its task's env as the plan has it (threads' budget and
GPUs included: launcher/plan/containergpus.py made them), adding only where the record is mounted
and the attempt's own variables; nothing of the plan's is replaced. No engine needed: the env is
made before any call to one."""

from __future__ import annotations

from launcher.app.stages import plan_for
from launcher.backends.docker.backend import DockerRun, DockerTasks
from launcher.loader.load import load_spec
from tests.support.gpus import fake_gpus


def test_a_containers_env_is_its_plans_plus_the_mounts_and_the_attempts(tmp_path, monkeypatch):
    fake_gpus(monkeypatch, tmp_path, 2)
    path = tmp_path / "cluster.yaml"
    path.write_text("name: c\nbackend: docker\nentrypoint: python -m worker\nstrategy: multi_worker_mirrored\n"
                    "tasks: {worker: 2}\ndevices: {gpus_per_task: 1}\n")
    loaded = load_spec(path)
    plan = plan_for(loaded.spec)
    tasks = DockerTasks(DockerRun(loaded))
    for task in plan.tasks:
        env = tasks._environment(task, {"TFCLUSTER_RESTART_COUNT": "3"})
        planned = task.env_dict
        assert {k: env[k] for k in planned} == planned  # every variable of the plan's, as it is
        assert set(env) - set(planned) == {"TFCLUSTER_RUN_DIR", "TFCLUSTER_STATE_DIR", "TFCLUSTER_RESTART_COUNT"}
        assert planned["CUDA_VISIBLE_DEVICES"] == "0" and planned["TF_NUM_INTRAOP_THREADS"]  # (numbered from 0 inside)
        assert "TFCLUSTER_THREADS" not in planned and "TFCLUSTER_GPUS" not in planned  # nothing left to complete
    assert [t.gpus.ids for t in plan.tasks] == [(0,), (1,)]  # the device requests: the engine host's own
