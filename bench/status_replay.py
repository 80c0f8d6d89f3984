#!/usr/bin/env python3
"""What ``tfcluster status`` costs on a long run's record: a real two-worker run (plain Python
tasks sending the worker's progress records on their control channels), whose progress files
(logs/worker-N.progress) are then grown to what a long run leaves (``--mb`` per task, step
records), is read back by ``tfcluster status --json`` in a fresh
process. Prints its wall time and peak memory, the same replay line by line in this process
(the pre-chunking way: every line through the view, the whole log in memory) for comparison,
and checks that both give the same figures (status against the independent replay).

    python bench/status_replay.py [--mb 10,100] [--repeat 3]

With ``--snapshot``: after growing the logs, the record's snapshot is written
as the supervisor writes it (``feed.SnapshotWriter``, timed here: the supervisor spreads that
work over the run), then ``--tail-mb`` more of step lines are appended to each log (what a task
prints between two snapshots, and more), and ``status`` from the snapshot is timed against
``status`` with the snapshot moved away (a replay from the start: the old way); "same" checks
that both print the same status (everything but ``elapsed``).

    python bench/status_replay.py --snapshot --mb 400 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT

from tests.support.specs import script_spec

TASK = """\
    import json, os, socket, time
    conf = json.loads(os.environ["TF_CONFIG"])
    i = conf["task"]["index"]
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(conf["cluster"]["worker"][i].rsplit(":", 1)[1]))); s.listen()
    say = lambda line: os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), (line + "\\n").encode())
    say("tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 epochs=1000 steps_per_epoch=1000 "
        "time=%.3f" % time.time())
    for step in range(1, 201):
        say("tfcluster-step epoch=0 step=%d global_step=%d loss=%.4f accuracy=0.5000 time=%.3f"
            % (step, step, 1 / step, time.time()))
        time.sleep(0.005)
"""
TIMEOUT = 900
RESULT = "tfcluster-result accuracy=0.9100 loss=0.2000 examples_per_sec=1280.0\n"


def grow(log: Path, mb: float, result: bool = True) -> int:
    """Append step lines (later steps, later times) until the log is ``mb`` MB, then a result
    line (unless not ``result``: the log is only appended to); the log's lines."""
    with open(log, "rb+") as fh:  # the result line of a smaller size goes: the run goes on
        fh.seek(max(0, os.path.getsize(log) - len(RESULT)))
        if result and fh.read() == RESULT.encode():
            fh.truncate(os.path.getsize(log) - len(RESULT))
    with open(log, "rb") as fh:
        fh.seek(max(0, os.path.getsize(log) - 4096))
        last = [line for line in fh.read().decode().splitlines() if line.startswith("tfcluster-step ")][-1]
    fields = dict(kv.split("=", 1) for kv in last.split()[1:])
    g, t = int(fields["global_step"]), float(fields["time"])
    with open(log, "a") as fh:
        while fh.tell() < int(mb * (1 << 20)):
            block = []
            for _ in range(10_000):
                g += 1
                t += 0.05
                block.append(f"tfcluster-step epoch={g // 1000} step={g % 1000} global_step={g} "
                             f"loss={1 / g:.4f} accuracy={min(1.0, g / 1e6):.4f} time={t:.3f}\n")
            fh.write("".join(block))
        if result:
            fh.write(RESULT)
    with open(log, "rb") as fh:
        return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))


def line_by_line(run_dir: Path) -> dict:
    """The view replayed the way it was before chunked reads: each whole progress file in memory,
    every record through ``RunModel.progress``. Per task: (global_step, loss, accuracy, examples/s)."""
    from launcher.record.view import RunModel
    from launcher.record.reader import read_events

    view = RunModel()
    for event in read_events(run_dir, strict=True):
        view.event(event)
    for log in sorted((run_dir / "logs").glob("worker-*.progress")):
        key = log.stem.replace("-", ":")
        for line in log.read_bytes().decode("utf-8", "replace").split("\n")[:-1]:
            view.progress(key, line, time.time())
    return {k: (t.global_step, t.loss, t.accuracy, t.examples_per_sec) for k, t in view.tasks.items()}


def status(spec: Path) -> tuple[float, int, dict]:
    """(seconds, peak RSS in MB, figures per task) of ``tfcluster status --json`` in a new process."""
    code = ("import resource, subprocess, sys, time; t = time.monotonic(); "
            "p = subprocess.run([sys.executable, '-m', 'launcher', 'status', '--json', sys.argv[1]], "
            "capture_output=True, text=True, timeout=%d); "
            "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "print(p.stdout)" % TIMEOUT)
    out = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=TIMEOUT,
                         cwd=ROOT, check=True).stdout
    head, body = out.split("\n", 1)
    seconds, rss_kb = head.split()
    data = json.loads(body)
    figures = {t["key"]: (t["global_step"], t["loss"], t["accuracy"], t["examples_per_sec"]) for t in data["tasks"]}
    return float(seconds), int(rss_kb) // 1024, figures


