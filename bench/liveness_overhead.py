#!/usr/bin/env python3
"""What the hang watchdog's progress signal costs a user's script: the same Keras ``fit`` run as
``python SCRIPT`` (A) and under the stub every Python task now runs in (B: ``python -c STUB SCRIPT``,
launcher/remote/pystandby.py with launcher/contract/liveness.py: the count of TensorFlow function
calls, the beat thread, the stacks' faulthandler registered), alternated, one process each, no
cluster (what is measured is the process's own cost, with nothing else in the way).

The script (written to a temporary dir) fits a small dense model on random data for ``--steps``
steps of batch 32 and prints its own examples/s over the steps after the first epoch (tracing
excluded). Stack capture costs nothing until a stall or ``tfcluster stacks``: it is a signal
handler that faulthandler runs then. Medians of each side and B/A, with the load average before
and after (the machine should be quiet: it warns above 1.5).

A whole process's examples/s varies by 20-30 % from one process to the next on a 2-core machine
(where its threads land), more than the effect measured: so a second figure is taken inside one
process, the same model's ``fit`` over the same data alternated with the count's wrapper on and
off (``Context.call_function`` swapped), 8 fits each, with the beat thread running throughout. That
isolates the per-call cost; the first figure bounds everything else the stub does.

``--channel EVERY``: B runs as a run's task does, under the task wrapper with its control channel
(launcher/remote/taskwrap.py --control: the wrapper reads the task's output and its channel and
frames both on one stream, launcher/remote/taskstream.py), and its script also writes a step
record (``tfcluster-step ...``) on the channel every EVERY steps, as the reference worker does:
B/A is then the whole protocol's cost (the count, the beats, the step records, the wrapper's
framing) against a plain script that reports nothing.

``--pin CPU`` takes the scheduler out of the figure: every process runs on that one CPU
(``taskset``) with TensorFlow's own pools at one thread each (TF_NUM_INTRAOP_THREADS and
TF_NUM_INTEROP_THREADS, read by tensorflow/core/common_runtime/process_util.cc), so where the
threads land cannot differ from one process to the next; the stub's threads (the beat) share that
CPU with the script, so whatever they cost is inside the figure.

    python bench/liveness_overhead.py [--trials 5] [--steps 3000] [--fits 8] [--pin 1] [--channel 10]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import load_average

from launcher.supervise.standby import stub_command

SCRIPT = """\
import os, sys, time
import numpy as np
import tensorflow as tf

steps, every = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
callbacks = []
if every:  # a step record on the control channel every EVERY steps, as the reference worker writes them
    fd = int(os.environ["TFCLUSTER_CONTROL_FD"])

    class Report(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if (batch + 1) % every == 0:
                os.write(fd, ("tfcluster-step epoch=0 step=%d global_step=%d time=%.3f\\n"
                              % (batch + 1, batch + 1, time.time())).encode())

    callbacks.append(Report())
x = np.random.default_rng(0).normal(size=(steps * 32, 64)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x[:3200], y[:3200], batch_size=32, epochs=1, verbose=0)  # tracing, outside the figure
start, cpu = time.perf_counter(), time.process_time()
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=callbacks)
print("examples/s %.1f per-cpu-s %.1f" % (len(x) / (time.perf_counter() - start),
                                          len(x) / (time.process_time() - cpu)), flush=True)
"""
FIGURE = re.compile(r"^examples/s ([0-9.]+) per-cpu-s ([0-9.]+)$", re.M)

TOGGLE = """\
import importlib.util, statistics, sys, time
import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

where, steps, fits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("liveness", where)
liveness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(liveness)
liveness.install()  # the beat thread and the stacks' signal, on throughout
x = np.random.default_rng(0).normal(size=(steps * 32, 64)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(1)])
model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x[:3200], y[:3200], batch_size=32, epochs=1, verbose=0)
plain = context.Context.call_function
counted = liveness._counted(plain)
rates = {"off": [], "on": []}
for i in range(fits):
    for side in (("off", "on") if i % 2 == 0 else ("on", "off")):
        context.Context.call_function = counted if side == "on" else plain
        start = time.perf_counter()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        rates[side].append(len(x) / (time.perf_counter() - start))
print("toggle off %.1f on %.1f calls %d" % (statistics.median(rates["off"]), statistics.median(rates["on"]),
                                           liveness.count()))
