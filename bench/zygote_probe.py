#!/usr/bin/env python3
"""What a fork server (a "zygote": one process per host that imports TensorFlow once and forks each
task's process from itself) would save against today's warm standbys (each its own process that
imports TensorFlow): peak PSS of the whole run, and whether TensorFlow trains at all in a child
forked after its import. An experiment for the choice between the two, not tfcluster's code.

Four ways to run the same 2-worker MultiWorkerMirroredStrategy Keras ``fit`` (localhost ports,
TF_CONFIG per worker, the same data), each with the peak of the sum of Pss
(/proc/PID/smaps_rollup) over every process it made, sampled every 0.1 s:

  cold      2 workers, each its own ``python``                    (restart.warm_standby: false)
  standby   2 workers + 2 standbys, each its own ``python``,      (today's default, once the
            the standbys having imported TensorFlow and waiting   standbys are ready)
  zsb       2 workers on their own + a zygote and 2 standbys      (a zygote for standbys only)
            forked from it, waiting
  zall      a zygote; the 2 workers and 2 standbys forked from it (every task of the host from it)

What the threads left by ``import tensorflow`` are decides whether a fork after it is safe: read
here with gdb on this machine (2026-11-28), the two besides the main thread were OpenBLAS's
``blas_thread_server`` (numpy's and scipy's copies), which re-create their pools in a child
(pthread_atfork), and none of TensorFlow's own: its pools start with its first op or strategy.

    python bench/zygote_probe.py [--trials 3] [--steps 600]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from benchlib import pss_of
from tests.support.ports import free_base

TRAIN = """\
import json, os, signal, sys, time
import numpy as np
import tensorflow as tf
def train(steps):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(256, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True))
    x = np.random.default_rng(0).normal(size=(steps * 32, 64)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)
    history = model.fit(data, epochs=1, verbose=0)
    print("trained loss %.4f" % history.history["loss"][-1], flush=True)
"""

# A process that has imported TensorFlow: a standby (waits on stdin), a worker (trains), or a
# zygote (forks those on request: one line on stdin per child, "standby" or "worker INDEX").
PROC = TRAIN + """
def child(line, forked=False):
    words = line.split()
    if words[0] == "worker":
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": PEERS}, "task": {"type": "worker", "index": int(words[1])}})
        train(STEPS)
        os._exit(0)
    if forked:  # a standby forked by the zygote: waits for its SIGTERM (the zygote's stdin is the zygote's)
        os.close(0)
        signal.pause()
    sys.stdin.read()  # a standby on its own: waits until its stdin closes
    os._exit(0)
PEERS, STEPS = json.loads(sys.argv[2]), int(sys.argv[3])
if sys.argv[1] == "zygote":
    import signal
    print("ready", flush=True)
    standbys, workers = [], []
    while len(standbys) + len(workers) < int(sys.argv[4]):
        line = sys.stdin.readline()
        pid = os.fork()
        if pid == 0:
            child(line, forked=True)
        (workers if line.startswith("worker") else standbys).append(pid)
        print("forked %d" % pid, flush=True)
    codes = [os.waitpid(pid, 0)[1] for pid in workers]
    sys.stdin.read()
    for pid in standbys:
        os.kill(pid, signal.SIGTERM)
    codes += [os.waitpid(pid, 0)[1] for pid in standbys]
    print("children %s" % codes, flush=True)
else:
    print("ready", flush=True)
    child(sys.argv[1].replace("-", " "))
"""


def descendants(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as fh:
                todo.extend(int(p) for p in fh.read().split())
        except OSError:
            pass
    return out


class Peak(threading.Thread):
    """The largest Pss sum over ``roots`` and their descendants while it runs."""

    def __init__(self, roots: list[int]) -> None:
        super().__init__(daemon=True)
        self.roots, self.peak, self.done = roots, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            pids = [p for r in self.roots for p in descendants(r)]
            self.peak = max(self.peak, pss_of(pids))


def spawn(*args: str) -> subprocess.Popen:
    # tf_keras (Keras 2) as tfcluster's worker uses: Keras 3's fit takes no MultiWorkerMirroredStrategy.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1", "TF_USE_LEGACY_KERAS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", PROC, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)
    return proc


def wait_line(proc: subprocess.Popen, prefix: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"a process ended before saying {prefix!r} (exit {proc.wait()})")
        if line.startswith(prefix):
            return line.strip()
    raise SystemExit(f"no {prefix!r} within {timeout} s")


def one(way: str, steps: int) -> tuple[int, list[str]]:
    """(peak Pss in bytes, the workers' result lines) of one run the ``way`` given."""
    base = free_base(2)
    peers = json.dumps([f"127.0.0.1:{base + i}" for i in range(2)])
    procs, results = [], []
    standbys: list[subprocess.Popen] = []
    zygote = None
    if way in ("standby",):
        standbys = [spawn("standby", peers, str(steps)) for _ in range(2)]
        for s in standbys:
            wait_line(s, "ready")
    if way in ("zsb", "zall"):
        zygote = spawn("zygote", peers, str(steps), "4" if way == "zall" else "2")
        wait_line(zygote, "ready")
        for _ in range(2):
            zygote.stdin.write("standby\n")
            zygote.stdin.flush()
            wait_line(zygote, "forked")
    roots = [p.pid for p in standbys] + ([zygote.pid] if zygote else [])
    peak = Peak(roots)
    peak.start()
    if way == "zall":
        for i in range(2):
            zygote.stdin.write(f"worker {i}\n")
            zygote.stdin.flush()
            wait_line(zygote, "forked")
    else:
        procs = [spawn(f"worker-{i}", peers, str(steps)) for i in range(2)]
        peak.roots = roots + [p.pid for p in procs]
    # Workers print "trained"; in zall their lines come through the zygote's stdout.
    sources = procs if procs else [zygote, zygote]
    for src in sources:
        results.append(wait_line(src, "trained", 600))
    peak.done.set()
    peak.join()
    for s in standbys:
        s.stdin.close()
        s.wait(30)
    if zygote is not None:
        if not zygote.stdin.closed:
            zygote.stdin.close()
        wait_line(zygote, "children", 60)
        zygote.wait(30)
    for p in procs:
        p.wait(30)
    return peak.peak, results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()
    ways = ["cold", "standby", "zsb", "zall"]
    peaks: dict[str, list[int]] = {w: [] for w in ways}
    for trial in range(args.trials):
        for way in (ways if trial % 2 == 0 else list(reversed(ways))):
            peak, results = one(way, args.steps)
            peaks[way].append(peak)
            print(f"trial {trial + 1} {way}: peak PSS {peak / 2**20:.0f} MiB; {'; '.join(results)}", flush=True)
    cold = statistics.median(peaks["cold"])
    for way in ways:
        m = statistics.median(peaks[way])
        print(f"{way:8s} peak PSS median {m / 2**20:.0f} MiB (range {min(peaks[way]) / 2**20:.0f}-"
              f"{max(peaks[way]) / 2**20:.0f}), {m / cold:.2f} x cold")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
