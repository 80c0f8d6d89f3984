"""The terminal side of a run: task lines with ``[type:index]`` prefixes, launcher messages.

Three ways to show a run (chosen by ``tfcluster up``): a live panel (launcher/liveview.py) pinned
at the bottom of a terminal with task output scrolling above it; plain prefixed lines (not a
terminal, or ``--plain``); launcher messages and the final report only (``--quiet``). Known
harmless TensorFlow start-up lines (launcher/noise.py) are hidden unless ``verbose``. Above the
panel, the tasks' progress protocol is shown as people's lines (launcher/peoplelines.py: one line per
epoch for the run, the strategy once); plain lines keep it as the tasks print it.

Reader threads of every task write here concurrently; one lock keeps lines whole.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Optional, TextIO

from . import noise
from .bounded import one_line
from .peoplelines import PeopleLines

if TYPE_CHECKING:
    from .record.view import RunView

_COLORS = ("36", "33", "35", "32", "34", "31")


class Console:
    def __init__(self, out: Optional[TextIO] = None, err: Optional[TextIO] = None, color: Optional[bool] = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.color = (_isatty(self.out) and not no_color()) if color is None else color
        # Held while a line or the panel is written: hold it too to keep a line whole (detach's hand-over).
        self.lock = threading.Lock()
        self._palette: dict[str, str] = {}
        self.quiet_tasks = False
        self.verbose = False  # also show the known harmless TF start-up lines
        self._panel = None  # liveview.LivePanel while the live panel is up
        self._people = PeopleLines()  # the task lines as the panel's reader sees them (peoplelines.py)

    # -------------------------------------------------------------- the live panel

    def start_panel(self, view: "RunView") -> bool:
        """Show the live panel of ``view`` if stdout is a terminal that can move its cursor;
        True if it is up."""
        if not _isatty(self.out) or os.environ.get("TERM", "") in ("dumb", "unknown"):
            return False
        from .liveview import LivePanel

        panel = LivePanel(view, self.out)
        panel.start()
        with self.lock:
            self._panel = panel
            self._people = PeopleLines()
        return True

    def end_panel(self) -> None:
        with self.lock:
            if self._panel is not None:
                self._show_in_panel(self._people.flush())  # (epochs still waiting for a task)
            panel, self._panel = self._panel, None
            if panel is not None:
                panel.stop()

    # -------------------------------------------------------------- output

    def task_line(self, key: str, line: str) -> None:
        if self.quiet_tasks or (not self.verbose and noise.is_noise(line)):
            return
        with self.lock:
            if self._panel is not None:  # a person reads this: protocol lines become their lines
                self._show_in_panel(self._people.feed(key, line))
                return
            prefix = f"[{key}]"
            if self.color:
                code = self._palette.setdefault(key, _COLORS[len(self._palette) % len(_COLORS)])
                prefix = f"\033[{code}m{prefix}\033[0m"
            self.out.write(f"{prefix} {line}\n")
            self.out.flush()

    def _show_in_panel(self, lines: "list[tuple[Optional[str], str]]") -> None:
        for key, text in lines:
            if key is None:
                self._panel.message(text)  # a line about the whole run
            else:
                self._panel.task_line(key, text)

    # A message may quote outside bytes (a spec's value, a host's reply): one_line keeps it one
    # bounded line with control characters escaped, whatever the caller put in it.
    def info(self, message: str) -> None:
        self._message(f"tfcluster: {one_line(message)}")

    def error(self, message: str) -> None:
        self._message(f"tfcluster: error: {one_line(message)}", style="bold red")

    def block(self, lines: list[str]) -> None:
        self._message("\n".join(lines))

    def report(self, lines: list[str]) -> None:
        """The final report: the panel goes away first, so the report is the last thing shown."""
        self.end_panel()
        self.block(lines)

    def _message(self, text: str, style: str = "") -> None:
        with self.lock:
            # On a terminal the panel owns the screen: messages go above it.
            if self._panel is not None and _isatty(self.err):
                self._panel.message(text, style)
                return
            self.err.write(text + "\n")
            self.err.flush()


def no_color() -> bool:
    """NO_COLOR (https://no-color.org) set and not empty: no colour codes, also on a terminal (rich,
    which draws the live panel, reads the same variable)."""
    return os.environ.get("NO_COLOR", "") != ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
