"""The terminal side of a run: task lines with ``[type:index]`` prefixes, launcher messages.

Reader threads of every task write here concurrently; one lock keeps lines whole.
"""

from __future__ import annotations

import sys
import threading
from typing import Optional, TextIO

_COLORS = ("36", "33", "35", "32", "34", "31")


class Console:
    def __init__(self, out: Optional[TextIO] = None, err: Optional[TextIO] = None, color: Optional[bool] = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.color = self.out.isatty() if color is None else color
        self._lock = threading.Lock()
        self._palette: dict[str, str] = {}
        self.quiet_tasks = False

    def task_line(self, key: str, line: str) -> None:
        if self.quiet_tasks:
            return
        prefix = f"[{key}]"
        if self.color:
            code = self._palette.setdefault(key, _COLORS[len(self._palette) % len(_COLORS)])
            prefix = f"\033[{code}m{prefix}\033[0m"
        with self._lock:
            self.out.write(f"{prefix} {line}\n")
            self.out.flush()

    def info(self, message: str) -> None:
        with self._lock:
            self.err.write(f"tfcluster: {message}\n")
            self.err.flush()

    def error(self, message: str) -> None:
        with self._lock:
            self.err.write(f"tfcluster: error: {message}\n")
            self.err.flush()

    def block(self, lines: list[str]) -> None:
        with self._lock:
            for line in lines:
                self.err.write(line + "\n")
            self.err.flush()
