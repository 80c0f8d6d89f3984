"""GPUs on ``backend: docker`` against the real private engine, which (like most engines without
the NVIDIA Container Toolkit) has no GPU runtime. The fake nvidia-smi (tests/support/gpus.py)
makes this machine -- the engine's host -- look like it has 2 GPUs. What the backend asks the
engine for is read back through the engine's API (``HostConfig.DeviceRequests``, ``ShmSize``)
from containers it created and did not start: indices, UUIDs within the launcher's UUID limit, one
MIG device per container by its MIG- UUID; asking this engine for GPUs at start is refused in one
line before any task runs; a run whose tasks use no GPU still runs. ``tfcluster compose``'s device
reservations are read back through ``docker-compose config`` the same way."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from launcher.backends.docker import containers as docker_containers
from launcher.backends.docker.backend import DockerBackend, DockerHosts, DockerRun
from launcher.errors import LaunchError
from launcher.plan.build import build_plan
from launcher.loader.load import load_spec
from tests.labs import docker as eng
from tests.support.cli import tfcluster
from tests.support.docker_helpers import leftovers
from tests.support.gpus import containers, fake_gpus
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
    backend = DockerRun(loaded)  # what both seams share: the client, each container's HostConfig
    made, problems = containers(loaded.spec, ((0, "A100", "u0"), (1, "A100", "u1")))
    assert problems == []
    client = docker_engine.client()
    created = []
    try:
        seen = {}
        for task in plan.tasks:
            c = made[task.key]
            cid = client.api.create_container(
                worker_image, command=["true"], environment=c.env,
                host_config=docker_containers.host_config(backend.client, None, c.container, False),
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
        backend.disconnect()
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


def uuid(i: int) -> str:
    """The stand-in nvidia-smi's UUID of GPU ``i`` (tests/support/nvidia-smi)."""
    return "GPU-%08x-1d2e-4f3a-9b8c-%012x" % (0x2b3c1f9e + i, 0x5d6e7f809a1b + i)


def mig_uuid(gpu: int, i: int) -> str:
    """Its UUID of MIG device ``i`` of GPU ``gpu`` (FAKE_NVIDIA_SMI_MIG)."""
    return "MIG-%08x-5e6f-5a7b-8c9d-%012x" % (0x7c1d2e3f + gpu * 16 + i, 0x1a2b3c4d5e6f + i)


def _created(tmp_path: Path, docker_engine, worker_image, name: str, workers: int) -> tuple[dict, str]:
    """The backend's own preflight GPU step on the engine's host (the stand-in nvidia-smi on PATH,
    the launcher's CUDA_VISIBLE_DEVICES as the test set it), then each task's container created
    (not started: this engine has no GPU runtime) as the backend makes it, and read back from the
    engine: task key -> (HostConfig.DeviceRequests, its env); and the preflight's error."""
    spec = _spec(tmp_path, docker_engine.url, name, "multi_worker_mirrored", {"worker": workers},
                 ["python", "-c", "pass"])
    loaded = load_spec(spec)
    plan = build_plan(loaded.spec, DockerBackend.place(loaded.spec))
    backend = DockerRun(loaded)  # what both seams share: the client, each container's HostConfig
    client = docker_engine.client()
    created, seen = [], {}
    try:
        # Its GPU runtime probe asks this engine for the first container's GPUs and is refused:
        # what each container gets is made before it (the backend's own arithmetic, no stand-in).
        with pytest.raises(LaunchError) as refused:
            DockerHosts(backend).probe(plan)
        for task in plan.tasks:  # (the plan holds each container's env as it runs)
            cid = client.api.create_container(worker_image, command=["true"], environment=task.env_dict,
                                              host_config=backend.host_config(task),
                                              labels={"tfcluster.name": name})["Id"]
            created.append(cid)
            info = client.api.inspect_container(cid)
            seen[task.key] = (info["HostConfig"].get("DeviceRequests"),
                              dict(e.split("=", 1) for e in info["Config"]["Env"]))
    finally:
        for cid in created:
            client.api.remove_container(cid, force=True)
        client.close()
        backend.disconnect()
    assert leftovers(docker_engine, name)[0] == []  # the probe's container is gone too
    return seen, str(refused.value)


