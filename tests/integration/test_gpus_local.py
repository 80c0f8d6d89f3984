"""GPU placement on the local backend, end to end: `tfcluster up` with the fake nvidia-smi
(tests/support/nvidia-smi) on PATH; each task records the environment it was started with. One
test runs the real reference worker with a memory limit and collective settings (TensorFlow on
CPU ignores GPU options, but the worker must accept and apply them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import tfcluster
from tests.support.gpus import fake_bin
from tests.support.specs import local_spec, script_spec
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = pytest.mark.integration

RECORD = """\
    import json, os, pathlib
    task = os.environ["TFCLUSTER_TASK"]
    keep = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH", "TFCLUSTER_GPU_MEMORY",
            "TFCLUSTER_GPUS", "TFCLUSTER_COLLECTIVE", "TFCLUSTER_COLLECTIVE_TIMEOUT")
    pathlib.Path("env-" + task.replace(":", "-") + ".json").write_text(
        json.dumps({k: os.environ.get(k) for k in keep}))
"""


def gpu_env(tmp_path: Path, gpus: int) -> dict[str, str]:
    return {"PATH": f"{fake_bin(tmp_path / 'fakebin')}{os.pathsep}{os.environ['PATH']}",
            "FAKE_NVIDIA_SMI_GPUS": str(gpus)}


def recorded(tmp_path: Path) -> dict[str, dict]:
    return {p.stem[4:].replace("-", ":"): json.loads(p.read_text()) for p in sorted(tmp_path.glob("env-*.json"))}


def up(path: Path, tmp_path: Path, gpus: int):
    return tfcluster("up", path, env=gpu_env(tmp_path, gpus), timeout=300)


def test_workers_on_four_gpus_get_disjoint_ones(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 4}", "devices: {gpus_per_task: 1}\n")
    proc = up(path, tmp_path, 4)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = recorded(tmp_path)
    assert {k: v["CUDA_VISIBLE_DEVICES"] for k, v in got.items()} == {
        "worker:0": "0", "worker:1": "1", "worker:2": "2", "worker:3": "3"}
    assert all(v["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and v["TF_FORCE_GPU_ALLOW_GROWTH"] is None
               and v["TFCLUSTER_GPUS"] is None for v in got.values())
    assert "gpus: gpus_per_task 1, gpu_memory auto; localhost: 4 GPUs (NVIDIA A100-SXM4-40GB) for 4 GPU tasks" \
        in proc.stderr


def test_pss_ps_and_chief_see_no_gpu_workers_share_with_growth(tmp_path):
    # As under ParameterServerStrategy: the chief (the coordinator) ends the run; the workers and
    # the ps serve until they are stopped. A worker that ended first would be restarted alone.
    # The chief ends once every task has recorded its env (at most 60 s).
    wait = ("    import time\n"
            "    end = time.monotonic() + (60 if task == 'chief:0' else 300)\n"
            "    while time.monotonic() < end and (task != 'chief:0' or len(list(pathlib.Path('.').glob('env-*.json'))) < 5):\n"
            "        time.sleep(0.1)\n")
    path = script_spec(tmp_path, RECORD + wait, "{chief: 1, ps: 1, worker: 3}", strategy="parameter_server")
    proc = up(path, tmp_path, 2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = recorded(tmp_path)
    assert {k: (v["CUDA_VISIBLE_DEVICES"], v["TF_FORCE_GPU_ALLOW_GROWTH"]) for k, v in got.items()} == {
        "chief:0": ("-1", None), "ps:0": ("-1", None),
        "worker:0": ("0", "true"), "worker:1": ("1", None), "worker:2": ("0", "true")}  # GPU 0 shared


def test_plan_shows_each_tasks_gpus_and_refusals_are_one_line(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 2}", "devices: {gpus_per_task: 1}\n")
    env = gpu_env(tmp_path, 2)
    plan = tfcluster("plan", path, env=env)
    assert plan.returncode == 0, plan.stderr
    rows = [line.split()[:4] for line in plan.stdout.splitlines() if line.startswith("  worker:") and "localhost" in line]
    assert rows == [["worker:0", "localhost", "gpu", "0"], ["worker:1", "localhost", "gpu", "1"]]
    env["FAKE_NVIDIA_SMI_GPUS"] = "1"
    proc = tfcluster("up", path, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    # (a plan-time spec error: FILE:LINE of the key that asks for the GPUs, as every spec error)
    assert proc.stderr.startswith(f"tfcluster: error: {path}:"), proc.stderr
    assert ": localhost has 1 GPU; 2 tasks x gpus_per_task 1 need 2; " in proc.stderr, proc.stderr
    assert not recorded(tmp_path) and not (tmp_path / "runs").exists()  # nothing started
    nccl = script_spec(tmp_path, RECORD, "{worker: 3}", "collective: {implementation: nccl}\n")
    env["FAKE_NVIDIA_SMI_GPUS"] = "2"
    proc = tfcluster("up", nccl, env=env)
    assert proc.returncode == 2 and "NCCL refuses two ranks on one GPU" in proc.stderr, proc.stderr


def test_no_nvidia_gpu_runs_on_cpu_said_once(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 2}", "devices: {gpu_memory: growth}\n")
    proc = up(path, tmp_path, 0)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("no GPU found") == 1
    assert "no GPU found (localhost: nvidia-smi -L lists none): its 2 GPU tasks run on CPU" in proc.stderr
    assert {v["CUDA_VISIBLE_DEVICES"] for v in recorded(tmp_path).values()} == {None}


def uuid(i: int) -> str:
    """The stand-in nvidia-smi's UUID of GPU ``i``."""
    return "GPU-%08x-1d2e-4f3a-9b8c-%012x" % (0x2b3c1f9e + i, 0x5d6e7f809a1b + i)


