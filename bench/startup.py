#!/usr/bin/env python3
"""Launcher overhead: time from ``tfcluster up`` to every worker's first training step, versus
the same worker processes started by hand with the same TF_CONFIGs (from ``tfcluster plan
--json``), interleaved in one run. Prints each trial and the median ratio (target <= 1.10).

    python bench/startup.py [--trials 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import ROOT, write_spec

FIRST_STEP = re.compile(r"tfcluster-first_step .*time=([0-9.]+)")
TIMEOUT = 300


def spec_for(work: Path, workers: int, tfds_dir: Path) -> Path:
    return write_spec(work, "python -m worker --epochs 1 --steps-per-epoch 5", tfds_dir, tasks=f"{{worker: {workers}}}")


def first_steps(streams, expected: int, started: float) -> float:
    """Seconds from ``started`` until ``expected`` first-step lines were seen on ``streams``."""
    times: list[float] = []
    lock = threading.Lock()

    def read(stream):
        for line in stream:
            m = FIRST_STEP.search(line)
            if m:
                with lock:
                    times.append(float(m.group(1)))

    threads = [threading.Thread(target=read, args=(s,), daemon=True) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    if len(times) != expected:
        raise SystemExit(f"saw {len(times)} of {expected} first steps; see the output above")
    return max(times) - started


def via_tfcluster(spec: Path, workers: int) -> float:
    started = time.time()
    # (--verbose: the tasks' records in its lines as they came, the first steps' among them)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", "--verbose", str(spec)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        took = first_steps([proc.stdout], workers, started)
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise SystemExit(f"tfcluster up exited {proc.returncode}")
    return took


def by_hand(spec: Path, workers: int) -> float:
    plan = json.loads(subprocess.run([sys.executable, "-m", "launcher", "plan", str(spec), "--json", "--show-secrets"],
                                     cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout)
    started = time.time()
    procs = [
        subprocess.Popen(task["command"], cwd=spec.parent, env={**os.environ, **task["env"]}, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        for task in plan["tasks"]
    ]
    try:
        took = first_steps([p.stdout for p in procs], workers, started)
        for p in procs:
            p.wait(timeout=TIMEOUT)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-") as tmp:
        work = Path(tmp)
        tfds_dir = work / "tfds"
        spec = spec_for(work, args.workers, tfds_dir)
        print(f"warm-up (builds the offline dataset, fills the page cache) with {args.workers} workers ...", flush=True)
        by_hand(spec, args.workers)
        launched, manual = [], []
        for trial in range(1, args.trials + 1):
            # Alternate which goes first so drift on a shared machine hits both alike.
            order = [("tfcluster", via_tfcluster), ("by hand", by_hand)]
            if trial % 2 == 0:
                order.reverse()
            for name, fn in order:
                spec = spec_for(work, args.workers, tfds_dir)
                took = fn(spec, args.workers)
                (launched if name == "tfcluster" else manual).append(took)
                print(f"trial {trial}: {name:9s} {took:6.2f} s to every worker's first step", flush=True)
        med_l, med_m = statistics.median(launched), statistics.median(manual)
        print(f"median: tfcluster {med_l:.2f} s, by hand {med_m:.2f} s, ratio {med_l / med_m:.3f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
