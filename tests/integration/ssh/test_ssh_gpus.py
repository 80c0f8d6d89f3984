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

from tests.support.cli import start_tfcluster, tfcluster
from tests.support.gpus import fake_bin
from tests.support.waits import wait_for

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
    # status shows what each task's wrapper gave it on its host (the plan knew only the request).
    status = json.loads(tfcluster("status", str(tmp_path / "cluster.yaml"), "--json").stdout)
    shown = {t["key"]: t["gpus"] for t in status["tasks"]}
    assert shown == {k: "cpu" if v["CUDA_VISIBLE_DEVICES"] == "-1" else "gpu " + v["CUDA_VISIBLE_DEVICES"]
                     for k, v in got.items()}, (shown, got)


def test_shared_gpu_gets_growth_and_a_gpu_less_host_runs_on_cpu(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 1, "h3": 0}, workers=4, devices={"gpu_memory": "auto"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = recorded(tmp_path)
    on = {k: (v["CUDA_VISIBLE_DEVICES"], v["TF_FORCE_GPU_ALLOW_GROWTH"]) for k, v in got.items()}
    assert on == {"worker:0": ("0", "true"), "worker:1": ("0", "true"),  # h1: one GPU, two tasks
                  "worker:2": (None, None), "worker:3": (None, None)}, on  # h3: none, CPU
    assert proc.stderr.count("h3 has no NVIDIA GPU (nvidia-smi -L lists none): its 2 GPU tasks run on CPU") == 1


def test_too_few_gpus_on_a_host_is_one_line_before_anything_starts(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 2, "h2": 1}, workers=4, devices={"gpus_per_task": 1})
    assert proc.returncode == 1, proc.stderr[-3000:]  # EXIT_FAILED: refused in the preflight
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
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]  # EXIT_FAILED: exit 2 is permanent, not retried
    assert "taskwrap: " in proc.stderr + proc.stdout and "has 1 GPU; its GPU tasks need 2; the task was not started" \
        in proc.stderr + proc.stdout, (proc.stdout + proc.stderr)[-3000:]
    assert {k: v["CUDA_VISIBLE_DEVICES"] for k, v in recorded(tmp_path).items()} in ({}, {"worker:0": "0"})


def test_a_host_with_few_gpus_takes_fewer_tasks_when_slots_are_not_given(lab, make_spec, tmp_path):
    """h1 has 1 GPU, h2 3: the round-robin would give each two gpus_per_task-1 workers; the
    preflight's GPU counts place one on h1 and three on h2 instead, said in one line."""
    proc = run(make_spec, tmp_path, {"h1": 1, "h2": 3}, workers=4, devices={"gpus_per_task": 1})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("gpus: round-robin would over-fill h1 1 GPU for 2 GPU-count tasks; placed by each host's GPUs instead "
            "(GPU tasks: h1 1, h2 3); set hosts[].slots to place them yourself") in proc.stderr, proc.stderr[-3000:]
    by_host: dict[str, list[str]] = {}
    for env in recorded(tmp_path).values():
        by_host.setdefault(env["host"], []).append(env["CUDA_VISIBLE_DEVICES"])
    assert sorted(len(v) for v in by_host.values()) == [1, 3], by_host
    assert sorted(sorted(v) for v in by_host.values()) == [["0"], ["0", "1", "2"]], by_host  # disjoint on each
    assert "h2: 3 GPUs (NVIDIA A100-SXM4-40GB) for worker:" in proc.stderr
    # The run record holds the plan placed by GPUs, and each task's GPUs as its wrapper gave them.
    status = json.loads(tfcluster("status", str(tmp_path / "cluster.yaml"), "--json").stdout)
    assert sorted((t["host"], t["gpus"]) for t in status["tasks"]) == [
        ("h1", "gpu 0"), ("h2", "gpu 0"), ("h2", "gpu 1"), ("h2", "gpu 2")], status["tasks"]
    dry = tfcluster("up", str(tmp_path / "cluster.yaml"), "--dry-run", timeout=120)  # shows the plan placed by GPUs
    assert dry.returncode == 0, dry.stderr[-2000:]
    hosts = sorted(line.split()[1] for line in dry.stdout.splitlines() if line.startswith("  worker:") and "TASK" not in line)
    assert hosts == ["h1", "h2", "h2", "h2"], dry.stdout


HOLD = """\
import os, pathlib, sys, time
# As the real nvidia-smi lists the processes holding GPU memory: the fake lists this task's pid.
mib = {"worker:0": 300, "worker:1": 700}[os.environ["TFCLUSTER_TASK"]]
with open(os.environ["FAKE_NVIDIA_SMI_APPS_FILE"], "a") as fh:
    fh.write("%d:%d\\n" % (os.getpid(), mib))
deadline = time.time() + 120  # until the test has seen the figures in status
while not pathlib.Path(sys.argv[1]).exists() and time.time() < deadline:
    time.sleep(0.1)
"""


def test_each_tasks_gpu_figures_reach_status_and_the_final_report(lab, make_spec, tmp_path):
    """The task wrapper on each host samples the fake nvidia-smi for its own process group and
    sends the figures up its channel: status --json shows each task's memory and utilisation,
    the final report its peak, and the task logs do not carry the wrapper's lines."""
    apps, release = tmp_path / "apps.txt", tmp_path / "release"
    (tmp_path / "hold.py").write_text(HOLD)
    path = make_spec([PY, str(tmp_path / "hold.py"), str(release)], hosts=["h1", "h2"],
                     host_keys=with_gpus(tmp_path, {"h1": 2, "h2": 1}), devices={"gpus_per_task": 1},
                     env={"FAKE_NVIDIA_SMI_APPS_FILE": str(apps)})
    proc = start_tfcluster("up", path)
    try:
        def figures():
            st = tfcluster("status", path, "--json")
            tasks = {t["key"]: (t["host"], t["gpu_mib"], t["gpu_util"]) for t in json.loads(st.stdout).get("tasks", [])} \
                if st.stdout.strip().startswith("{") else {}
            return tasks if all(v[1] for v in tasks.values()) and len(tasks) == 2 else None

        seen = wait_for(figures, 90, what="both tasks' GPU figures in status --json", proc=proc)
        assert seen == {"worker:0": ("h1", 300, 37), "worker:1": ("h2", 700, 37)}, seen
        release.touch()
        out, _ = proc.communicate(timeout=120)
    finally:
        release.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "  gpu memory peak: worker:0 300 MiB, worker:1 700 MiB" in out, out[-3000:]
    logs = (tmp_path / "runs" / "sshtest" / "latest").resolve() / "logs"
    assert logs.is_dir() and not any("GPU figures" in p.read_text() for p in logs.iterdir()), out[-2000:]
