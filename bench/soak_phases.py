#!/usr/bin/env python3
"""Where each fault's time goes in a kept soak (``bench/soak.py --keep``): for every fault, the
run record's events from the fault to worker:0's next first step (else for 30 s), each
with its offset from the fault, and worker:0's own lines on the way (its start line, printed
once its backup is restored; its first step, which holds the tracing).

Usage::

    python3 bench/soak_phases.py RUN_DIR [SOAK_JSON]

RUN_DIR: the kept ``.../soak/runs/soak/latest``; SOAK_JSON: the soak's report (default
``$TMPDIR/tfcluster-soak.json``, which the soak writes).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import launcher.record.events as ev  # noqa: E402
from launcher.record.reader import read_events  # noqa: E402

QUIET = (ev.TaskGpus,)  # events with nothing to say about a fault's time
SHOWN = ("task", "host", "attempt", "code", "reason", "why", "promoted", "standby", "seconds", "spare", "signal")


def worker0_marks(run_dir: Path) -> list[tuple[float, str]]:
    """worker:0's start and first_step lines, with their own times, over every attempt."""
    marks = []
    path = run_dir / "logs" / "worker-0.progress"
    for line in path.read_text(errors="replace").splitlines():
        kind = line.split(" ", 1)[0]
        if kind not in ("tfcluster-start", "tfcluster-first_step"):
            continue
        fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if "time" in fields:
            marks.append((float(fields["time"]), f"{kind[10:]} global_step={fields.get('global_step')}"))
    return sorted(marks)


def describe(event: ev.RecordEvent) -> str:
    line = event.to_json()
    parts = [event.kind]
    for key in SHOWN:
        if line.get(key) not in (None, "", [], {}):
            value = line[key]
            text = value if isinstance(value, str) else json.dumps(value)
            parts.append(f"{key}={text[:60]}")
    return " ".join(parts)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0]).resolve()
    report = json.loads(Path(argv[1] if len(argv) > 1 else Path(tempfile.gettempdir()) / "tfcluster-soak.json")
                        .read_text())
    events = read_events(run_dir)
    marks = worker0_marks(run_dir)
    faults = sorted(report["faults"], key=lambda f: f["at"])
    for n, fault in enumerate(faults):
        at = fault["at"]
        following = faults[n + 1]["at"] if n + 1 < len(faults) else float("inf")
        firsts = [t for t, what in marks if t > at and what.startswith("first_step")]
        until = firsts[0] if firsts and firsts[0] < following else None
        kind = "a spare fault: " if fault.get("spare") else ""
        if until is None:  # (a spare's fault, a return or a discovery edit that moved nothing)
            print(f"\n== {kind}{fault['what']} (no restart before the next fault)")
            until = min(following, at + 30)
        else:
            print(f"\n== {kind}{fault['what']} (+{until - at:.1f} s to worker:0's next first step)")
        timeline = [(e.time, describe(e)) for e in events
                    if e.time is not None and at <= e.time <= until and not isinstance(e, QUIET)]
        timeline += [(t, f"worker:0 {what}") for t, what in marks if at <= t <= until]
        for t, what in sorted(timeline):
            print(f"  +{t - at:6.2f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