def _units(seen: dict) -> dict[str, list[str]]:
    """Task key -> the DeviceIDs of its container's one GPU request; the request's form checked."""
    out = {}
    for key, (requests, env) in seen.items():
        (req,) = requests
        assert req["Capabilities"] == [["gpu"]] and req["Count"] == 0 and req["Driver"] == "", requests
        out[key] = req["DeviceIDs"]
        # Inside the container its GPUs are numbered from 0; no request is left to complete; the
        # GPUs are the device request's (the worker image, on Debian, sets no NVIDIA_VISIBLE_DEVICES
        # either: the runtime would take that for every GPU).
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(len(req["DeviceIDs"]))), env
        assert "TFCLUSTER_GPUS" not in env and "NVIDIA_VISIBLE_DEVICES" not in env, env
    return out


def test_a_uuid_limit_gives_each_container_its_gpus_by_uuid_within_it(tmp_path, monkeypatch, docker_engine,
                                                                      worker_image):
    """The launcher's CUDA_VISIBLE_DEVICES names GPUs 3 and 1 of the engine host's 4 by UUID: the
    two workers get one each, in the limit's order, named by UUID in the device request (never a
    GPU the user hid); each owns its GPU, so collective auto is NCCL."""
    fake_gpus(monkeypatch, tmp_path, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid(3)},{uuid(1)}")
    seen, refused = _created(tmp_path, docker_engine, worker_image, "dkgpuuuid", 2)
    assert "has no GPU runtime" in refused, refused
    assert _units(seen) == {"worker:0": [uuid(3)], "worker:1": [uuid(1)]}, seen
    assert {k: env.get("TFCLUSTER_COLLECTIVE") for k, (_, env) in seen.items()} == {"worker:0": "nccl",
                                                                                     "worker:1": "nccl"}


def test_mig_devices_are_given_one_per_container_by_their_uuid(tmp_path, monkeypatch, docker_engine, worker_image):
    """The engine host's 2 GPUs are in MIG mode, 2 devices each: 4 workers get one MIG device each,
    disjoint, by its MIG- UUID (CUDA shows a process one MIG device); MIG devices have no
    peer-to-peer, so collective auto stays RING (nothing set: TensorFlow's AUTO)."""
    fake_gpus(monkeypatch, tmp_path, 2)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MIG", "0:2,1:2")
    seen, refused = _created(tmp_path, docker_engine, worker_image, "dkgpumig", 4)
    assert "has no GPU runtime" in refused, refused
    units = _units(seen)
    assert sorted(u for ids in units.values() for u in ids) == sorted(mig_uuid(g, d) for g in (0, 1) for d in (0, 1))
    assert all(len(ids) == 1 for ids in units.values()), units
    assert all("TFCLUSTER_COLLECTIVE" not in env for _, env in seen.values()), seen


def test_shm_size_from_the_spec_applies_to_every_container(tmp_path, docker_engine, worker_image):
    spec = _spec(tmp_path, docker_engine.url, "dkgpushm", "multi_worker_mirrored", {"worker": 2},
                 ["python", "-c", "pass"], docker_extra={"shm_size": "2g"})
    loaded = load_spec(spec)
    plan = build_plan(loaded.spec, DockerBackend.place(loaded.spec))
    backend = DockerRun(loaded)  # what both seams share: the client, each container's HostConfig
    # auto with 2 workers on 1 GPU: both get GPU 0, shared, with memory growth.
    made, _ = containers(loaded.spec, ((0, "A100", "u0"),), loaded.spec.docker.shm_size)
    assert [made[k].device_ids for k in ("worker:0", "worker:1")] == [(0,), (0,)]
    assert all(made[k].env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for k in ("worker:0", "worker:1"))
    client = docker_engine.client()
    try:
        cid = client.api.create_container(worker_image, command=["true"],
                                          host_config=docker_containers.host_config(
                                              backend.client, None, made["worker:1"].container, False))["Id"]
        try:
            assert client.api.inspect_container(cid)["HostConfig"]["ShmSize"] == 2048 * MIB
        finally:
            client.api.remove_container(cid, force=True)
    finally:
        client.close()
        backend.disconnect()


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


