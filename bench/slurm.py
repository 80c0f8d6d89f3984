#!/usr/bin/env python3
"""``backend: slurm`` figures on a real Slurm 22.05 cluster built on this machine (munged,
slurmctld, one slurmd per network namespace: tests/labs/slurm.py). Needs root
and tests/setup/slurm.sh.

* start-up: ``tfcluster up`` until both workers of a 2-worker MWMS run printed their first
  training step, against a hand-written sbatch script whose srun steps start the same two
  workers (same nodes, same TF_CONFIG addresses, same command), interleaved (target <= 1.2x);
* recovery: SIGKILL of worker:1's process on its node mid-epoch, death -> first training step
  after restore: tfcluster's group restart as new steps inside the same allocation, against a
  fresh submission (scancel, then sbatch of the same script on the same state dir).

    sudo python3 bench/slurm.py [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT

from tests.labs.slurm import PARTITION, SlurmLab, have_prereqs  # noqa: E402

FIRST = re.compile(r"tfcluster-first_step .*time=([0-9.]+)")
TIMEOUT = 300
PORT = 23456
STARTUP_ARGS = "--epochs 1 --steps-per-epoch 5"
RECOVERY_ARGS = "--epochs 2 --steps-per-epoch 40 --step-delay 0.05 --progress-every 1 --save-freq 10"
KILL_STEP = 47
KILLED_AT = re.compile(rf"tfcluster-step .*\bglobal_step={KILL_STEP}\b")

HAND_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --partition={partition} --time=10 --output={output}
# What a user writes by hand: expand the nodes, read their addresses, one srun step per worker.
nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
addrs=()
for n in "${{nodes[@]}}"; do
    addrs+=($(scontrol show node "$n" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p'))
done
cluster='"worker":["'${{addrs[0]}}':{port}","'${{addrs[1]}}':{port}"]'
export TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1 TFCLUSTER_STRATEGY=multi_worker_mirrored
export TFCLUSTER_STATE_DIR={state}
for i in 0 1; do
    TF_CONFIG='{{"cluster":{{'$cluster'}},"task":{{"type":"worker","index":'$i'}}}}' \\
        srun --nodes=1 --ntasks=1 --nodelist="${{nodes[$i]}}" --overlap --chdir={root} {python} -m worker {args} &
done
wait
"""


def env(lab: SlurmLab, tfds: Path) -> dict:
    return {**os.environ, **lab.env(), "PYTHONPATH": str(ROOT), "TFDS_DATA_DIR": str(tfds),
            "TF_CPP_MIN_LOG_LEVEL": "2"}


def write_spec(work: Path, tfds: Path, args: str, restarts: int = 0) -> Path:
    spec = work / "cluster.yaml"
    spec.write_text(
        f"name: bench\nstrategy: multi_worker_mirrored\nbackend: slurm\n"
        f"entrypoint: {sys.executable} -m worker {args}\n"
        f"tasks: {{worker: 2}}\nports: {{base: {PORT}}}\nworkdir: {ROOT}\n"
        f"env: {{PYTHONPATH: {ROOT}, TFDS_DATA_DIR: {tfds}, TF_CPP_MIN_LOG_LEVEL: '2'}}\n"
        f"restart: {{max_restarts: {restarts}}}\n"
        f"slurm: {{partition: {PARTITION}, time: '10', python: {sys.executable}, queue_timeout: 60}}\n")
    return spec


def write_script(work: Path, args: str, name: str) -> tuple[Path, Path]:
    output = work / f"{name}-%j.out"
    script = work / f"{name}.sh"
    script.write_text(HAND_SCRIPT.format(partition=PARTITION, output=output, port=PORT, state=work / "hand-state",
                                         root=ROOT, python=sys.executable, args=args))
    return script, output


def wait_text(path_fn, predicate, timeout: float = TIMEOUT) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        path = path_fn()
        text = path.read_text(errors="replace") if path is not None and path.exists() else ""
        if predicate(text):
            return text
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting on {path_fn()}")


def firsts(text: str) -> list[float]:
    return [float(t) for t in FIRST.findall(text)]


def sbatch(lab: SlurmLab, script: Path, e: dict) -> str:
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30, env=e)
    if proc.returncode != 0:
        raise SystemExit(f"sbatch failed: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def wait_gone(lab: SlurmLab, job: str) -> None:
    end = time.monotonic() + 60
    while job in lab.jobs() and time.monotonic() < end:
        time.sleep(0.1)


# ---------------------------------------------------------------- start-up

def startup_tfcluster(lab: SlurmLab, work: Path, tfds: Path) -> float:
    spec = write_spec(work, tfds, STARTUP_ARGS)
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "launcher", "up", str(spec)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT, env=env(lab, tfds))
    if proc.returncode != 0:
        raise SystemExit(f"tfcluster up failed: {proc.stderr[-2000:]}")
    times = firsts(proc.stdout)
    assert len(times) == 2, proc.stdout[-2000:]
    return max(times) - started


