"""GPUs on ``backend: docker`` against the real private engine, which (like most engines without
the NVIDIA Container Toolkit) has no GPU runtime. The fake nvidia-smi (tests/support/gpus.py)
makes this machine -- the engine's host -- look like it has 2 GPUs. What the backend asks the
engine for is read back through the engine's API (``HostConfig.DeviceRequests``, ``ShmSize``)
from containers it created and did not start; asking this engine for GPUs at start is refused in
one line before any task runs; a run whose tasks use no GPU still runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.plan import containergpus as docker_gpus
from launcher.backends.docker.backend import DockerBackend
from launcher.plan.build import build_plan
from launcher.loader.load import load_spec
from tests.labs import docker as eng
from tests.support.cli import tfcluster
from tests.support.docker_helpers import leftovers
from tests.support.gpus import fake_gpus
from tests.support.prereq import require_tool
from tests.support.specs import spec_file

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(600)]

REPO = eng.REPO
MIB = 1024 * 1024
# Docker's /dev/shm when HostConfig.ShmSize is not given.
ENGINE_DEFAULT_SHM = 64 * MIB


def _spec(tmp_path: Path, engine_url: str, name: str, strategy: str, tasks: dict, entrypoint: list,
          devices: dict = None, docker_extra: dict = None) -> Path:
    doc = {"name": name, "strategy": strategy, "backend": "docker", "entrypoint": entrypoint, "tasks": tasks,
           "watchdog": {"startup_timeout": 120, "stop_grace": 3},
           "docker": {"image": eng.WORKER_IMAGE, "engine": engine_url, **(docker_extra or {})}}
    if devices:
        doc["devices"] = devices
    return spec_file(tmp_path, json.dumps(doc))


def _up(spec: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return tfcluster("up", str(spec), timeout=timeout, cwd=REPO, env={"PYTHONPATH": str(REPO)})


def test_host_config_gives_each_gpu_task_its_gpus_and_shm_and_cpu_tasks_none(tmp_path, docker_engine,
                                                                               worker_image):
    spec = _spec(tmp_path, docker_engine.url, "dkgpuhc", "parameter_server", {"chief": 1, "worker": 2, "ps": 1},
                 ["python", "-c", "pass"], devices={"gpus_per_task": 1})
    loaded = load_spec(spec)
    plan = build_plan(loaded.spec, DockerBackend.place(loaded.spec))
    backend = DockerBackend(loaded)
    made, problems = docker_gpus.containers(loaded.spec, plan.tasks, ((0, "A100", "u0"), (1, "A100", "u1")), None)
    assert problems == []
    client = docker_engine.client()
    created = []
    try:
        seen = {}
        for task in plan.tasks:
            c = made[task.key]
            cid = client.api.create_container(
                worker_image, command=["true"], environment=c.env, host_config=backend.host_config(container=c),
                labels={"tfcluster.name": "dkgpuhc"})["Id"]
            created.append(cid)
            info = client.api.inspect_container(cid)
            env = dict(e.split("=", 1) for e in info["Config"]["Env"])
            seen[task.key] = (info["HostConfig"].get("DeviceRequests"), info["HostConfig"]["ShmSize"],
                              env.get("CUDA_VISIBLE_DEVICES"), env.get("TFCLUSTER_GPUS"))
    finally:
        for cid in created:
            client.api.remove_container(cid, force=True)
        client.close()
        backend.close()
    # Workers: their own GPU of the engine host each, numbered 0 inside, 1 GB /dev/shm.
    for key, gpu in (("worker:0", "0"), ("worker:1", "1")):
        requests, shm, cvd, marker = seen[key]
        assert requests == [{"Driver": "", "Count": 0, "DeviceIDs": [gpu], "Capabilities": [["gpu"]],
                             "Options": {}}], seen[key]
        assert shm == 1024 * MIB and cvd == "0" and marker is None, seen[key]
    # The ps and the parameter_server chief: no device request, Docker's /dev/shm, no GPU visible.
    for key in ("chief:0", "ps:0"):
        requests, shm, cvd, marker = seen[key]
        assert not requests and shm == ENGINE_DEFAULT_SHM and cvd == "-1" and marker is None, seen[key]


def test_shm_size_from_the_spec_applies_to_every_container(tmp_path, docker_engine, worker_image):
    spec = _spec(tmp_path, docker_engine.url, "dkgpushm", "multi_worker_mirrored", {"worker": 2},
                 ["python", "-c", "pass"], docker_extra={"shm_size": "2g"})
    loaded = load_spec(spec)
    plan = build_plan(loaded.spec, DockerBackend.place(loaded.spec))
    backend = DockerBackend(loaded)
    # auto with 2 workers on 1 GPU: both get GPU 0, shared, with memory growth.
    made, _ = docker_gpus.containers(loaded.spec, plan.tasks, ((0, "A100", "u0"),), loaded.spec.docker.shm_size)
    assert [made[k].device_ids for k in ("worker:0", "worker:1")] == [(0,), (0,)]
    assert all(made[k].env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for k in ("worker:0", "worker:1"))
    client = docker_engine.client()
    try:
        cid = client.api.create_container(worker_image, command=["true"],
                                          host_config=backend.host_config(container=made["worker:1"]))["Id"]
        try:
            assert client.api.inspect_container(cid)["HostConfig"]["ShmSize"] == 2048 * MIB
        finally:
            client.api.remove_container(cid, force=True)
    finally:
        client.close()
        backend.close()


def test_asking_an_engine_without_gpu_runtime_for_gpus_is_one_line_and_leaves_nothing(tmp_path, monkeypatch,
                                                                                         docker_engine, worker_image):
    fake_gpus(monkeypatch, tmp_path, 2)
    spec = _spec(tmp_path, docker_engine.url, "dkgpuno", "multi_worker_mirrored", {"worker": 2},
                 ["python", "-c", "print('RAN')"], devices={"gpus_per_task": 1})
    proc = _up(spec)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tfcluster: error:")]
    assert errors == [
        f"tfcluster: error: docker: the Docker engine at {docker_engine.url} has no GPU runtime (could not select "
        'device driver "" with capabilities: [[gpu]]); install the NVIDIA Container Toolkit on its host '
        "(nvidia-ctk runtime configure --runtime=docker, then restart dockerd), or run on CPU: devices.gpus: 0"
    ], proc.stderr
    assert "docker: the Docker engine's host has 2 GPUs; worker:0 gpu 0; worker:1 gpu 1" in proc.stderr
    assert "RAN" not in proc.stdout and "Traceback" not in proc.stderr
    assert leftovers(docker_engine, "dkgpuno")[0] == []


def test_too_few_engine_gpus_is_one_line_before_anything_is_created(tmp_path, monkeypatch, docker_engine,
                                                                    worker_image):
    fake_gpus(monkeypatch, tmp_path, 1)
    spec = _spec(tmp_path, docker_engine.url, "dkgpufew", "multi_worker_mirrored", {"worker": 2},
                 ["python", "-c", "pass"], devices={"gpus_per_task": 1})
    proc = _up(spec)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tfcluster: error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "tfcluster: error: docker: the Docker engine's host has 1 GPU; 2 tasks x gpus_per_task 1 need 2"), proc.stderr
    assert leftovers(docker_engine, "dkgpufew")[0] == []


def test_cpu_tasks_containers_run_on_a_gpu_host_without_gpu_runtime(tmp_path, monkeypatch, docker_engine,
                                                                    worker_image):
    fake_gpus(monkeypatch, tmp_path, 2)
    show = ("import os,shutil;print('SEEN', os.environ['TFCLUSTER_TASK'], os.environ.get('CUDA_VISIBLE_DEVICES'), "
            "shutil.disk_usage('/dev/shm').total // 1048576, flush=True)")
    spec = _spec(tmp_path, docker_engine.url, "dkgpucpu", "multi_worker_mirrored", {"worker": {"count": 2, "gpus": 0}},
                 ["python", "-c", show])
    proc = _up(spec)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = sorted(line.split("SEEN ", 1)[1] for line in proc.stdout.splitlines() if "SEEN " in line)
    assert seen == ["worker:0 -1 64", "worker:1 -1 64"], proc.stdout[-2000:]
    assert leftovers(docker_engine, "dkgpucpu")[0] == []


def test_compose_gpu_reservations_pass_docker_compose_config(tmp_path, monkeypatch):
    compose = require_tool("docker-compose", "docker-compose")
    fake_gpus(monkeypatch, tmp_path, 2)
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: cg\nstrategy: parameter_server\nbackend: docker\nentrypoint: python -m worker\n"
                    "tasks: {chief: 1, worker: 2, ps: 1}\ndevices: {gpus_per_task: 1}\n")
    out = tmp_path / "docker-compose.yml"
    made = tfcluster("compose", str(spec), "-o", str(out), cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert made.returncode == 0, made.stderr
    check = subprocess.run([compose, "-f", str(out), "config"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    import yaml

    services = yaml.safe_load(check.stdout)["services"]
    for name, gpu in (("worker-0", "0"), ("worker-1", "1")):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "device_ids": [gpu], "capabilities": ["gpu"]}, services[name]
        assert services[name]["shm_size"] == "1g"
    assert "deploy" not in services["ps-0"] and "deploy" not in services["chief-0"]