def _compose_devices(tmp_path: Path, workers: int) -> dict[str, tuple[list[str], str]]:
    """``tfcluster compose`` of a multi_worker_mirrored spec here, read back through
    ``docker-compose config``: service -> (its reserved device_ids, its CUDA_VISIBLE_DEVICES)."""
    import yaml

    compose = require_tool("docker-compose", "docker-compose")
    tmp_path.mkdir(parents=True)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"name: cu\nstrategy: multi_worker_mirrored\nbackend: docker\nentrypoint: python -m worker\n"
                    f"tasks: {{worker: {workers}}}\n")
    out = tmp_path / "docker-compose.yml"
    made = tfcluster("compose", str(spec), "-o", str(out), cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert made.returncode == 0, made.stderr
    check = subprocess.run([compose, "-f", str(out), "config"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    got = {}
    for name, service in yaml.safe_load(check.stdout)["services"].items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"], service
        got[name] = (device["device_ids"], service["environment"]["CUDA_VISIBLE_DEVICES"])
    return got


def test_compose_keeps_a_uuid_limit_and_gives_mig_devices_by_uuid(tmp_path, monkeypatch):
    """``tfcluster compose`` divides this machine's GPUs as the docker backend does: within its
    CUDA_VISIBLE_DEVICES (by UUID where that names UUIDs), a MIG device by its MIG- UUID, one each."""
    fake_gpus(monkeypatch, tmp_path, 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid(3)},{uuid(1)}")
    assert _compose_devices(tmp_path / "limit", 2) == {"worker-0": ([uuid(3)], "0"), "worker-1": ([uuid(1)], "0")}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MIG", "0:2,1:2")
    got = _compose_devices(tmp_path / "mig", 4)
    assert sorted(ids[0] for ids, _ in got.values()) == sorted(mig_uuid(g, d) for g in (0, 1) for d in (0, 1)), got
    assert all(len(ids) == 1 and cvd == "0" for ids, cvd in got.values()), got


def test_each_container_runs_with_the_env_its_plan_shows(tmp_path, monkeypatch, docker_engine, worker_image):
    """What a container runs with is its task's env in the plan (`tfcluster plan --json`): the
    threads' budget of the engine's machine shared by every container, CUDA_VISIBLE_DEVICES; no
    marker left for the backend to complete."""
    fake_gpus(monkeypatch, tmp_path, 2)
    names = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
             "TFCLUSTER_THREADS", "TFCLUSTER_GPUS")
    # The ps and the workers are servers, stopped once the chief is done; one whose container
    # started later than the chief ended never printed (seen in CI). So each, having printed,
    # listens on its port as a server would, and the chief leaves once it has reached them all.
    show = (f"import json, os, socket, time\n"
            f"print('SEEN', os.environ['TFCLUSTER_TASK'], [os.environ.get(n) for n in {names!r}], flush=True)\n"
            "config = json.loads(os.environ['TF_CONFIG'])\n"
            "me = config['task']\n"
            "if me['type'] != 'chief':\n"
            "    port = int(config['cluster'][me['type']][me['index']].rsplit(':', 1)[1])\n"
            "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "    s.bind(('', port)); s.listen(); s.settimeout(120)\n"
            "    while True: s.accept()\n"
            "deadline = time.monotonic() + 120\n"
            "for kind, addresses in config['cluster'].items():\n"
            "    for address in addresses if kind != 'chief' else ():\n"
            "        host, port = address.rsplit(':', 1)\n"
            "        while True:\n"
            "            try:\n"
            "                socket.create_connection((host, int(port)), timeout=2).close(); break\n"
            "            except OSError:\n"
            "                if time.monotonic() > deadline: raise SystemExit('nothing listened at ' + address)\n"
            "                time.sleep(0.2)\n")
    spec = _spec(tmp_path, docker_engine.url, "dkenv", "parameter_server", {"chief": 1, "worker": 2, "ps": 1},
                 ["python", "-c", show], devices={"gpus": 0})
    planned = tfcluster("plan", str(spec), "--json", cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert planned.returncode == 0, planned.stderr
    want = {t["type"] + ":" + str(t["index"]): [t["env"].get(n) for n in names] for t in json.loads(planned.stdout)["tasks"]}
    assert all(v[0] is not None and v[4] is None and v[5] is None for v in want.values()), want  # (in the plan)
    proc = _up(spec)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = {}
    for line in proc.stdout.splitlines():
        if "SEEN " in line:
            key, values = line.split("SEEN ", 1)[1].split(" ", 1)
            seen[key] = json.loads(values.replace("'", '"').replace("None", "null"))
    assert seen == want, (seen, want)
    assert leftovers(docker_engine, "dkenv")[0] == []
