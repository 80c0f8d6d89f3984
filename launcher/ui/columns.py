"""The per-task columns of the three task tables, declared once: ``status`` (launcher/ui/runstatus.py),
the live panel (launcher/ui/panel.py) and the final report (launcher/ui/report.py).

Each ``Column`` names the tables that show it, its header there, how its text comes from a task
(``Row``: the task's folded state, launcher/record/fold.py, and its figures, record/view.py) and
whether it is right-aligned; an optional one is shown only when ``shown_if`` holds for the rows.
A new column is one entry of ``COLUMNS``; the tables pick theirs with ``for_table``. Where the
same header means something else in another table (``loss``: the panel's last epoch, status's
latest figure, the report's final one), that is its own entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from rich.measure import Measurement
from rich.progress_bar import ProgressBar
from rich.table import Table

from launcher.record.fold import ENDED, TaskLife
from launcher.record.taskview import TaskView

STATUS, PANEL, REPORT = "status", "panel", "report"


@dataclass
class Row:
    """One task as a table shows it: ``life`` its state (the view's task is one), ``task`` its
    figures (None: none read), ``status`` its ``status`` row (record/status.py's TaskRow) when the
    status table draws it; ``now`` and ``bar_width`` for the panel's idle time and epoch bar."""

    key: str
    host: str
    life: TaskLife
    task: Optional[TaskView] = None
    status: Any = None  # TaskRow
    run_lost: bool = False  # status: the run's supervisor is lost
    now: float = 0.0
    bar_width: int = 20

    @classmethod
    def of_view(cls, t: TaskView, now: float = 0.0, bar_width: int = 20) -> "Row":
        return cls(t.key, t.host, t, t, now=now, bar_width=bar_width)

    @classmethod
    def of_status(cls, row: Any, run_lost: bool) -> "Row":
        return cls(row.key, row.host, row.life, row.task, status=row, run_lost=run_lost)

    def figure(self, name: str) -> Any:
        return getattr(self.task, name) if self.task is not None else None


@dataclass(frozen=True)
class Column:
    name: str
    header: str
    tables: tuple[str, ...]
    value: Callable[[Row], Any]  # its text; None: no value (the plain tables show "-", the panel "")
    right: bool = False
    shown_if: Optional[Callable[[Sequence[Row]], bool]] = None


def _num(value: Optional[float], digits: int) -> Optional[str]:
    return None if value is None else f"{value:.{digits}f}"


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _status_state(r: Row) -> str:
    return r.status.state + (" (unsupervised)" if r.run_lost and r.status.alive else "")


def _panel_state(r: Row) -> str:
    t = r.task
    return r.life.shown + (" (lost)" if t is not None and t.lost and r.life.state not in ENDED else "")


def _epoch_step(r: Row) -> Optional[str]:
    epoch, step = r.figure("epoch"), r.figure("step")
    return None if epoch is None else f"{epoch}/{step if step is not None else '-'}"


def _panel_epoch(r: Row) -> Optional[str]:
    epoch, epochs = r.figure("epoch"), r.figure("epochs")
    return None if epoch is None else f"{epoch}/{epochs}" if epochs else str(epoch)


def _in_epoch(r: Row) -> Any:
    t = r.task
    if t is None or not t.steps_per_epoch or t.step is None:
        return None
    bar = ProgressBar(total=t.steps_per_epoch, completed=min(t.step, t.steps_per_epoch), width=r.bar_width)
    return BarCell(bar, f" {t.step}/{t.steps_per_epoch}")


class BarCell:
    """A progress bar followed by "i/N" in one cell of the live panel's table."""

    def __init__(self, bar: ProgressBar, label: str) -> None:
        self.bar, self.label = bar, label

    def __rich_console__(self, console, options):
        grid = Table.grid(padding=0)
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_row(self.bar, self.label)
        yield grid

    def __rich_measure__(self, console, options):
        width = (self.bar.width or 20) + len(self.label)
        return Measurement(width, width)


def gpu_text(t: Optional[TaskView]) -> Optional[str]:
    """A task's GPU memory and utilisation: ``1234M 37%`` (None without figures)."""
    if t is None or t.gpu_mib is None:
        return None
    return f"{t.gpu_mib}M" + (f" {t.gpu_util}%" if t.gpu_util is not None else "")


def _gpu_figures(rows: Sequence[Row]) -> bool:
    """Where nvidia-smi answered: some task has GPU memory figures."""
    return any(r.figure("gpu_mib") is not None for r in rows)


def _gpus_named(rows: Sequence[Row]) -> bool:
    """Some task has a GPU or asked for a count (not an auto request alone, which a CPU-only
    cluster's tasks carry too)."""
    return any(r.status is not None and r.status.gpus not in ("", "cpu")
               and not r.status.gpus.startswith(("gpus auto", "gpus all")) for r in rows)


COLUMNS: tuple[Column, ...] = (
    Column("task", "task", (STATUS, PANEL, REPORT), lambda r: r.key),
    Column("host", "host", (STATUS, PANEL, REPORT), lambda r: r.host or None),
    Column("gpus", "gpus", (STATUS,), lambda r: r.status.gpus or None, shown_if=_gpus_named),
    # The state: status words a failed task's exit (and a task left running without its supervisor),
    # the panel shows a live task's phase, the report the final state (its exit has a column).
    Column("status state", "state", (STATUS,), _status_state),
    Column("panel state", "state", (PANEL,), _panel_state),
    Column("final state", "state", (REPORT,), lambda r: r.life.state),
    Column("exit", "exit", (REPORT,), lambda r: _text(r.life.exit_code), right=True),
    Column("attempt", "att", (PANEL,), lambda r: "" if r.life.attempt is None else str(r.life.attempt + 1), right=True),
    Column("attempts", "attempts", (REPORT,), lambda r: str(r.life.starts), right=True),
    Column("epoch/step", "epoch/step", (STATUS,), _epoch_step),
    Column("epoch", "epoch", (PANEL,), _panel_epoch, right=True),
    Column("in epoch", "in epoch", (PANEL,), _in_epoch),
    Column("global step", "step", (PANEL,), lambda r: _text(r.figure("global_step")), right=True),
    Column("steps", "steps", (REPORT,), lambda r: _text(r.task.steps_this_attempt() if r.task else None), right=True),
    Column("loss", "loss", (STATUS,), lambda r: _num(r.figure("loss"), 4)),
    Column("accuracy", "accuracy", (STATUS,), lambda r: _num(r.figure("accuracy"), 4)),
    Column("epoch loss", "loss", (PANEL,), lambda r: _num(r.figure("epoch_loss"), 4), right=True),
    Column("epoch accuracy", "acc", (PANEL,), lambda r: _num(r.figure("epoch_accuracy"), 4), right=True),
    Column("examples/s", "examples/s", (STATUS,), lambda r: _num(r.figure("examples_per_sec"), 1)),
    Column("report examples/s", "examples/s", (REPORT,), lambda r: _num(r.figure("examples_per_sec"), 1),
           right=True),
    Column("final loss", "loss", (REPORT,), lambda r: _num(_first(r.figure("final_loss"), r.figure("epoch_loss")), 4),
           right=True),
    Column("final accuracy", "accuracy", (REPORT,),
           lambda r: _num(_first(r.figure("final_accuracy"), r.figure("epoch_accuracy")), 4), right=True),
    Column("panel examples/s", "ex/s", (PANEL,), lambda r: _num(r.figure("examples_per_sec"), 0), right=True),
    Column("idle", "idle", (PANEL,), lambda r: None if r.figure("last_line_at") is None
           else f"{max(0.0, r.now - r.figure('last_line_at')):.0f}s", right=True),
    Column("restarts", "restarts", (STATUS,), lambda r: str(r.status.restarts)),
    Column("gpu (peak)", "gpu (peak)", (STATUS,), lambda r: None if gpu_text(r.task) is None
           else f"{gpu_text(r.task)} ({r.figure('gpu_peak_mib')}M)", shown_if=_gpu_figures),
    Column("gpu", "gpu", (PANEL,), lambda r: gpu_text(r.task), right=True, shown_if=_gpu_figures),
    Column("last line", "last line", (STATUS,), lambda r: (r.status.last_line or "")[:60]),
)


def duration(seconds: float) -> str:
    """``12.3s``, ``4m05s``, ``2h03m``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass(frozen=True)
class RunColumn:
    """A column of ``tfcluster runs``' table: a run (record/status.py's RunStatus) per row."""

    header: str
    value: Callable[[Any], Optional[str]]  # its text; None: "-"


def _started(v: Any) -> Optional[str]:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.started)) if v.started else None


def _goodput_short(v: Any) -> Optional[str]:
    g = v.goodput()
    return g.short() if g is not None and g.elapsed > 0 else None


RUN_COLUMNS = (
    RunColumn("run", lambda v: v.run_id),
    RunColumn("started", _started),
    RunColumn("duration", lambda v: None if v.elapsed() is None else duration(v.elapsed())),
    RunColumn("outcome", lambda v: str(v.state)),
    RunColumn("attempts", lambda v: str(v.attempts or "-")),
    RunColumn("accuracy", lambda v: _num(v.final_accuracy, 4)),
    RunColumn("goodput", _goodput_short),  # (launcher/record/goodput.py; "<=": an upper bound, no step lines)
)


def for_table(table: str, rows: Sequence[Row]) -> list[Column]:
    """The columns ``table`` shows for ``rows``, in order."""
    return [c for c in COLUMNS if table in c.tables and (c.shown_if is None or c.shown_if(rows))]


def cells(columns: Sequence[Column], rows: Sequence[Row]) -> list[list[Any]]:
    """Each row's values under ``columns``."""
    return [[c.value(r) for c in columns] for r in rows]


def plain(table: str, rows: Sequence[Row]) -> list[str]:
    """``table``'s lines as plain text (launcher/ui/table.py)."""
    from launcher.ui.table import render

    columns = for_table(table, rows)
    return render([c.header for c in columns], cells(columns, rows),
                  right={i for i, c in enumerate(columns) if c.right})
