"""GPU placement over ssh on the lab's real sshd hosts: each host has its own fake nvidia-smi GPU
count (its interpreter, hosts[].python, is a wrapper that puts tests/support/nvidia-smi on PATH with
that count, for the preflight agent and the task wrapper alike). The preflight agent reports each
host's GPUs, the task wrapper makes each task's CUDA_VISIBLE_DEVICES from its place on its host, and
tasks record the environment they got."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import tfcluster
from tests.support.gpus import fake_bin

from .conftest import PY, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

RECORD = """\
import json, os, pathlib, socket, sys
task = os.environ["TFCLUSTER_TASK"]
keep = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH", "TFCLUSTER_GPU_MEMORY",
        "TFCLUSTER_GPUS")
out = {k: os.environ.get(k) for k in keep}
out["host"] = socket.gethostname()
pathlib.Path(sys.argv[1], "env-" + task.replace(":", "-") + ".json").write_text(json.dumps(out))
# The run ends when its chief (or worker 0) does: it waits until every task has written its env;
# parameter_server's servers never end by themselves (the launcher stops them).
import time
if os.environ["TFCLUSTER_STRATEGY"] == "parameter_server" and not task.startswith("chief"):
    time.sleep(300)
deadline = time.time() + 60
while len(list(pathlib.Path(sys.argv[1]).glob("env-*.json"))) < int(sys.argv[2]) and time.time() < deadline:
    time.sleep(0.1)
"""


def with_gpus(tmp_path: Path, counts: dict[str, int]) -> dict[str, dict]:
    """host_keys giving each lab host an interpreter that sees ``counts[host]`` fake GPUs."""
    fakebin = fake_bin(tmp_path / "fakebin")
    keys = {}
    for host, n in counts.items():
        wrapper = tmp_path / f"python-{host}"
        wrapper.write_text(f'#!/bin/sh\nPATH="{fakebin}:$PATH" FAKE_NVIDIA_SMI_GPUS={n} exec "{PY}" "$@"\n')
        wrapper.chmod(0o755)
        keys[host] = {"python": str(wrapper)}
    return keys


def recorded(tmp_path: Path) -> dict[str, dict]:
    return {p.stem[4:].replace("-", ":"): json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("env-*.json"))}


def run(make_spec, tmp_path: Path, counts: dict[str, int], **spec):
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "record.py").write_text(RECORD)
    tasks = spec.get("tasks", {"worker": spec.get("workers", 2)})
    path = make_spec([PY, str(tmp_path / "record.py"), str(tmp_path / "out"), str(sum(tasks.values()))],
                     hosts=list(counts),
                     host_keys=with_gpus(tmp_path, counts), **spec)
    return tfcluster("up", path, timeout=240)


def test_each_host_gives_its_tasks_disjoint_gpus_and_pss_roles_none(lab, make_spec, tmp_path):
    # One cursor round-robin over h1, h2 (chief, workers, ps): two workers on each host.
    proc = run(make_spec, tmp_path, {"h1": 2, "h2": 3}, workers=4, strategy="parameter_server",
               tasks={"chief": 1, "worker": 4, "ps": 1}, devices={"gpus_per_task": 1})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = recorded(tmp_path)
    by_host: dict[str, list[str]] = {}
    for key, env in got.items():
        if env["CUDA_VISIBLE_DEVICES"] != "-1":
            by_host.setdefault(env["host"], []).append(env["CUDA_VISIBLE_DEVICES"])
    assert {k: got[k]["CUDA_VISIBLE_DEVICES"] for k in ("chief:0", "ps:0")} == {"chief:0": "-1", "ps:0": "-1"}
    assert len(by_host) == 2 and all(sorted(ids) == ["0", "1"] for ids in by_host.values()), by_host  # disjoint
    assert all(v["TFCLUSTER_GPUS"] is None and v["TF_FORCE_GPU_ALLOW_GROWTH"] is None for v in got.values())
    assert re.search(r"h1: 2 GPUs \(NVIDIA A100-SXM4-40GB\) for worker:\d, worker:\d\n", proc.stderr), proc.stderr
    assert re.search(r"h2: 3 GPUs \(NVIDIA A100-SXM4-40GB\) for worker:\d, worker:\d\n", proc.stderr), proc.stderr


def test_shared_gpu_gets_growth_and_a_gpu_less_host_runs_on_cpu(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 1, "h3": 0}, workers=4, devices={"gpu_memory": "auto"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = recorded(tmp_path)
    on = {k: (v["CUDA_VISIBLE_DEVICES"], v["TF_FORCE_GPU_ALLOW_GROWTH"]) for k, v in got.items()}
    assert on == {"worker:0": ("0", "true"), "worker:2": ("0", "true"),  # h1: one GPU, two tasks
                  "worker:1": (None, None), "worker:3": (None, None)}, on  # h3: none, CPU
    assert proc.stderr.count("h3 has no NVIDIA GPU (nvidia-smi -L lists none): its 2 GPU tasks run on CPU") == 1


def test_too_few_gpus_on_a_host_is_one_line_before_anything_starts(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 2, "h2": 1}, workers=4, devices={"gpus_per_task": 1})
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tfcluster: error:")]
    assert lines[0] == ("tfcluster: error: h2 has 1 GPU; 2 tasks x gpus_per_task 1 need 2; put fewer GPU tasks on it "
                        "(tasks.<type>.hosts, hosts[].slots), lower the count, or set devices.gpus_per_task: auto "
                        "to share"), proc.stderr
    assert not any("h1 has" in line for line in lines)
    assert not recorded(tmp_path)
    assert task_processes(lab) == {h.name: [] for h in lab.hosts}


def test_the_wrapper_refuses_a_request_the_host_cannot_meet(lab, make_spec, tmp_path):
    """A host whose GPUs changed after the preflight (here: the task's own count) is refused by
    the task wrapper in one line, exit 2 (permanent), the task not started."""
    proc = run(make_spec, tmp_path, {"h1": 2}, workers=2, devices={"gpus_per_task": 1},
               env={"FAKE_NVIDIA_SMI_GPUS": "1"})  # the task wrapper sees the spec's env: 1 GPU
    assert proc.returncode != 0
    assert "taskwrap: " in proc.stderr + proc.stdout and "has 1 GPU; its GPU tasks need 2; the task was not started" \
        in proc.stderr + proc.stdout, (proc.stdout + proc.stderr)[-3000:]
    assert {k: v["CUDA_VISIBLE_DEVICES"] for k, v in recorded(tmp_path).items()} in ({}, {"worker:0": "0"})
