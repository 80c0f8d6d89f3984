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
        "TFCLUSTER_GPUS", "TFCLUSTER_COLLECTIVE")
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


def with_gpus(tmp_path: Path, counts: dict[str, int], extra: dict[str, str] | None = None) -> dict[str, dict]:
    """host_keys giving each lab host an interpreter that sees ``counts[host]`` fake GPUs, in the
    host's environment ``extra[host]`` (``VAR=value ...``: its own CUDA_VISIBLE_DEVICES, MIG)."""
    fakebin = fake_bin(tmp_path / "fakebin")
    keys = {}
    for host, n in counts.items():
        wrapper = tmp_path / f"python-{host}"
        more = (extra or {}).get(host, "")
        wrapper.write_text(f'#!/bin/sh\nPATH="{fakebin}:$PATH" FAKE_NVIDIA_SMI_GPUS={n} {more} exec "{PY}" "$@"\n')
        wrapper.chmod(0o755)
        keys[host] = {"python": str(wrapper)}
    return keys


def recorded(tmp_path: Path) -> dict[str, dict]:
    return {p.stem[4:].replace("-", ":"): json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("env-*.json"))}


def run(make_spec, tmp_path: Path, counts: dict[str, int], host_env: dict[str, str] | None = None, **spec):
    (tmp_path / "out").mkdir(parents=True, exist_ok=True)
    (tmp_path / "record.py").write_text(RECORD)
    tasks = spec.get("tasks", {"worker": spec.get("workers", 2)})
    path = make_spec([PY, str(tmp_path / "record.py"), str(tmp_path / "out"), str(sum(tasks.values()))],
                     hosts=list(counts),
                     host_keys=with_gpus(tmp_path, counts, host_env), **spec)
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


