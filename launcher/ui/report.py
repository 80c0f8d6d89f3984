"""The final report of ``tfcluster up``: how each task ended, the plans and attempts, the goodput,
and where the run's results are.

``final_report`` and the parts it is made of are pure (from a ``RunModel`` and the outcome event:
the console says it when the outcome is written, and ``attach`` when it reads it); where the
results are is what the supervisor found there (launcher/record/layout.py's ``locations``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from launcher.record import events as ev
from launcher.record.states import Outcome
from launcher.record.view import RunModel
from launcher.ui.columns import REPORT, Row, plain
from launcher.ui.table import render


def task_table(view: RunModel) -> list[str]:
    """One row per task (the report's columns: launcher/ui/columns.py): final state, exit code,
    processes started, steps it ran in its last attempt, examples/s, and the final loss/accuracy it
    printed (its evaluation, else the last epoch's; "-" when it printed none)."""
    return plain(REPORT, [Row.of_view(t) for t in view.tasks.values()])


def gpu_peak_lines(view: RunModel) -> list[str]:
    """Each GPU task's peak GPU memory, where nvidia-smi answered during the run."""
    peaks = [f"{key} {t.gpu_peak_mib} MiB" for key, t in view.tasks.items() if t.gpu_peak_mib is not None]
    return [f"  gpu memory peak: {', '.join(peaks)}"] if peaks else []


def goodput_lines(view: RunModel, now: float) -> list[str]:
    """The run's goodput line (launcher/record/goodput.py) at its end (``now`` while it runs)."""
    g = view.goodput(view.ended_at if view.ended_at is not None else now)
    return [f"  {g.line()}"] if g is not None and g.elapsed > 0 else []


def location_lines(where: dict[str, str]) -> list[str]:
    return render(None, [[f"{label}:", path] for label, path in where.items()], gap=" ")


def summary_lines(view: RunModel) -> list[str]:
    """The plans used (when hosts changed: each plan's hosts and the change that made it) and
    one row per attempt (when it began, how long it ran, how it ended)."""
    if not view.attempt_ends:
        return []
    lines = []
    if len(view.plan_hosts) > 1:
        lines.append(f"  plans used: 1: {', '.join(view.plan_hosts[0])}")
        for n, hosts in enumerate(view.plan_hosts[1:], start=2):
            said = view.host_changes[n - 2].describe() if n - 2 < len(view.host_changes) else ""
            lines.append(f"  {' ' * 12}{n}: {', '.join(hosts)} ({said})")
    rows = []
    for a in view.attempt_ends:
        what = f"failed: {a['task']} {a['reason']}" if a.get("task") is not None else a["state"]
        rows.append((str(a["attempt"] + 1), time.strftime('%H:%M:%S', time.localtime(a["began"])),
                     f"{a['ended'] - a['began']:.1f}s", what))
    return lines + render(("attempt", "started", "duration", "outcome"), rows, right={0, 2})


def final_report(view: RunModel, outcome: ev.RunOutcome, now: float) -> list[str]:
    """The report a run ends with: the task table, the GPU peaks, the plans and attempts, the
    goodput, where its results are (``outcome.locations``)."""
    where: Mapping[str, Any] = outcome.locations if isinstance(outcome.locations, dict) else {}
    return (task_table(view) + gpu_peak_lines(view) + summary_lines(view) + goodput_lines(view, now)
            + location_lines({str(k): str(v) for k, v in where.items()}))


def ending_line(view: RunModel, outcome: ev.RunOutcome) -> str:
    """The run's last line: how it ended and where its record is."""
    if outcome.outcome == Outcome.SUCCEEDED:
        return f"run succeeded after {outcome.attempts} attempt(s); record: {view.run_dir}"
    if outcome.outcome == Outcome.INTERRUPTED:
        return f"interrupted; every task stopped; record: {view.run_dir}"
    return f"run failed; record: {view.run_dir}"