"""
TOGGLED = re.compile(r"^toggle off ([0-9.]+) on ([0-9.]+) calls (\d+)$", re.M)


def _env(pin: str) -> dict[str, str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1"}
    if pin:
        env.update(TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1")
    return env


def _pinned(argv: list[str], pin: str) -> list[str]:
    return ["taskset", "-c", pin, *argv] if pin else argv


def one(argv: list[str], pin: str = "", every: int = 0) -> tuple[float, float]:
    """(examples/s, examples per CPU-second of the whole process: every thread's, the stub's
    beat among them; a figure the machine's load moves far less than the wall clock's).
    ``every``: B under the wrapper, its stream framed: its figure and beats read from the frames."""
    proc = subprocess.Popen(_pinned(argv, pin), env=_env(pin), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # (stdin: the wrapper's lifeline, open while it runs)
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    code = proc.wait(timeout=600)
    text, beats, steps = stdout.decode(errors="replace"), stderr.decode(errors="replace"), 0
    if every:
        from launcher.backends.base import OutputSink
        from launcher.backends.channel import Decoder

        lines, control = [], []
        decoder = Decoder("B", OutputSink(lambda k, t: lines.append(t), lambda k, t: control.append(t)))
        decoder.feed(stdout)
        decoder.end()
        text, beats = "\n".join(lines), "\n".join(control)
        steps = sum(1 for line in control if line.startswith("tfcluster-step "))
    found = FIGURE.search(text)
    if code != 0 or not found:
        raise SystemExit(f"bench run failed (exit {code}): {stderr.decode(errors='replace')[-2000:]}")
    if ("-c" in argv[1:2] or every) and "tfcluster-beat" not in beats:
        raise SystemExit("the stub ran without its beats: the B side measured nothing of the liveness")
    if every and steps < 3:
        raise SystemExit(f"B wrote {steps} step records on its channel: the protocol was not measured")
    return float(found.group(1)), float(found.group(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--fits", type=int, default=8)
    ap.add_argument("--pin", default="", help="one CPU for every process, TensorFlow's pools at one thread")
    ap.add_argument("--channel", type=int, default=0, metavar="EVERY",
                    help="B under the task wrapper with its control channel, a step record every EVERY steps")
    args = ap.parse_args()
    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(SCRIPT)
        plain = [sys.executable, str(script), str(args.steps)]
        stubbed = stub_command(plain + ([str(args.channel)] if args.channel else []))
        assert stubbed is not None and stubbed[1] == "-c"
        if args.channel:
            from launcher.contract import envnames
            from launcher.remote import taskwrap_path

            stubbed = [sys.executable, str(taskwrap_path()), "--control", envnames.CONTROL_FD, "--", *stubbed]
        a, b = [], []  # (examples/s, examples per CPU-second) of each process
        for trial in range(args.trials):
            for side, argv, into in (("A", plain, a), ("B", stubbed, b)) if trial % 2 == 0 else \
                    (("B", stubbed, b), ("A", plain, a)):
                into.append(one(argv, args.pin, args.channel if side == "B" else 0))
                print(f"trial {trial + 1} {side}: {into[-1][0]:.1f} examples/s, {into[-1][1]:.1f} per CPU-second",
                      flush=True)
    for i, figure in enumerate(("examples/s", "examples per CPU-second")):
        fa, fb = [x[i] for x in a], [x[i] for x in b]
        ma, mb = statistics.median(fa), statistics.median(fb)
        print(f"{figure}: A plain script median {ma:.1f} (range {min(fa):.1f}-{max(fa):.1f}); "
              f"B under the stub median {mb:.1f} (range {min(fb):.1f}-{max(fb):.1f}); B/A {mb / ma:.4f} "
              f"(target >= 0.99); means B/A {statistics.mean(fb) / statistics.mean(fa):.4f}")
    print(f"pinned: {args.pin or 'no'}; channel: {f'a step record every {args.channel} steps' if args.channel else 'no'}; "
          f"load average before {before}, after {load_average()}")
    liveness = Path(__file__).resolve().parents[1] / "launcher" / "contract" / "liveness.py"
    toggle = [sys.executable, "-c", TOGGLE, str(liveness), str(args.steps), str(args.fits)]
    out = subprocess.run(_pinned(toggle, args.pin), env=_env(args.pin), capture_output=True, text=True, timeout=1200)
    found = TOGGLED.search(out.stdout)
    if out.returncode != 0 or not found:
        raise SystemExit(f"toggle run failed (exit {out.returncode}): {out.stderr[-2000:]}")
    off, on, calls = float(found.group(1)), float(found.group(2)), int(found.group(3))
    if calls < args.fits * args.steps:
        raise SystemExit(f"the counted fits made {calls} counted calls, fewer than their {args.fits * args.steps} steps")
    print(f"one process, count off/on alternated {args.fits}x each: off {off:.1f}, on {on:.1f} examples/s, "
          f"on/off {on / off:.4f} ({calls} calls counted); load average {load_average()}")


if __name__ == "__main__":
    main()
