"""The live panel of ``tfcluster up`` on a terminal (rich), drawn from a ``RunModel``.

The panel stays pinned at the bottom of the terminal; task output and launcher messages are
printed above it. Only used when stdout is a terminal: files and pipes get plain lines
(launcher/ui/console.py) and never a colour or cursor escape.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, TextIO

from rich.console import Console as RichConsole, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from launcher.bounded import escape, for_terminal
from launcher.record.hosts import size_now, suspect_lines, waiting_line
from launcher.record.view import (EVALUATING, FAILED, GONE, IMPORTING, RESTARTING, RUNNING, STARTING, STOPPED, SUCCEEDED,
                          TRAINING, RunModel)
from launcher.ui.columns import PANEL, Row, for_table, gpu_text  # noqa: F401 (gpu_text: re-exported)

# By the word a task shows (``TaskLife.shown``: a live task's phase, else its state).
_STATE_STYLE = {
    STARTING: "dim", IMPORTING: "dim", RUNNING: "cyan", TRAINING: "bold green", EVALUATING: "green",
    RESTARTING: "bold yellow", SUCCEEDED: "green", FAILED: "bold red", STOPPED: "yellow", GONE: "yellow",
}
_KEY_STYLES = ("cyan", "yellow", "magenta", "green", "blue", "red")


def render(view: RunModel, now: float, width: int = 160) -> Group:
    """The panel for ``view`` at time ``now`` on a terminal ``width`` columns wide: header, one
    row per task (the panel's columns: launcher/ui/columns.py), PSS/evaluator extras."""
    bar_width = 20 if width >= 140 else 10 if width >= 100 else 4
    parts: list = [_header(view, now), Text(f"run dir {escape(str(view.run_dir))}", style="dim", no_wrap=True, overflow="ellipsis")]
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold", expand=False)
    rows = [Row.of_view(t, now, bar_width) for t in view.tasks.values()]
    columns = for_table(PANEL, rows)
    for c in columns:
        table.add_column(c.header, justify="right" if c.right else "left", no_wrap=True)
    for r in rows:
        table.add_row(*(_styled(c.name, r, c.value(r)) for c in columns))
    parts.append(table)
    extras = _extras(view, now)
    if extras:
        parts.append(Text(extras, style="dim"))
    return Group(*parts)


def _styled(column: str, r: Row, value):
    """A panel cell: the task key and its state in colour, a missing value blank."""
    if column == "task":
        return Text(value, style=_key_style(r.key))
    if column == "panel state":
        return Text(value, style=_STATE_STYLE.get(r.life.shown, ""))
    return "" if value is None else value


def _header(view: RunModel, now: float) -> Text:
    attempt = f"attempt {(view.attempt or 0) + 1}" + (f" of {view.max_attempts}" if view.max_attempts else "")
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(view.name or "run", style="bold")
    text.append(f"  {view.strategy} on {view.backend}  {attempt}  {_clock(view.elapsed(now))} elapsed")
    g = view.goodput(now)
    if g is not None and g.productive > 0:  # (once it trained: before, every run is at 0 %)
        text.append(f"  goodput {g.short()}")
    return text


def _extras(view: RunModel, now: float) -> str:
    bits = []
    if view.strategy == "parameter_server":
        chief = view.chief()
        if chief is not None and chief.global_step is not None:
            total = chief.total_steps
            bits.append(f"chief step {chief.global_step}" + (f"/{total}" if total else ""))
        servers = [t for t in view.tasks.values() if t.key.split(":")[0] in ("ps", "worker")]
        up = sum(1 for t in servers if (t.state == RUNNING or (t.live and t.phase == TRAINING)) and not t.lost)
        bits.append(f"servers up {up}/{len(servers)}")
        bits.append(f"workers lost {view.workers_lost}, recovered {view.workers_recovered}")
        if view.ps_lost:
            bits.append(f"ps lost {view.ps_lost}")
    if view.spares:
        bits.append(f"spare hosts: {', '.join(view.spares)}")
    if size_now(view):
        bits.append(size_now(view))
    if view.run.waiting:  # below tasks.worker.min: the countdown of the wait for hosts
        bits.append(waiting_line(view.run.waiting, now))
    if view.suspects:
        bits.append(f"suspect hosts: {', '.join(suspect_lines(view))}")
    if view.host_changes:
        bits.append(view.host_changes[-1].describe())
    ev = view.evaluator()
    if ev is not None:
        if ev.last_checkpoint:
            bits.append(f"evaluator: {ev.last_checkpoint} accuracy {_metric(ev.final_accuracy)}"
                        f" loss {_metric(ev.final_loss)}")
        else:
            bits.append("evaluator: no checkpoint evaluated yet")
    return "  ".join(bits)


def _key_style(key: str) -> str:
    kind, _, index = key.partition(":")
    return _KEY_STYLES[(hash(kind) + int(index or 0)) % len(_KEY_STYLES)] if index.isdigit() else ""


def _metric(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4f}"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class LivePanel:
    """The rich Live display of ``view`` on ``out`` (a terminal), with lines printed above it.

    Lines are queued and printed in batches (every ``flush_every`` s, by one thread): rich
    redraws the panel after each print, and a task's reader thread must never wait on that."""

    def __init__(self, view: RunModel, out: TextIO, clock: Callable[[], float] = time.time,
                 flush_every: float = 0.1) -> None:
        self.view = view
        self.clock = clock
        self.flush_every = flush_every
        self.console = RichConsole(file=out, highlight=False, markup=False, emoji=False)
        self.live = Live(console=self.console, get_renderable=self._renderable, refresh_per_second=4,
                         transient=True, redirect_stdout=False, redirect_stderr=False)
        self._palette: dict[str, str] = {}
        self._pending: list[Text] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True, name="liveview-flush")

    def _renderable(self):
        return render(self.view.snapshot(), self.clock(), self.console.width)

    def start(self) -> None:
        self.live.start()
        self._flusher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._flusher.is_alive():
            self._flusher.join(timeout=5.0)
        self._flush()
        self.live.stop()

    def task_line(self, key: str, line: str) -> None:
        with self._lock:
            style = self._palette.setdefault(key, _KEY_STYLES[len(self._palette) % len(_KEY_STYLES)])
            # (a task's colours, never its OSC/DCS/APC: launcher/bounded.py for_terminal)
            self._pending.append(Text.assemble((f"[{key}]", style), " ", Text.from_ansi(for_terminal(line))))

    def message(self, text: str, style: str = "") -> None:
        with self._lock:
            self._pending.append(Text(text, style=style))

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_every):
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            self.console.print(Text("\n").join(pending), soft_wrap=True)
