#!/usr/bin/env python3
"""What a Spot preemption costs with elastic: and without it, on the ssh lab (network namespaces
with an sshd and a private disk each: tests/labs/ssh.py). Needs root.

    sudo python3 bench/elastic.py [--repeat 3]

Per trial (2 MWMS workers training the bundled model, a backup every 3 steps; h2 preempted at
step 5: SIGTERM to every process of h2, SIGKILL after the notice, link down):
  spare      hosts h1, h2 + spare h3: preemption -> the first training step on h3 (s), steps redone
  by hand    hosts h1, h2 only (no elastic): preemption -> `up` exits; then hosts: edited to h1, h3
             and `up` again -> its first training step. The figure is the machine's part only: a
             person's time to notice and edit comes on top.
  shrink     hosts h1, h2, tasks.worker.min 1: preemption -> the first step of worker:0 alone
  grow       h2 back (link up, sshd) -> the first step of the grown group (elastic.settle 5 s in it)
The first step is the worker's own `tfcluster-first_step` line (its time= field), the preemption
the moment the first SIGTERM is sent. Prints each trial, the medians and the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import BackgroundUp  # noqa: E402
import launcher.record.events as ev  # noqa: E402
from launcher.record.reader import read_events  # noqa: E402
from tests.labs.ssh import Lab, have_prereqs  # noqa: E402

NOTICE = 10.0
TIMELINE = False
STEP = re.compile(r"\[(worker:\d)\] tfcluster-(first_step|step|start) .*?global_step=(\d+).*?time=([\d.]+)")


def spec_for(lab: Lab, work: Path, name: str, hosts: list[str], tasks, elastic=None, warm=None, steps=30) -> Path:
    spec = {
        "name": name, "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, "-m", "worker", "--epochs", "2", "--steps-per-epoch", "30",
                       "--step-delay", "0.3", "--save-freq", "3", "--progress-every", "1"]
                      if steps == 30 else
                      [sys.executable, "-m", "worker", "--epochs", "2", "--steps-per-epoch", str(steps),
                       "--step-delay", "0.3", "--save-freq", "3", "--progress-every", "1"],
        "hosts": lab.hosts_yaml(hosts), "tasks": tasks, "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "restart": {"max_restarts": 0}, "watchdog": {"startup_timeout": 120, "stop_grace": 5},
        "state": {"dir": str(lab.private / work.name / "state")},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "lease": 4, "connect_timeout": 3, "require": ["tensorflow", "tf_keras"]},
    }
    if elastic:
        spec["elastic"] = elastic
    if warm is not None:
        spec["restart"]["warm_standby"] = warm
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


class Run(BackgroundUp):
    """`tfcluster up` in the background, and the worker's step positions from its lines."""

    def first_step_after(self, since: float, key: str = "worker:0") -> tuple[float, int]:
        """The worker's own time of its first step after ``since``, and the step it resumed at."""
        start = None
        for _, line in self.lines:
            m = STEP.search(line)
            if not m or m.group(1) != key or float(m.group(4)) < since:
                continue
            if m.group(2) == "start":
                start = int(m.group(3))
            elif m.group(2) == "first_step":
                return float(m.group(4)), start if start is not None else -1
        raise RuntimeError(f"{key}: no first step after {since}")

    def last_step_before(self, until: float) -> int:
        steps = [int(m.group(3)) for _, line in self.lines if (m := STEP.search(line)) and m.group(2) == "step"
                 and float(m.group(4)) < until]
        return max(steps) if steps else 0


def preempt_at_step(lab: Lab, run: Run, host: str, step: int) -> float:
    run.wait_line(rf"\[worker:1\] tfcluster-step epoch=0 step={step} ")
    at = time.time()
    threading.Thread(target=lab.preempt, args=(host, NOTICE), daemon=True).start()
    return at


def trial_spare(lab: Lab, work: Path) -> dict:
    spec = spec_for(lab, work, "spare", ["h1", "h2", "h3"], {"worker": 2}, {"host_wait": 3})
    run = Run(spec)
    try:
        t0 = preempt_at_step(lab, run, "h2", 5)
        assert run.finish() == 0, "\n".join(line for _, line in run.lines[-30:])
        first, resumed = run.first_step_after(t0)
        return {"seconds": first - t0, "redone": max(0, run.last_step_before(t0 + 0.001) - resumed)}
    finally:
        lab.bring_back("h2")


def trial_hot_spare(lab: Lab, work: Path, warm: bool) -> dict:
    """The spare trial, cold (warm_standby: false) or with hot spares (the default, auto): h2 is
    preempted at worker:1's first step once every standby (h1's, h2's, and h3's two) said it is
    ready (cold: at the same step), so the figure is a warm move's."""
    spec = spec_for(lab, work, "spare", ["h1", "h2", "h3"], {"worker": 2}, {"host_wait": 3},
                    warm=None if warm else False, steps=80)
    run = Run(spec)
    try:
        after = 0.0
        if warm:
            for _ in range(4):
                after = run.wait_line(r"\] \(standby\) tfcluster-standby ready", after=after) + 1e-6
        # Two steps after a periodic backup (every 3), in both modes: a lost agreed save shows
        # as 2 steps redone (preempting at step 15, a backup step, once hid it in the cold trials).
        late = "|".join(str(n) for n in range(17, 80, 3))
        run.wait_line(rf"\[worker:1\] tfcluster-step epoch=0 step=({late}) ", after=after)
        t0 = time.time()
        threading.Thread(target=lab.preempt, args=("h2", NOTICE), daemon=True).start()
        assert run.finish() == 0, "\n".join(line for _, line in run.lines[-30:])
        first, resumed = run.first_step_after(t0)
        promoted = sum(1 for _, line in run.lines if "tfcluster-standby promoted" in line)
        if TIMELINE:
            print(f"timeline ({'hot' if warm else 'cold'}):\n" + "\n".join(timeline(run, work, t0)), flush=True)
        return {"seconds": first - t0, "redone": max(0, run.last_step_before(t0 + 0.001) - resumed),
                "promoted": promoted}
    finally:
        lab.bring_back("h2")


