#!/usr/bin/env python3
"""How long the end of a run takes: 4 reference workers (MultiWorkerMirroredStrategy, local
processes, TF_CONFIG of their own, no launcher) train ``--epochs`` epochs of 40 steps to the end;
per worker, the seconds from its last epoch's record to its ``tfcluster-result`` (fit's return,
the final evaluation and the model's save) and from that to its exit. ``--tree``: the checkout
whose worker runs (default this one), for an A/B against another commit's.

    python bench/fit_end.py [--epochs 30] [--tree PATH] [--port 24520]

Before worker/data.py's pipelines ran without tf.data's autotuning thread, fit's return waited
for it (the training iterator's destructor) a time that grows with the run: BENCHMARKS.md,
"Soak under random faults"."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import ROOT, load_average

WORKERS = 4


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--tree", default=str(ROOT))
    ap.add_argument("--port", type=int, default=24520)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfcluster-fit-end-"))
    cluster = {"worker": [f"localhost:{args.port + i}" for i in range(WORKERS)]}
    procs, result, ended, epoch = [], {}, {}, {}

    def read(i: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            if line.startswith("tfcluster-epoch"):
                epoch[i] = time.time()
            elif line.startswith("tfcluster-result"):
                result[i] = time.time()
        p.wait()
        ended[i] = time.time()

    before = load_average()
    for i in range(WORKERS):
        env = {**os.environ, "PYTHONPATH": args.tree, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
               "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}
        p = subprocess.Popen([sys.executable, "-m", "worker", "--strategy", "multi_worker_mirrored",
                              "--epochs", str(args.epochs), "--steps-per-epoch", "40", "--step-delay", "0.05",
                              "--progress-every", "1", "--model-dir", str(work / "state")],
                             cwd=args.tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        procs.append(p)
        threading.Thread(target=read, args=(i, p), daemon=True).start()
    deadline = time.time() + 60 + 20 * args.epochs
    while len(ended) < WORKERS and time.time() < deadline:
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    codes = [p.wait() for p in procs]
    shutil.rmtree(work, ignore_errors=True)
    if codes != [0] * WORKERS or len(result) < WORKERS:
        print(f"the workers did not all finish: exit codes {codes} (98: a port of {args.port}.. taken: --port)")
        return 1
    fit_end = [round(result[i] - epoch[i], 2) for i in range(WORKERS)]
    exit_after = [round(ended[i] - result[i], 2) for i in range(WORKERS)]
    print(f"{args.tree}: {args.epochs} epochs; last epoch -> result (s) {fit_end}; result -> exit (s) {exit_after}; "
          f"load {before} -> {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