def test_equal_shares_on_eight_gpus_and_nccl_for_owned_gpus(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 3}")
    proc = up(path, tmp_path, 8)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = recorded(tmp_path)
    assert {k: v["CUDA_VISIBLE_DEVICES"] for k, v in got.items()} == {
        "worker:0": "0,1", "worker:1": "2,3", "worker:2": "4,5"}  # equal: 6,7 idle, not 3/3/2
    assert {v["TFCLUSTER_COLLECTIVE"] for v in got.values()} == {"nccl"}
    assert "6,7 idle: each worker gets the same count" in proc.stderr
    assert "collective nccl (auto: each worker owns its GPUs)" in proc.stderr


def test_the_launchers_uuid_limit_is_kept(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 2}")
    env = {**gpu_env(tmp_path, 4), "CUDA_VISIBLE_DEVICES": f"{uuid(1)},{uuid(3)}"}
    proc = tfcluster("up", path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {k: v["CUDA_VISIBLE_DEVICES"] for k, v in recorded(tmp_path).items()} == {
        "worker:0": uuid(1), "worker:1": uuid(3)}  # never GPU 0 or 2, which the user hid


def test_mig_devices_one_per_task_by_their_uuid(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 2}")
    env = {**gpu_env(tmp_path, 1), "FAKE_NVIDIA_SMI_MIG": "0:2"}
    listing = tfcluster("plan", path, env=env)
    assert listing.returncode == 0, listing.stderr
    proc = tfcluster("up", path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = {k: v["CUDA_VISIBLE_DEVICES"] for k, v in recorded(tmp_path).items()}
    assert sorted(got) == ["worker:0", "worker:1"] and all(v.startswith("MIG-") for v in got.values())
    assert len(set(got.values())) == 2, got  # two MIG devices of GPU 0, not GPU 0 twice
    assert "localhost: 2 MIG devices (NVIDIA A100-SXM4-40GB MIG 1g.5gb)" in listing.stdout


def test_gpus_asked_for_and_nvidia_smi_failing_is_one_line_with_its_words(tmp_path):
    path = script_spec(tmp_path, RECORD, "{worker: 2}", "devices: {gpus_per_task: 1}\n")
    proc = tfcluster("up", path, env={**gpu_env(tmp_path, 2), "FAKE_NVIDIA_SMI_FAIL": "1"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"tfcluster: error: {path}:"), proc.stderr  # (FILE:LINE of the key)
    assert (": localhost: GPUs asked for (devices.gpus_per_task 1) but nvidia-smi -L failed (exit 9): NVIDIA-SMI "
            "has failed because it couldn't communicate with the NVIDIA driver.") in proc.stderr, proc.stderr
    assert "install or load the NVIDIA driver" in proc.stderr and not recorded(tmp_path)
    auto = script_spec(tmp_path, RECORD, "{worker: 2}")
    proc = tfcluster("up", auto, env={**gpu_env(tmp_path, 2), "FAKE_NVIDIA_SMI_FAIL": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("no GPU found (localhost: nvidia-smi -L failed (exit 9): NVIDIA-SMI has failed") == 1


@pytest.mark.tf
def test_reference_worker_applies_memory_limit_and_collective(tmp_path):
    """TensorFlow on CPU has no GPU to limit, but the worker reads the settings, says what it
    applied, and builds MultiWorkerMirroredStrategy with the CommunicationOptions."""
    path = local_spec(tmp_path, "python -m worker --epochs 1 --steps-per-epoch 2 --batch-size 8", name="g",
                      tasks="{worker: 1}", env={"TF_CPP_MIN_LOG_LEVEL": '"2"'}, watchdog="{startup_timeout: 240}",
                      extra="devices: {gpu_memory: 1024, gpus_per_task: 1, cpu_fallback: true}\n"
                            "collective: {implementation: ring, timeout: 45}\n")
    proc = up(path, tmp_path, 1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "[worker:0] worker: worker:0 gpus: 0 visible (CUDA_VISIBLE_DEVICES=0), memory limit 1024 MiB" in out, out[-3000:]
    assert "[worker:0] worker: collective implementation=ring timeout=45s" in out
    assert "TensorFlow sees no GPU: training on CPU (devices.cpu_fallback)" in out


@pytest.mark.tf
def test_reference_worker_given_gpus_its_tensorflow_cannot_see_fails_fast_in_one_line(tmp_path):
    """The fake nvidia-smi lists a GPU, the plan gives it to the task, TensorFlow (no GPU here) sees
    none: the worker stops at once (exit 2, a setting: not restarted) naming the likely cause."""
    path = local_spec(tmp_path, "python -m worker --epochs 1 --steps-per-epoch 2 --batch-size 8", name="g",
                      tasks="{worker: 1}", env={"TF_CPP_MIN_LOG_LEVEL": '"2"'}, watchdog="{startup_timeout: 240}",
                      extra="devices: {gpus_per_task: 1}\n")
    proc = up(path, tmp_path, 1)
    assert proc.returncode != 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines()
             if line.startswith("[worker:0] worker: error: given GPUs (CUDA_VISIBLE_DEVICES=0) but TensorFlow sees none: ")]
    assert len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert ("CPU-only build" in lines[0] or "CUDA/cuDNN mismatch" in lines[0]) and "devices.cpu_fallback: true" in lines[0]
    assert "not retried: a usage error (exit 2)" in proc.stderr  # fails fast: no restart


def test_each_tasks_gpu_memory_in_status_events_and_the_final_peak(tmp_path):
    """The fake nvidia-smi lists the compute processes the tasks write into its file (their own
    pids, as the real one lists the processes holding GPU memory); the supervisor samples it every
    5 s and matches them to the tasks' process groups."""
    apps = tmp_path / "apps.txt"
    path = script_spec(tmp_path, """\
        import os, pathlib, time
        mib = 300 if os.environ["TFCLUSTER_TASK"] == "worker:0" else 700
        with open(os.environ["FAKE_NVIDIA_SMI_APPS_FILE"], "a") as fh:
            fh.write(f"{os.getpid()}:{mib}\\n")
        time.sleep(12)
    """, "{worker: 2}", "devices: {gpus_per_task: 1}\n")
    proc = tfcluster("up", path, env={**gpu_env(tmp_path, 2), "FAKE_NVIDIA_SMI_APPS_FILE": str(apps)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "  gpu memory peak: worker:0 300 MiB, worker:1 700 MiB" in proc.stderr, proc.stderr[-2000:]
    run = (tmp_path / "runs" / "t" / "latest").resolve()
    samples = [e for e in read_records(run) if isinstance(e, ev.GpuUsage)]
    assert samples and samples[-1]["tasks"] == {"worker:0": [300, 37], "worker:1": [700, 0]}, samples
    status = tfcluster("status", path)  # without the fake GPUs: looking at a run needs none
    header = next((line for line in status.stdout.splitlines() if line.lstrip().startswith("task ")), status.stdout + status.stderr)
    assert "gpu (peak)" in header, status.stdout
    assert "300M 37% (300M)" in status.stdout and "700M 0% (700M)" in status.stdout, status.stdout
