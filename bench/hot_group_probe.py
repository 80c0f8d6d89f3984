#!/usr/bin/env python3
"""What a warm restart would be with a standby group formed ahead ("hot": its strategy made on
ports of its own, its data, its model and its first step already done, waiting), against a cold
restart, and what it would hold while it waits. An experiment for the target of a worker's death
-> its next first step <= 0.30 of cold, not tfcluster's code: tfcluster's standbys are forked
when promoted (BENCHMARKS.md, "Recovery": TensorFlow's work in the new processes alone is 0.40 of
cold there).

2 MultiWorkerMirroredStrategy processes of the reference worker's parts (worker/data.py,
worker/model.py, tf_keras ``fit`` with ``BackupAndRestore`` every 10 steps, 0.2 s between steps,
as bench/recovery.py's runs) train; worker:1 is SIGKILLed at step 30 and worker:0 stopped, as the
supervisor does. Then, alternated:

* cold: 2 new processes (TensorFlow imported, strategy, data, model, restore, the step traced);
* hot: the 2 processes of the group formed ahead are told to go (a file): they restore the backup
  and go on with the step they traced already (tf_keras reuses a model's train function).

Printed per trial: kill -> worker:1's first step after the restore, and for hot the Pss and the
Uss (Private_Clean + Private_Dirty: what it alone holds) of the waiting pair against the training
pair's. Medians at the end.

    python bench/hot_group_probe.py [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, free_base, load_average, memory_of

KILL_AT = 30


def worker(index: int, port: int, state: str, data_dir: str, go: str, tag: str = "") -> None:
    """One process of a group: ``go`` empty: it trains from the backup (or the start); else it
    forms ahead (one step of its own), says ``hot-ready``, waits for the file ``go``, then trains
    from the backup."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{port}", f"localhost:{port + 1}"]},
                                          "task": {"type": "worker", "index": index}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["TF_GRPC_DEFAULT_OPTIONS"] = "grpc.initial_reconnect_backoff_ms=100"  # as the plan sets it
    import types

    import tensorflow as tf
    import tf_keras as keras

    from worker import data as data_lib
    from worker.model import build_cnn, create_step_variables

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    args = types.SimpleNamespace(dataset="digits", data_dir=data_dir, no_download=False, shard_policy="data", seed=0,
                                 steps_per_epoch=60)
    pipes = data_lib.training_pipelines(args, 64)
    with strategy.scope():
        model = build_cnn(pipes.data.shape, pipes.data.num_classes, 1e-3)
        create_step_variables(model, pipes.train.element_spec)

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            print(f"{tag}step {int(model.optimizer.iterations.numpy())} {time.time():.3f}", flush=True)
            time.sleep(0.2)

    if go:
        model.fit(pipes.train, epochs=1, steps_per_epoch=1, verbose=0)  # the step traced and run once
        print(f"{tag}hot-ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.005)
    traced = model.train_function.experimental_get_tracing_count() if model.train_function else 0
    backup = keras.callbacks.BackupAndRestore(backup_dir=state, save_freq=10, delete_checkpoint=False)
    model.fit(pipes.train, epochs=2, steps_per_epoch=60, verbose=0, callbacks=[backup, Steps()])
    print(f"{tag}done traced-before={traced} traced={model.train_function.experimental_get_tracing_count()}",
          flush=True)


def forker(port: int, state: str, data_dir: str, go: str) -> None:
    """--forked: TensorFlow, tf_keras, tensorflow_datasets and the worker's modules imported once
    (as a host's zygote has them), then the training pair (tags ``a0``, ``a1``) and the group
    formed ahead (``h0``, ``h1``) forked from here; each child's pid on a line."""
    import gc

    import tensorflow  # noqa: F401
    import tensorflow_datasets  # noqa: F401
    import tf_keras  # noqa: F401

    sys.path.insert(0, str(ROOT))
    import importlib

    for name in ("worker.data", "worker.model"):
        importlib.import_module(name)

    gc.freeze()
    children = []
    for tag, index, at, wait in (("a0 ", 0, port, ""), ("a1 ", 1, port, ""), ("h0 ", 0, port + 2, go),
                                 ("h1 ", 1, port + 2, go)):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(index, at, state, data_dir, wait, tag)
            except BaseException:  # noqa: BLE001
                import traceback

                print(f"{tag}failed: " + traceback.format_exc().replace("\n", " | "), flush=True)
                code = 1
            sys.stdout.flush()
            os._exit(code)
        children.append(pid)
        print(f"pid {tag}{pid}", flush=True)
    for _ in children:
        os.wait()


class Proc:
    """A worker process and its lines, each with when it came."""

    def __init__(self, argv: list[str]) -> None:
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: list[tuple[float, str]] = []
        import threading

        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append((time.time(), line.strip()))

    def wait_for(self, prefix: str, after: float = 0.0, timeout: float = 300) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for at, line in list(self.lines):
                if at >= after and line.startswith(prefix):
                    return line
            if self.p.poll() is not None and not any(l.startswith(prefix) for _, l in self.lines):
                time.sleep(0.2)
                if not any(l.startswith(prefix) for _, l in self.lines):
                    break
            time.sleep(0.01)
        raise SystemExit(f"no line {prefix!r} from pid {self.p.pid} (exit {self.p.poll()}): {self.lines[-5:]}")


def uss(pids) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def gone(pid: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) and time.monotonic() < end:
        time.sleep(0.002)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def trial(work: Path, arm: str, data_dir: str) -> dict:
    """``arm``: cold, hot (each worker its own process) or forked (the training pair and the hot
    pair forked from one process that imported TensorFlow, as from a host's zygote)."""
    state = str(work / "state")
    me = [sys.executable, __file__, "--data-dir", data_dir, "--state", state]
    port = free_base(4)
    go = work / "go"
    procs: list[Proc] = []
    try:
        if arm == "forked":
            procs.append(Proc(me + ["--forker", "--port", str(port), "--go", str(go)]))
            lines = {t: procs[0].wait_for(f"pid {t} ") for t in ("a0", "a1", "h0", "h1")}
            pids = {t: int(line.split()[2]) for t, line in lines.items()}
            step = [lambda prefix, t=t, **kw: procs[0].wait_for(f"{t} {prefix}", **kw) for t in ("a0", "a1", "h0", "h1")]
        else:
            procs += [Proc(me + ["--worker", str(i), "--port", str(port)]) for i in (0, 1)]
            if arm == "hot":
                procs += [Proc(me + ["--worker", str(i), "--port", str(port + 2), "--go", str(go)]) for i in (0, 1)]
            pids = dict(zip(("a0", "a1", "h0", "h1"), (p.p.pid for p in procs)))
            step = [p.wait_for for p in procs]
        if arm != "cold":
            step[2]("hot-ready")
            step[3]("hot-ready")
        step[1](f"step {KILL_AT} ")
        memory = {}
        if arm != "cold":
            memory = {"active_pss": memory_of([pids["a0"], pids["a1"]])[1], "hot_pss": memory_of([pids["h0"], pids["h1"]])[1],
                      "active_uss": uss([pids["a0"], pids["a1"]]), "hot_uss": uss([pids["h0"], pids["h1"]]),
                      "all_pss": memory_of([*pids.values(), *(p.p.pid for p in procs)])[1]}
        load = load_average()
        os.kill(pids["a1"], signal.SIGKILL)
        died = time.time()
        gone(pids["a1"])
        os.kill(pids["a0"], signal.SIGKILL)  # (its collectives fail: the supervisor stops it)
        gone(pids["a0"])
        if arm == "cold":
            procs += [Proc(me + ["--worker", str(i), "--port", str(port)]) for i in (0, 1)]
            step = step[:2] + [p.wait_for for p in procs[2:]]
        else:
            go.write_text("")
        first = step[3]("step ", after=died)
        done = step[3]("done ", timeout=300)
        step[2]("done ", timeout=60)
        first = first.split()[-2:]
        return {"first": float(first[1]) - died, "restored_at": int(first[0]), "done": done.split("done ", 1)[1],
                "load": load, **memory}
    finally:
        for p in procs:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        for pid in pids.values() if "pids" in locals() else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--go", default="", help=argparse.SUPPRESS)
    ap.add_argument("--forker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.forker:
        forker(args.port, args.state, args.data_dir, args.go)
        return 0
    if args.worker is not None:
        sys.path.insert(0, str(ROOT))
        worker(args.worker, args.port, args.state, args.data_dir, args.go)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-hot-group-"))
    data_dir = str(tmp / "tfds")
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); from worker import data; "
                    f"data.load('digits', {data_dir!r})"], check=True, capture_output=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}", flush=True)
    arms = ("cold", "hot", "forked")
    rows: dict = {arm: [] for arm in arms}
    for i in range(args.trials):
        for arm in arms:
            work = tmp / f"{arm}{i}"
            work.mkdir()
            r = trial(work, arm, data_dir)
            rows[arm].append(r)
            mem = (f"; waiting pair Pss {r['hot_pss'] / 2**20:.0f} MiB, Uss {r['hot_uss'] / 2**20:.0f} MiB against the "
                   f"training pair's {r['active_pss'] / 2**20:.0f} / {r['active_uss'] / 2**20:.0f}; every process's Pss "
                   f"{r['all_pss'] / 2**20:.0f} MiB" if arm != "cold" else "")
            print(f"{arm} trial {i + 1}: kill -> worker:1's first step after the restore {r['first']:.2f} s (resumed "
                  f"at step {r['restored_at']}; {r['done']}; load {r['load']}){mem}", flush=True)
    med = {arm: statistics.median(r["first"] for r in rows[arm]) for arm in arms}
    print(f"median: cold {med['cold']:.2f} s, hot {med['hot']:.2f} s ({med['hot'] / med['cold']:.2f} of cold), "
          f"forked hot {med['forked']:.2f} s ({med['forked'] / med['cold']:.2f}); the waiting pair's Uss: "
          + ", ".join(f"{arm} {statistics.median(r['hot_uss'] for r in rows[arm]) / 2**20:.0f} MiB" for arm in arms[1:])
          + f"; load average now {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
