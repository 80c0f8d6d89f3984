#!/usr/bin/env python3
"""What a warm restart's new processes still do: the CPU seconds of each part of the reference
worker's start once TensorFlow is imported (what a promoted standby, forked from its zygote,
has left to do), in 2 MultiWorkerMirroredStrategy processes of its own code (TF_CONFIG of their
own, no launcher), both alive at once as after a restart. Per part, each process's CPU time
(``time.process_time``: the least sensitive to what else runs) and wall time:

* strategy: ``tf.distribute.MultiWorkerMirroredStrategy()`` (the coordination service, the server);
* pipelines: worker/data.py ``training_pipelines`` (``tfds.load`` of both splits, the pipeline);
* model: worker/model.py ``build_cnn`` in the strategy's scope (each variable's initial value
  broadcast from the chief);
* step variables: worker/model.py ``create_step_variables`` (the optimizer's slots and fit's
  metrics made ahead, as the worker does, so the step is traced once; ``--lazy``: left to fit's
  first trace, which TensorFlow then traces twice);
* first step: ``fit`` of one step (fit's set-up, tracing the step, its first run and collectives);
* next fit: ``fit`` of one more step (the step traced already: the set-up and a step).

Medians over ``--trials`` runs and both processes.

    python bench/restart_parts.py [--trials 3] [--port 24540] [--lazy]

BENCHMARKS.md, "Recovery" (ssh): where a warm restart's time goes."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from benchlib import ROOT, load_average

PARTS = ("strategy", "pipelines", "model", "step variables", "first step", "next fit")


def one(index: int, port: int, data_dir: str, lazy: bool) -> None:
    """A worker's parts, timed; one JSON line on stdout."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{port}", f"localhost:{port + 1}"]},
                                          "task": {"type": "worker", "index": index}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["TF_GRPC_DEFAULT_OPTIONS"] = "grpc.initial_reconnect_backoff_ms=100"  # as the plan sets it
    sys.path.insert(0, str(ROOT))
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from worker import data as data_lib
    from worker.model import build_cnn, create_step_variables

    tfds.disable_progress_bar()
    seen = {}

    def part(name, fn):
        cpu, wall = time.process_time(), time.perf_counter()
        value = fn()
        seen[name] = [time.process_time() - cpu, time.perf_counter() - wall]
        return value

    args = types.SimpleNamespace(dataset="digits", data_dir=data_dir, no_download=False, shard_policy="data", seed=0,
                                 steps_per_epoch=5)

    strategy = part("strategy", tf.distribute.MultiWorkerMirroredStrategy)
    pipes = part("pipelines", lambda: data_lib.training_pipelines(args, 64))

    def build():
        with strategy.scope():
            return build_cnn(pipes.data.shape, pipes.data.num_classes, 1e-3)

    model = part("model", build)

    def step_variables():
        if not lazy:
            with strategy.scope():
                create_step_variables(model, pipes.train.element_spec)

    part("step variables", step_variables)
    part("first step", lambda: model.fit(pipes.train, epochs=1, steps_per_epoch=1, verbose=0))
    part("next fit", lambda: model.fit(pipes.train, epochs=1, steps_per_epoch=1, verbose=0))
    print(json.dumps(seen), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--port", type=int, default=24540)
    ap.add_argument("--lazy", action="store_true", help="the step's variables left to fit's first trace")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        one(args.worker, args.port, args.data_dir, args.lazy)
        return 0
    data_dir = tempfile.mkdtemp(prefix="tfcluster-restart-parts-")
    # The dataset built once first (worker/data.py builds the offline digits set when missing).
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); from worker import data; "
                    f"data.load('digits', {data_dir!r})"], check=True, capture_output=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}", flush=True)
    rows = []
    for trial in range(args.trials):
        port = args.port + 2 * trial
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--port", str(port),
                                   "--data-dir", data_dir, *(["--lazy"] if args.lazy else [])],
                                  stdout=subprocess.PIPE, text=True) for i in range(2)]
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise SystemExit(f"worker {i} of trial {trial + 1} exited {proc.returncode}")
            seen = json.loads(out.strip().splitlines()[-1])
            rows.append(seen)
            print(f"trial {trial + 1} worker {i}: " + ", ".join(f"{p} {seen[p][0]:.3f} s CPU ({seen[p][1]:.3f} wall)"
                                                                 for p in PARTS), flush=True)
    for p in PARTS:
        cpu = [r[p][0] for r in rows]
        print(f"median {p}: {statistics.median(cpu):.3f} s CPU ({min(cpu):.3f}-{max(cpu):.3f}), "
              f"wall {statistics.median(r[p][1] for r in rows):.3f} s")
    print(f"load average now {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
