"""A run record's state for people: ``tfcluster status``'s block (head line, task table, hosts,
the advice for a run whose supervisor is lost) and ``tfcluster runs``' table. Pure formatting of
``RunStatus`` (launcher/record/status.py); the lines hold a record's bytes, so whoever prints them
escapes them (launcher/bounded.py)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Optional

from launcher.record.hosts import waiting_line
from launcher.record.status import LOST, RUNNING, SUCCEEDED, RunStatus
from launcher.ui.columns import RUN_COLUMNS, STATUS, Row, duration, plain
from launcher.ui.table import render


def render_status(view: RunStatus, spec: str, now: Optional[float] = None) -> list[str]:
    """``status``'s lines; ``spec`` is the spec as the user named it (for the commands advised)."""
    elapsed = view.elapsed(now)
    head = f"run {view.run_id} ({view.name}, {view.backend}): {view.state}"
    if view.attempts:
        head += f", attempt {view.attempts}"
    if elapsed is not None:
        head += f", {duration(elapsed)}" + (" elapsed" if view.state == RUNNING else "")
    if view.state == RUNNING and view.supervisor_pid:
        where = f" on {view.supervisor_host}" if view.supervisor_host else ""
        head += f"; supervisor pid {view.supervisor_pid}{where}" + (" (detached)" if view.detached else "")
    lines = [head]
    if view.reason and view.state != SUCCEEDED:  # (why it failed or stopped, or a note on the supervisor)
        lines.append(f"  {view.reason}")
    g = view.goodput(now)
    if g is not None and g.elapsed > 0:
        lines.append(g.line())
    lines += task_table(view)
    if view.straggler:
        lines.append(f"straggler: {view.straggler['task']} {view.straggler['why']}")
    if view.spares:
        lines.append(f"spare hosts: {', '.join(view.spares)}")
    if view.suspects:
        lines.append(f"suspect hosts: {', '.join(view.suspects)}")
    lines += view.host_changes
    if view.group_sizes:
        lines.append(view.group_sizes)
    if view.waiting and view.state == RUNNING:
        lines.append(waiting_line(view.waiting, time.time() if now is None else now))
    if view.state == LOST:
        lines += lost_advice(view, spec)
    return lines


def task_table(view: RunStatus) -> list[str]:
    """A row per task (status's columns: launcher/ui/columns.py)."""
    return plain(STATUS, [Row.of_status(t, view.state == LOST) for t in view.tasks])


def lost_advice(view: RunStatus, spec: str) -> list[str]:
    alive = [t.key for t in view.tasks if t.alive]
    unknown = [t.key for t in view.tasks if t.alive is None and t.life.live]
    out = []
    if alive:
        out.append(f"still running without a supervisor: {', '.join(alive)}")
    if unknown:
        out.append(f"may still be running (not checkable from here): {', '.join(unknown)}; they stop on their own "
                   "once their lifeline (the supervisor's connection) is gone")
    if not alive and not unknown:
        out.append("no task of the run is left running here (they stopped with their lifeline)")
    out.append(f"clean up: tfcluster down {shlex.quote(spec)} --run {view.run_id}   "
               "(stops what is left and marks the run stopped)")
    return out


def render_runs(views: list[RunStatus], where: Path) -> list[str]:
    """``runs``' table of the runs of one spec name, kept under ``where``."""
    if not views:
        return [f"no runs under {where}"]
    rows = [[c.value(v) for c in RUN_COLUMNS] for v in views]
    return [f"runs of {views[0].name} ({where}):"] + render([c.header for c in RUN_COLUMNS], rows)