def status_json(spec: Path) -> tuple[float, int, dict]:
    """(seconds, peak RSS in MB, the whole status but ``elapsed``) of ``tfcluster status --json``."""
    code = ("import resource, subprocess, sys, time; t = time.monotonic(); "
            "p = subprocess.run([sys.executable, '-m', 'launcher', 'status', '--json', sys.argv[1]], "
            "capture_output=True, text=True, timeout=%d); "
            "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "print(p.stdout)" % TIMEOUT)
    out = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=TIMEOUT,
                         cwd=ROOT, check=True).stdout
    head, body = out.split("\n", 1)
    seconds, rss_kb = head.split()
    data = json.loads(body)
    data.pop("elapsed")
    return float(seconds), int(rss_kb) // 1024, data


def snapshot_mode(spec: Path, run_dir: Path, sizes: list[int], repeat: int, tail_mb: float) -> int:
    from launcher.record.layout import SNAPSHOT_FILE
    from launcher.record.feed import SnapshotWriter

    print(f"{'MB/task':>8} {'lines/task':>11} {'tail lines':>11} {'full s':>8} {'snapshot s':>11} {'status MB':>10} "
          f"{'write s':>8} {'snap KB':>8} same")
    for mb in sizes:
        logs = sorted((run_dir / "logs").glob("worker-*.progress"))
        lines = [grow(log, mb) for log in logs][0]
        started = time.monotonic()
        SnapshotWriter(run_dir).close()  # as the supervisor leaves it (its thread: every 30 s)
        wrote = time.monotonic() - started
        snap = run_dir / SNAPSHOT_FILE
        size_kb = snap.stat().st_size // 1024
        tail = [grow(log, mb + tail_mb, result=False) for log in logs][0] - lines  # (the run went on after it)
        loads = [os.getloadavg()[0]]
        fast, full = [], []
        for _ in range(repeat):  # alternating: from the snapshot, then from the start
            fast.append(status_json(spec))
            snap.rename(snap.with_suffix(".away"))
            try:
                full.append(status_json(spec))
            finally:
                snap.with_suffix(".away").rename(snap)
            loads.append(os.getloadavg()[0])
        same = all(r[2] == full[0][2] for r in fast + full)
        print(f"{mb:>8} {lines + tail:>11} {tail:>11} {statistics.median(r[0] for r in full):>8.2f} "
              f"{statistics.median(r[0] for r in fast):>11.2f} {max(r[1] for r in fast):>10} {wrote:>8.2f} "
              f"{size_kb:>8} {'yes' if same else 'NO'}")
        print(f"  each from the snapshot: {', '.join(f'{r[0]:.2f}' for r in fast)} s; from the start: "
              f"{', '.join(f'{r[0]:.2f}' for r in full)} s; load average {', '.join(f'{x:.1f}' for x in loads)}")
        if not same:
            print(f"  from the snapshot: {fast[0][2]}\n  from the start: {full[0][2]}", file=sys.stderr)
            return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="10,100", help="sizes per task log, comma-separated (MB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--snapshot", action="store_true", help="status from the record's snapshot vs from the start")
    parser.add_argument("--tail-mb", type=float, default=1.0, help="MB per log appended after the snapshot")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if not args.snapshot:
        print(f"{'MB/task':>8} {'lines/task':>11} {'status s':>9} {'status MB':>10} {'line-by-line s':>15} same")
    with tempfile.TemporaryDirectory(prefix="tfc-bench-status-") as tmp:
        spec = script_spec(Path(tmp), TASK, watchdog="{stop_grace: 1}")
        up = subprocess.run([sys.executable, "-m", "launcher", "up", str(spec)], capture_output=True, text=True,
                            timeout=TIMEOUT, cwd=ROOT)
        if up.returncode != 0:
            print(up.stderr[-2000:], file=sys.stderr)
            return 1
        run_dir = (Path(tmp) / "runs" / "t" / "latest").resolve()
        if args.snapshot:
            return snapshot_mode(spec, run_dir, [int(x) for x in args.mb.split(",")], args.repeat, args.tail_mb)
        for mb in [int(x) for x in args.mb.split(",")]:
            lines = [grow(log, mb) for log in sorted((run_dir / "logs").glob("worker-*.progress"))][0]
            runs = [status(spec) for _ in range(args.repeat)]
            started = time.monotonic()
            reference = line_by_line(run_dir)
            old = time.monotonic() - started
            seconds = statistics.median(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            same = all(r[2] == reference for r in runs)
            print(f"{mb:>8} {lines:>11} {seconds:>9.2f} {peak:>10} {old:>15.2f} {'yes' if same else 'NO'}")
            if not same:
                print(f"  status: {runs[0][2]}\n  line by line: {reference}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