def startup_by_hand(lab: SlurmLab, work: Path, tfds: Path) -> float:
    script, output = write_script(work, STARTUP_ARGS, "hand")
    e = env(lab, tfds)
    started = time.time()
    job = sbatch(lab, script, e)
    out = Path(str(output).replace("%j", job))
    text = wait_text(lambda: out, lambda t: len(firsts(t)) == 2)
    wait_gone(lab, job)
    return max(firsts(text)) - started


# ---------------------------------------------------------------- recovery

def worker_pid(lab: SlurmLab, node: str) -> int:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        pids = [p for p in lab.node_pids(node) if "-m worker" in _cmdline(p)]
        if pids:
            return pids[0]
        time.sleep(0.05)
    raise SystemExit(f"no worker process on {node}")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def recovery_tfcluster(lab: SlurmLab, work: Path, tfds: Path) -> float:
    spec = write_spec(work, tfds, RECOVERY_ARGS, restarts=1)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(lab, tfds))
    try:
        latest = work / "runs" / "bench" / "latest"
        wait_text(lambda: latest / "logs" / "worker-1.progress" if latest.exists() else None,
                  lambda t: KILLED_AT.search(t) is not None)
        os.kill(worker_pid(lab, "n2"), signal.SIGKILL)
        died = time.time()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise SystemExit(f"tfcluster up failed ({proc.returncode}); see {work}/runs")
    run = latest.resolve()
    after = [firsts(t.split("tfcluster-start")[2])[0]
             for t in ((run / "logs" / f"worker-{i}.progress").read_text() for i in (0, 1))]
    return max(after) - died


def recovery_resubmit(lab: SlurmLab, work: Path, tfds: Path) -> float:
    script, output = write_script(work, RECOVERY_ARGS, "resubmit")
    e = env(lab, tfds)
    job = sbatch(lab, script, e)
    out1 = Path(str(output).replace("%j", job))
    wait_text(lambda: out1, lambda t: KILLED_AT.search(t) is not None)
    os.kill(worker_pid(lab, "n2"), signal.SIGKILL)
    died = time.time()
    subprocess.run(["scancel", job], timeout=30, env=e)
    job2 = sbatch(lab, script, e)
    out2 = Path(str(output).replace("%j", job2))
    text = wait_text(lambda: out2, lambda t: len(firsts(t)) == 2)
    first = max(firsts(text)) - died
    wait_text(lambda: out2, lambda t: "tfcluster-result" in t)
    wait_gone(lab, job2)
    return first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    reason = have_prereqs()
    if reason:
        raise SystemExit(f"bench/slurm.py: {reason}")
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-slurm-") as tmp:
        tmp_path = Path(tmp)
        os.chmod(tmp_path, 0o755)
        lab = SlurmLab(tmp_path / "lab", count=3)
        try:
            lab.start()
            tfds = tmp_path / "tfds"
            warm = tmp_path / "warmup"
            warm.mkdir()
            startup_tfcluster(lab, warm, tfds)  # builds the offline dataset once; not counted
            ups, hands = [], []
            for i in range(args.trials):
                for name, fn, acc in (("tfcluster", startup_tfcluster, ups), ("by hand", startup_by_hand, hands)):
                    work = tmp_path / f"start-{name.split()[0]}-{i}"
                    work.mkdir()
                    acc.append(fn(lab, work, tfds))
                    print(f"start-up trial {i + 1} {name}: {acc[-1]:.2f} s", flush=True)
            print(f"median start-up: tfcluster {statistics.median(ups):.2f} s, sbatch+srun by hand "
                  f"{statistics.median(hands):.2f} s, ratio {statistics.median(ups) / statistics.median(hands):.2f} "
                  "(target <= 1.2)", flush=True)
            rec, sub = [], []
            for i in range(max(1, args.trials - 1)):
                for name, fn, acc in (("restart in allocation", recovery_tfcluster, rec),
                                      ("fresh submission", recovery_resubmit, sub)):
                    work = tmp_path / f"rec-{name.split()[0]}-{i}"
                    work.mkdir()
                    acc.append(fn(lab, work, tfds))
                    print(f"recovery trial {i + 1} {name}: death -> first step after restore {acc[-1]:.2f} s",
                          flush=True)
            print(f"median death -> first step after restore: tfcluster restart inside the allocation "
                  f"{statistics.median(rec):.2f} s, scancel + fresh sbatch {statistics.median(sub):.2f} s")
        finally:
            lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
