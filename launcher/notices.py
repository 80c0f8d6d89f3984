"""What a backend (or any layer below the terminal) may say to the person running a command.

A backend reports a few one-line notices (an image pulled, a state dir chosen, leftover tasks
stopped), an error it recovered from, a short block (a failed build's last lines) and a wait's
countdown. It says them through this narrow sink, never through the terminal's console: the
CLI and the use cases hand it their ``launcher.ui.console.Console``, which has these four
methods; a backend built without one (a test, a helper) gets ``PlainNotices``, the same lines on
stderr without colour or panel.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, ContextManager, Optional, Protocol, TextIO

from launcher.bounded import escape, one_line


class Notices(Protocol):
    def info(self, message: str) -> None:
        """One line (``tfcluster: MESSAGE``); outside bytes in it are shown bounded and escaped."""

    def error(self, message: str) -> None:
        """One line (``tfcluster: error: MESSAGE``)."""

    def block(self, lines: list[str]) -> None:
        """A few lines as they are (each escaped)."""

    def countdown(self, text: Callable[[], str]) -> ContextManager[None]:
        """While the block runs, ``text()`` redrawn as one line where a terminal shows it; elsewhere nothing."""


class PlainNotices:
    """``Notices`` as plain lines on a stream (stderr by default), the way the console writes them
    when no terminal is there; a write that fails is dropped (a notice never stops a run)."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream

    def info(self, message: str) -> None:
        self._write(f"tfcluster: {one_line(message)}")

    def error(self, message: str) -> None:
        self._write(f"tfcluster: error: {one_line(message)}")

    def block(self, lines: list[str]) -> None:
        self._write("\n".join(escape(line) for line in lines))

    def countdown(self, text: Callable[[], str]) -> ContextManager[None]:
        return contextlib.nullcontext()

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        try:
            stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