def test_shared_gpu_gets_growth_and_gpu_less_hosts_run_on_cpu(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 1, "h2": 1}, workers=4, devices={"gpu_memory": "auto"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = recorded(tmp_path)
    on = {(v["host"], v["CUDA_VISIBLE_DEVICES"], v["TF_FORCE_GPU_ALLOW_GROWTH"]) for v in got.values()}
    assert on == {("h1", "0", "true"), ("h2", "0", "true")}, got  # one GPU, two tasks on each host: shared
    assert {v["TFCLUSTER_COLLECTIVE"] for v in got.values()} == {None}  # shared GPUs: RING, TensorFlow's AUTO
    proc = run(make_spec, tmp_path / "cpu", {"h1": 0, "h3": 0}, workers=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (both hosts found none: one line for them, launcher/notices.py's fold_hosts)
    assert proc.stderr.count("no GPU found on 2 hosts (h1, h3): nvidia-smi -L lists none there; their GPU tasks "
                             "run on CPU") == 1, proc.stderr[-3000:]
    assert "no GPU found (" not in proc.stderr


def test_hosts_with_unequal_gpus_give_every_worker_the_smallest_hosts_share(lab, make_spec, tmp_path):
    """h1 has 4 GPUs, h2 2: one worker on each would get 4 and 2; TensorFlow needs the same count
    on every worker, so the smallest host decides, as where the plan knows every host: both get 2
    (h1's other two idle), said in one line. A host with none while another has some is refused
    in one line naming them, before anything starts."""
    proc = run(make_spec, tmp_path, {"h1": 4, "h2": 2}, workers=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("gpus: the workers would get unequal GPU shares (h1 4 GPUs, h2 2 GPUs each); the smallest host decides: "
            "every worker gets 2 GPUs (TensorFlow needs the same count on every worker), the others idle on h1; "
            "set devices.gpus_per_task to choose") in proc.stderr, proc.stderr[-3000:]
    got = {v["host"]: v["CUDA_VISIBLE_DEVICES"] for v in recorded(tmp_path).values()}
    assert got == {"h1": "0,1", "h2": "0,1"}, got
    assert sorted(shown_gpus(tmp_path).values()) == ["gpus 0,1 nccl", "gpus 0,1 nccl"]
    proc = run(make_spec, tmp_path / "none", {"h1": 1, "h3": 0}, workers=2)
    assert proc.returncode == 1 and "(h1 1 GPU, h3 0 GPUs each)" in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tfcluster: error:")]
    assert lines[0] == ("tfcluster: error: gpus: the workers would get unequal GPU shares (h1 1 GPU, h3 0 GPUs each); "
                        "TensorFlow needs the same count on every worker (ParameterServerStrategy: Mismatched number "
                        "of GPUs per worker); give every GPU host a GPU, or run on CPU (devices.gpus: 0)"), proc.stderr
    assert not recorded(tmp_path / "none") and task_processes(lab) == {h.name: [] for h in lab.hosts}


def uuid(i: int) -> str:
    """The stand-in nvidia-smi's UUID of GPU ``i``."""
    return "GPU-%08x-1d2e-4f3a-9b8c-%012x" % (0x2b3c1f9e + i, 0x5d6e7f809a1b + i)


def shown_gpus(tmp_path: Path) -> dict[str, str]:
    """Each task's gpus as ``tfcluster status`` prints them (its table, checked against --json)."""
    spec = str(tmp_path / "cluster.yaml")
    as_json = {t["key"]: t["gpus"] for t in json.loads(tfcluster("status", spec, "--json").stdout)["tasks"]}
    table = tfcluster("status", spec).stdout
    for key, gpus in as_json.items():
        assert any(line.split()[:1] == [key] and f"  {gpus}  " in line + "  " for line in table.splitlines()), table
    return as_json


def test_the_hosts_uuid_limit_equal_shares_and_nccl(lab, make_spec, tmp_path):
    """h1 has 4 GPUs but its environment limits them to GPUs 2 and 3 by UUID; h2 has 2. Each
    host's worker gets 2, h1's named by UUID within its limit; both own their GPUs: NCCL."""
    proc = run(make_spec, tmp_path, {"h1": 4, "h2": 2}, {"h1": f"CUDA_VISIBLE_DEVICES={uuid(2)},{uuid(3)}"}, workers=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {v["host"]: (v["CUDA_VISIBLE_DEVICES"], v["TFCLUSTER_COLLECTIVE"]) for v in recorded(tmp_path).values()}
    assert got == {"h1": (f"{uuid(2)},{uuid(3)}", "nccl"), "h2": ("0,1", "nccl")}, got
    assert "collective auto: nccl where each worker owns its GPUs, else ring (decided on each host at start)" \
        in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("collective nccl (auto: each worker owns its GPUs)") == 1  # said at start, once
    # status shows what each host's wrapper gave and chose: h1's GPUs by UUID (each cut to 12
    # characters, as plan shows UUIDs), and the all-reduce each wrapper decided on its host.
    hosts = {t["key"]: t["host"] for t in json.loads(tfcluster("status", str(tmp_path / "cluster.yaml"), "--json").stdout)["tasks"]}
    assert shown_gpus(tmp_path) == {k: {"h1": f"gpus {uuid(2)[:12]},{uuid(3)[:12]} nccl", "h2": "gpus 0,1 nccl"}[h]
                                    for k, h in hosts.items()}, hosts


def test_mig_devices_one_per_task_on_each_host(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 1, "h2": 1}, {"h1": "FAKE_NVIDIA_SMI_MIG=0:2", "h2": "FAKE_NVIDIA_SMI_MIG=0:2"},
               workers=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = recorded(tmp_path)
    for host in ("h1", "h2"):
        mine = [v["CUDA_VISIBLE_DEVICES"] for v in got.values() if v["host"] == host]
        assert len(mine) == 2 and len(set(mine)) == 2 and all(m.startswith("MIG-") and "," not in m for m in mine), got
    assert {v["TFCLUSTER_COLLECTIVE"] for v in got.values()} == {None}  # MIG devices: RING
    assert "h1: 2 MIG devices (NVIDIA A100-SXM4-40GB MIG 1g.5gb)" in proc.stderr, proc.stderr[-3000:]
    assert "collective ring (auto: workers share GPUs or use MIG devices" in proc.stderr
    # status shows each task's MIG device (its UUID cut to 12 characters, as plan shows a MIG
    # device), not its parent GPU's index 0, and the all-reduce: RING on MIG devices.
    want = {k: "gpu %s ring" % v["CUDA_VISIBLE_DEVICES"][:12] for k, v in got.items()}
    assert all(w.startswith("gpu MIG-") for w in want.values()) and shown_gpus(tmp_path) == want, got


def test_a_hosts_failing_nvidia_smi_is_one_line_in_its_words(lab, make_spec, tmp_path):
    proc = run(make_spec, tmp_path, {"h1": 2}, {"h1": "FAKE_NVIDIA_SMI_FAIL=1"}, workers=2,
               devices={"gpus_per_task": 1})
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tfcluster: error:")]
    assert lines[0].startswith("tfcluster: error: h1: GPUs asked for (gpus_per_task 1) but nvidia-smi -L failed "
                               "(exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                               "driver."), proc.stderr[-3000:]
    assert not recorded(tmp_path)


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
    # The run record holds the plan placed by GPUs, and each task's GPUs as its wrapper gave them
    # (each worker owns its GPU: the wrappers chose NCCL).
    status = json.loads(tfcluster("status", str(tmp_path / "cluster.yaml"), "--json").stdout)
    assert sorted((t["host"], t["gpus"]) for t in status["tasks"]) == [
        ("h1", "gpu 0 nccl"), ("h2", "gpu 0 nccl"), ("h2", "gpu 1 nccl"), ("h2", "gpu 2 nccl")], status["tasks"]
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
