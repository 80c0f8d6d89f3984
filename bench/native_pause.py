#!/usr/bin/env python3
"""How long a native dump holds a TensorFlow worker stopped, and how long TensorFlow lets one be
stopped: the two figures behind launcher/backends/pyspy.py's ``PAUSE_LIMIT``.

Two MultiWorkerMirroredStrategy processes of a small step (TF_CONFIG of their own, no launcher),
each running ``--steps`` steps (0.05 s apart, so both end at the same step):

* pause: once both step, ``py-spy dump --native`` of each at once, ``--dumps`` times; each
  worker's time in state ``t`` (stopped by the tracer), sampled every 10 ms from /proc;
* tolerance: for each of ``--stops`` seconds, a new pair, the coordination leader (worker 0)
  SIGSTOPped that long at a random moment after both stepped, then SIGCONT: did both exit 0,
  and TensorFlow's words where not ("heartbeat timeout").

    python bench/native_pause.py [--dumps 3] [--stops 4,6,8,10] [--trials 2]

BENCHMARKS.md, "What a native dump holds a task"."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import load_average
from tests.support.ports import free_base

STEP = """
import json, os, sys, time
import tensorflow as tf
s = tf.distribute.MultiWorkerMirroredStrategy()
@tf.function
def step():
    return s.reduce("SUM", s.run(lambda: tf.constant(1.0)), axis=None)
for i in range(int(sys.argv[1])):
    step()
    if i == 0:
        print("stepped", flush=True)
    time.sleep(0.05)
"""


def pair(steps: int, tmp: str) -> list[subprocess.Popen]:
    port = free_base(2)
    procs = []
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": json.dumps(
            {"cluster": {"worker": [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]}, "task": {"type": "worker", "index": i}})}
        log = open(os.path.join(tmp, f"w{i}.log"), "w+")
        procs.append(subprocess.Popen([sys.executable, "-c", STEP, str(steps)], env=env, stdout=log, stderr=subprocess.STDOUT))
        procs[-1].log = log
    end = time.monotonic() + 120
    while not all("stepped" in open(p.log.name).read() for p in procs):
        if time.monotonic() > end or any(p.poll() is not None for p in procs):
            raise SystemExit("the workers did not step within 120 s: " + open(procs[0].log.name).read()[-2000:])
        time.sleep(0.1)
    return procs


def state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def held(pid: int, spy: subprocess.Popen) -> float:
    """Seconds ``pid`` spent in state t while ``spy`` ran (10 ms samples)."""
    total = 0.0
    while spy.poll() is None:
        if state(pid) == "t":
            total += 0.01
        time.sleep(0.01)
    return total


def pauses(dumps: int, tmp: str) -> list[float]:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    procs = pair(100000, tmp)
    out = []
    try:
        for _ in range(dumps):
            spies = [subprocess.Popen([spy, "dump", "--native", "--pid", str(p.pid)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for p in procs]
            got = [0.0, 0.0]
            threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, held(procs[i].pid, spies[i])))
                       for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out += got
            time.sleep(2)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return out


def stopped(seconds: float, tmp: str) -> str:
    procs = pair(int((seconds + 25) / 0.05), tmp)
    time.sleep(random.uniform(0, 5))
    os.kill(procs[0].pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(procs[0].pid, signal.SIGCONT)
    codes = [p.wait(timeout=seconds + 120) for p in procs]
    words = {m for p in procs for m in re.findall(r"Task \S+ heartbeat timeout", open(p.log.name).read())}
    return f"exits {codes}" + (f": {', '.join(sorted(words))}" if words else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", type=int, default=3)
    ap.add_argument("--stops", default="4,6,8,10")
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tfcluster-native-pause-")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}", flush=True)
    got = pauses(args.dumps, tmp)
    print(f"py-spy dump --native of both workers at once, {args.dumps} times: held stopped "
          + ", ".join(f"{s:.2f}" for s in got) + f" s (most {max(got):.2f})", flush=True)
    for seconds in [float(s) for s in args.stops.split(",")]:
        for trial in range(args.trials):
            print(f"leader stopped {seconds:g} s, trial {trial + 1}: {stopped(seconds, tmp)}", flush=True)
    print(f"load average now {load_average()}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
