"""Containers' GPUs (launcher/plan/containergpus.py, shared by backend: docker and tfcluster compose):
every container on the engine's one host, its GPUs as host indices for the device request and
0.. inside, /dev/shm, the runtime refusal's one line, docker.shm_size's validation. Pure; the
real engine reads the HostConfig back in tests/integration/docker/test_docker_gpus.py."""

from __future__ import annotations

import pytest

from launcher.plan import containergpus
from launcher.loader.load import load_spec, parse_spec
from tests.support.errors import spec_errors
from tests.support.gpus import containers

GPUS4 = tuple((i, "NVIDIA A100-SXM4-40GB", f"GPU-{i}") for i in range(4))


def _made(tmp_path, body: str, engine=GPUS4, shm=None):
    path = tmp_path / "cluster.yaml"
    path.write_text("name: c\nbackend: docker\nentrypoint: python -m worker\n" + body)
    return containers(load_spec(path).spec, engine, shm)


def test_auto_divides_the_engine_hosts_gpus_among_all_containers(tmp_path):
    made, problems = _made(tmp_path, "strategy: multi_worker_mirrored\ntasks: {worker: 2}\n")
    assert problems == []
    assert [made[k].device_ids for k in ("worker:0", "worker:1")] == [(0, 1), (2, 3)]
    assert made["worker:1"].env["CUDA_VISIBLE_DEVICES"] == "0,1"  # inside: its two, from 0
    assert made["worker:1"].shm_size == "1g"
    assert made["worker:1"].device_requests() == [{"Driver": "", "Count": 0, "DeviceIDs": ["2", "3"],
                                                   "Capabilities": [["gpu"]], "Options": {}}]
    assert "TFCLUSTER_GPUS" not in made["worker:1"].env and "CUDA_DEVICE_ORDER" not in made["worker:1"].env


def test_ps_and_coordinator_get_nothing_and_the_spec_env_wins(tmp_path):
    made, _ = _made(tmp_path, "strategy: parameter_server\ntasks: {chief: 1, worker: 1, ps: 1}\n"
                    "devices: {gpu_memory: 1024}\n")
    for key in ("chief:0", "ps:0"):
        assert made[key].device_ids == () and made[key].device_requests() == [] and made[key].shm_size is None
        assert made[key].env["CUDA_VISIBLE_DEVICES"] == "-1"
    assert made["worker:0"].device_ids == (0, 1, 2, 3) and made["worker:0"].env["TFCLUSTER_GPU_MEMORY"] == "1024"
    made, _ = _made(tmp_path, "strategy: multi_worker_mirrored\ntasks: {worker: 2}\n"
                    "env: {CUDA_VISIBLE_DEVICES: '3'}\n")
    assert all(c.device_ids == () and c.env["CUDA_VISIBLE_DEVICES"] == "3" for c in made.values())


def test_no_gpu_on_the_engine_host_runs_auto_on_cpu_and_refuses_counts(tmp_path):
    made, problems = _made(tmp_path, "strategy: multi_worker_mirrored\ntasks: {worker: 2}\n", engine=())
    assert problems == [] and all(c.device_ids == () for c in made.values())
    _, problems = _made(tmp_path, "strategy: multi_worker_mirrored\ntasks: {worker: 2}\n"
                        "devices: {gpus_per_task: 3}\n")
    assert len(problems) == 1 and problems[0].startswith(
        "the Docker engine's host has 4 GPUs; 2 tasks x gpus_per_task 3 need 6"), problems


def test_runtime_refusal_is_one_line_only_for_the_device_driver_error():
    line = containergpus.runtime_problem("unix:///x.sock", 'could not select device driver "" with capabilities: [[gpu]]')
    assert line.startswith("docker: the Docker engine at unix:///x.sock has no GPU runtime (could not select")
    assert "NVIDIA Container Toolkit" in line and "\n" not in line
    assert containergpus.runtime_problem("unix:///x.sock", "No such image: foo") is None


@pytest.mark.parametrize("value,ok", [("'1g'", "1g"), ("512M", "512m"), ("1073741824", "1073741824"),
                                      ("0", None), ("'1 GB'", None), ("'-1g'", None), ("true", None)])
def test_shm_size_option(value, ok):
    text = f"name: c\nstrategy: multi_worker_mirrored\nbackend: docker\nentrypoint: python -m worker\ntasks: {{worker: 1}}\ndocker: {{shm_size: {value}}}\n"
    if ok is None:
        errors = spec_errors(text)
        assert len(errors) == 1 and "6: docker.shm_size" in errors[0] and "e.g. 1g, 512m" in errors[0], errors
    else:
        assert parse_spec(text, "c.yaml").docker.shm_size == ok


def test_plan_shows_each_containers_gpus_from_the_engine_host_where_they_hold(tmp_path, monkeypatch):
    """This machine (the engine's host) has 2 fake GPUs: the plan gives each worker container its
    own, as the preflight's device requests will (the same arithmetic); with 1 GPU for 2
    gpus_per_task-1 workers the plan leaves them to the preflight, which refuses in its line."""
    from launcher.app.up import plan_for
    from launcher.ui.plantext import render_plan
    from tests.support.gpus import fake_gpus

    fake_gpus(monkeypatch, tmp_path, 2)
    path = tmp_path / "cluster.yaml"
    path.write_text("name: c\nbackend: docker\nentrypoint: python -m worker\nstrategy: parameter_server\n"
                    "tasks: {chief: 1, worker: 2, ps: 1}\ndevices: {gpus_per_task: 1}\n")
    spec = load_spec(path).spec
    plan = plan_for(spec)
    assert {t.key: t.gpus.describe() for t in plan.tasks} == {
        "chief:0": "cpu", "worker:0": "gpu 0", "worker:1": "gpu 1", "ps:0": "cpu"}
    made, _ = containers(spec, GPUS4[:2])
    assert {k: c.device_ids for k, c in made.items()} == {"chief:0": (), "worker:0": (0,), "worker:1": (1,), "ps:0": ()}
    text = render_plan(plan)
    assert "  worker:1  worker-1  gpu 1" in text, text
    assert ("gpus: gpus_per_task 1, gpu_memory auto; the Docker engine's host: 2 GPUs (NVIDIA A100-SXM4-40GB) for "
            "2 GPU tasks") in text, text
    assert plan_for(spec, gpus=False).task("worker:1").gpus.describe() == "1 gpu (at start)"  # status, down...
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "1")
    assert plan_for(spec).task("worker:1").gpus.describe() == "1 gpu (at start)"  # no SpecError: preflight's line