MARKS = re.compile(r"\[worker:\d\] (tfcluster-standby promoted|tfcluster-(start|first_step) |worker: worker:\d "
                   r"multi_worker|state: copied)")
QUIET = (ev.TaskGpus, ev.OtherEvent)  # (a kind this version does not write: an older record's progress lines)


def timeline(run: Run, work: Path, t0: float) -> list[str]:
    """One move, second by second from the preemption (``t0``): the run record's events and the
    marks of the task lines (as they reached the launcher's console), for --timeline."""
    rows = []
    for path in work.glob("runs/*/latest/events.jsonl"):
        for e in read_events(path.parent, strict=True):
            if isinstance(e, QUIET) or (e.time or 0) < t0 - 0.5:
                continue
            what = " ".join(f"{k}={e[k]}" for k in ("task", "host", "endpoint", "reason", "how", "code", "seconds")
                            if k in e)
            rows.append((e.time, f"event {e.kind} {what}"[:150]))
    for at, line in run.lines:
        if at >= t0 and MARKS.search(line):
            m = re.search(r" time=([\d.]+)", line)
            rows.append((float(m.group(1)) if m else at, f"line  {line}"[:150]))
    return [f"  +{at - t0:6.2f}  {what}" for at, what in sorted(rows)]


def trial_by_hand(lab: Lab, work: Path) -> dict:
    spec = spec_for(lab, work, "byhand", ["h1", "h2"], {"worker": 2})
    run = Run(spec)
    try:
        t0 = preempt_at_step(lab, run, "h2", 5)
        run.finish()
        failed_at = time.time()
        before = run.last_step_before(t0 + 0.001)
        edited = yaml.safe_load(spec.read_text())
        edited["hosts"] = lab.hosts_yaml(["h1", "h3"])
        spec.write_text(yaml.safe_dump(edited, sort_keys=False))
        again = Run(spec)
        assert again.finish() == 0, "\n".join(line for _, line in again.lines[-30:])
        first, resumed = again.first_step_after(failed_at)
        return {"seconds": first - t0, "failed_after": failed_at - t0, "redone": max(0, before - resumed)}
    finally:
        lab.bring_back("h2")


def trial_shrink_grow(lab: Lab, work: Path) -> dict:
    spec = spec_for(lab, work, "shrink", ["h1", "h2"], {"worker": {"count": 2, "min": 1}},
                    {"host_wait": 3, "settle": 5})
    run = Run(spec)
    try:
        t0 = preempt_at_step(lab, run, "h2", 5)
        left_out = run.wait_line(r"worker:1 left out")
        run.wait_line(r"\[worker:0\] tfcluster-first_step ", after=left_out)
        alone, _ = run.first_step_after(t0)
        back_at = time.time()
        lab.bring_back("h2")
        added = run.wait_line(r"worker:1 added on h2", after=back_at)
        run.wait_line(r"\[worker:1\] tfcluster-first_step ", after=added)
        grown, _ = run.first_step_after(back_at, key="worker:1")
        assert run.finish() == 0, "\n".join(line for _, line in run.lines[-30:])
        return {"shrink": alone - t0, "grow": grown - back_at}
    finally:
        lab.bring_back("h2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hot-spare", action="store_true",
                        help="only the spare trial, cold (warm_standby: false) against hot spares (the default), alternated")
    parser.add_argument("--timeline", action="store_true",
                        help="with --hot-spare: print each move's timeline (run record events, task marks)")
    args = parser.parse_args()
    global TIMELINE
    TIMELINE = args.timeline
    reason = have_prereqs()
    if reason:
        print(f"bench/elastic.py: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="tfcs-bench-elastic-"))
    lab = Lab(root, count=3, private=root / "private",
              prefix=os.environ.get("TFCLUSTER_LAB_PREFIX", "tfcb"),
              subnet=os.environ.get("TFCLUSTER_LAB_SUBNET", "10.238.0"))
    results: dict[str, list[dict]] = {}
    try:
        lab.start()
        for i in range(args.repeat):  # alternating: one of each per round
            trials = ((("spare cold", lambda lab, work: trial_hot_spare(lab, work, False)),
                       ("spare hot", lambda lab, work: trial_hot_spare(lab, work, True))) if args.hot_spare else
                      (("spare", trial_spare), ("by hand", trial_by_hand), ("shrink/grow", trial_shrink_grow)))
            for name, trial in trials:
                results.setdefault(name, [])
                work = root / f"{name.replace(' ', '').replace('/', '')}{i}"
                work.mkdir()
                result = trial(lab, work)
                results[name].append(result)
                print(f"round {i + 1} {name}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                        for k, v in result.items())
                      + f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    except BaseException:
        print(f"kept for a look: {root}", file=sys.stderr)
        lab.stop()
        raise
    else:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("medians:")
    for name, rows in results.items():
        keys = rows[0].keys() if rows else []
        print(f"  {name}: " + ", ".join(f"{k} {statistics.median(r[k] for r in rows):.1f}" for k in keys))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
