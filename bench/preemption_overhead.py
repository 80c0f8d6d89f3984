#!/usr/bin/env python3
"""Cost of zero-loss preemption in ``model.fit``: a 2-worker MWMS fit run through ``tfcluster up``,
with graceful preemption (the default: each step also all-reduces the workers' SIGTERM flags)
and with ``--no-graceful-preemption``, interleaved. Prints each trial's training throughput
(examples/s after the first step, from worker:0's ``tfcluster-result`` line) and the medians.

    python bench/preemption_overhead.py [--trials 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import ROOT, write_spec

RESULT = re.compile(r"\[worker:0\] tfcluster-result .*examples_per_sec=([0-9.]+)")
TIMEOUT = 600


def run(work: Path, graceful: bool, steps: int) -> float:
    entrypoint = f"python -m worker --epochs 1 --steps-per-epoch {steps}" + ("" if graceful else " --no-graceful-preemption")
    spec = write_spec(work, entrypoint, work / "tfds")
    # (--verbose: the tasks' records in its lines as they came, the result's among them)
    proc = subprocess.run([sys.executable, "-m", "launcher", "up", "--verbose", str(spec)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT)
    m = RESULT.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"tfcluster up exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args()
    rates: dict[bool, list[float]] = {True: [], False: []}
    name = {True: "graceful preemption", False: "--no-graceful-preemption"}
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-") as tmp:
        work = Path(tmp)
        print("warm-up (builds the offline dataset) ...", flush=True)
        run(work, False, 5)
        for trial in range(1, args.trials + 1):
            for graceful in ((True, False) if trial % 2 else (False, True)):
                rates[graceful].append(run(work, graceful, args.steps))
                print(f"trial {trial}: {name[graceful]:24s} {rates[graceful][-1]:8.1f} examples/s", flush=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median: {name[True]} {on:.1f}, {name[False]} {off:.1f} examples/s; ratio {on / off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
