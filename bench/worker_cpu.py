#!/usr/bin/env python3
"""What a change to the reference worker costs or saves, as the user waits for it: the whole
``tfcluster up`` of the 2-worker MWMS demo (local backend, ``python -m worker``), from the command
to its exit, this checkout against another revision of the project, alternating (baseline, this,
baseline, this ...), medians of ``--trials``, each trial printed with the load average.

    python bench/worker_cpu.py --baseline REV [--trials 5] [--steps 20]

REV is checked out into a temporary git worktree; both trees run with the same Python, the same
offline dataset and fresh ports. Figures per trial: the wall time of ``up`` and the CPU time of
everything it ran (the launcher, its wrappers and both workers: ``RUSAGE_CHILDREN`` of this
process, which reaps ``up``, which reaps its tasks).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, load_average, write_spec


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_up(tree: Path, work: Path, tfds_dir: Path, steps: int) -> tuple[float, float]:
    """(wall s, CPU s) of one ``tfcluster up`` of the demo run from ``tree``."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = write_spec(work, f"python -m worker --epochs 1 --steps-per-epoch {steps}", tfds_dir)
    spec.write_text(spec.read_text().replace(f"PYTHONPATH: {ROOT}", f"PYTHONPATH: {tree}"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "launcher", "up", "--plain", str(spec)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"up from {tree} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, _children_cpu() - cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the git revision to compare this checkout with")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tfcs-worker-cpu-"))
    baseline = tmp / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline],
                   check=True, capture_output=True)
    try:
        rev = subprocess.run(["git", "-C", str(baseline), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        trees = {f"baseline {rev}": baseline, "this checkout": ROOT}
        tfds_dir = tmp / "tfds"
        one_up(ROOT, tmp / "warm", tfds_dir, 2)  # builds the offline dataset once, warms the page cache
        got: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
        print(f"2-worker MWMS demo, {args.steps} steps; {os.cpu_count()} CPUs; load average {load_average()}", flush=True)
        for trial in range(1, args.trials + 1):
            for name, tree in trees.items():
                wall, cpu = one_up(tree, tmp / "run", tfds_dir, args.steps)
                got[name].append((wall, cpu))
                print(f"  trial {trial}, {name}: up {wall:.2f} s, cpu {cpu:.2f} s; load average {load_average()}",
                      flush=True)
        print(f"{'tree':<24} {'up (median)':>12} {'cpu (median)':>13}")
        for name, series in got.items():
            print(f"{name:<24} {statistics.median(w for w, _ in series):>11.2f}s "
                  f"{statistics.median(c for _, c in series):>12.2f}s")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
