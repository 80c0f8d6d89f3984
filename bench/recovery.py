#!/usr/bin/env python3
"""Recovery figures for a 2-worker MWMS run on this machine:

* SIGKILL of worker:1 mid-epoch (Keras fit, BackupAndRestore every --save-freq steps):
  death -> whole group relaunched, death -> first training step after restore, steps redone;
* SIGTERM to worker:1 (graceful preemption, custom loop and fit): steps redone (target 0).

    python bench/recovery.py [--save-freq 10] [--trials 2] [--warm-standby]
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
import time
from pathlib import Path

from benchlib import ROOT, write_spec
from tests.support.processes import task_pid

TIMEOUT = 300
STEP = re.compile(r"tfcluster-step epoch=\d+ step=\d+ global_step=(\d+)")
START = re.compile(r"tfcluster-start epoch=\d+ step=\d+ global_step=(\d+) time=([0-9.]+)")
FIRST = re.compile(r"tfcluster-first_step .*time=([0-9.]+)")
PREEMPTED = re.compile(r"tfcluster-preempted .*\bglobal_step=(\d+)")


WARM = False


def spec_file(work: Path, entrypoint: str) -> Path:
    return write_spec(work, entrypoint, work / "tfds",
                      extra=f"restart: {{max_restarts: 1, warm_standby: {str(WARM).lower()}}}\n")


def trial(work: Path, entrypoint: str, sig: int, at_step: int) -> dict:
    spec = spec_file(work, entrypoint)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        latest = work / "runs" / "bench" / "latest"
        end = time.monotonic() + TIMEOUT
        log = None
        while time.monotonic() < end:
            if latest.exists():
                log = latest.resolve() / "logs" / "worker-1.log"
                text = log.read_text() if log.exists() else ""
                if f"global_step={at_step}\n" in text and (not WARM or "tfcluster-standby ready" in text):
                    break
            time.sleep(0.02)
        else:
            raise SystemExit("training never reached the kill step")
        run_dir = latest.resolve()
        os.kill(task_pid(run_dir.name, "worker:1"), sig)
        died = time.time()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}); see {run_dir}")
    events = [json.loads(l) for l in (run_dir / "events.jsonl").read_text().splitlines()]
    relaunched = max(e["time"] for e in events if e["event"] == "start" and e["attempt"] == 1)
    texts = [(run_dir / "logs" / f"worker-{i}.log").read_text() for i in (0, 1)]
    before, after = texts[1].split("tfcluster-start", 2)[1], texts[1].split("tfcluster-start", 2)[2]
    last_before = max(int(m) for m in STEP.findall("tfcluster-start" + before)) if STEP.findall(before) else 0
    preempted = PREEMPTED.findall(before)
    if preempted:
        last_before = max(last_before, int(preempted[0]))
    resumed = int(START.findall("tfcluster-start" + after)[0][0])
    first_after = max(float(FIRST.findall(t.split("tfcluster-start")[2])[0]) for t in texts)
    return {
        "relaunch": relaunched - died,
        "first_step": first_after - died,
        "redone": last_before - resumed,
        "killed_at": last_before,
        "resumed": resumed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save-freq", type=int, default=10)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--warm-standby", action="store_true", help="restart.warm_standby: true")
    args = ap.parse_args()
    global WARM
    WARM = args.warm_standby
    fit = (f"python -m worker --epochs 2 --steps-per-epoch 40 --step-delay 0.05 --progress-every 1 "
           f"--save-freq {args.save_freq}")
    custom = "python -m worker --loop custom --epochs 2 --steps-per-epoch 40 --step-delay 0.05 --progress-every 1"
    with tempfile.TemporaryDirectory(prefix="tfcluster-recovery-") as tmp:
        rows = []
        for i in range(args.trials):
            kill_step = 47 + 3 * i  # mid-epoch, between backups
            work = Path(tmp) / f"kill{i}"
            work.mkdir()
            r = trial(work, fit, 9, kill_step)
            rows.append(r)
            print(f"SIGKILL trial {i + 1}: killed after step {r['killed_at']}, resumed at {r['resumed']}: "
                  f"relaunch {r['relaunch']:.2f} s, first step after restore {r['first_step']:.2f} s, "
                  f"steps redone {r['redone']} (save_freq {args.save_freq})", flush=True)
        pre = []
        for loop, entrypoint in (("custom loop", custom), ("fit", fit)):
            for i in range(args.trials):
                work = Path(tmp) / f"term-{loop.split()[0]}{i}"
                work.mkdir()
                r = trial(work, entrypoint, 15, 21 + 5 * i)
                pre.append(r)
                print(f"SIGTERM trial {i + 1} ({loop}): preempted at step {r['killed_at']}, resumed at "
                      f"{r['resumed']}: steps redone {r['redone']}, first step after restore "
                      f"{r['first_step']:.2f} s", flush=True)
        med = lambda k, rs: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"median SIGKILL: relaunch {med('relaunch', rows):.2f} s (target <= 1), first step after restore "
              f"{med('first_step', rows):.2f} s (target <= 8), steps redone {max(r['redone'] for r in rows)} "
              f"(<= save_freq {args.save_freq})")
        print(f"median SIGTERM preemption: steps redone {max(r['redone'] for r in pre)} (target 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
