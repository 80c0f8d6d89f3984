"""What a backend (or any layer below the terminal) may say to the person running a command.

A backend reports a few one-line notices (an image pulled, a state dir chosen, leftover tasks
stopped), an error it recovered from, a short block (a failed build's last lines) and a wait's
countdown. It says them through this narrow sink, never through the terminal's console: the
CLI and the use cases hand it their ``launcher.ui.console.Console``, which has these four
methods; a backend built without one (a test, a helper) gets ``PlainNotices``, the same lines on
stderr without colour or panel.

What many hosts found alike is said once (``fold_hosts``: 64 hosts without a GPU are one line),
and a wait over many hosts shows how far it got on a terminal only (``Tally`` in a ``countdown``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable, ContextManager, Optional, Protocol, Sequence, TextIO

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


# -------------------------------------------------------------- many hosts, one line

@dataclass(frozen=True)
class HostNote:
    """What a host's check found, to be said once for every host that found the same: ``alone``
    is the line for this host by itself; ``many`` the line for several, ``{hosts}`` standing for
    "N hosts (h1…hN)" (notes with the same ``many`` are one line)."""

    host: str
    alone: str
    many: str


def fold_hosts(notes: Sequence[HostNote]) -> list[str]:
    """One line per distinct ``many`` of two hosts or more, in the order each first came; a note
    that no other host shares keeps its own line. 64 hosts without a GPU are one line, not 64."""
    groups: dict[str, list[HostNote]] = {}
    for note in notes:
        groups.setdefault(note.many, []).append(note)
    out = []
    for many, same in groups.items():
        hosts = list(dict.fromkeys(n.host for n in same))
        out.append(same[0].alone if len(hosts) == 1 else many.replace("{hosts}", f"{len(hosts)} hosts ({host_list(hosts)})"))
    return out


_NUMBERED = re.compile(r"(.*?)(\d+)")


def _natural(name: str) -> list:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def host_list(names: Sequence[str], most: int = 6) -> str:
    """Host names short, in natural order: a run of numbered names with one stem as its ends
    (``h1…h64``), at most ``most`` parts, then how many more."""
    names = sorted(dict.fromkeys(names), key=_natural)
    parts: list[str] = []
    run: list[tuple[str, int, str]] = []  # (stem, number, name) of the run being read

    def close() -> None:
        if len(run) >= 3:
            parts.append(f"{run[0][2]}…{run[-1][2]}")
        else:
            parts.extend(r[2] for r in run)
        run.clear()

    for name in names:
        m = _NUMBERED.fullmatch(name)
        item = (m.group(1), int(m.group(2)), name) if m and not m.group(2).startswith("0") else None
        if item is not None and run and item[0] == run[-1][0] and item[1] == run[-1][1] + 1:
            run.append(item)
            continue
        close()
        if item is not None:
            run.append(item)
        else:
            parts.append(name)
    close()
    if len(parts) > most:
        return ", ".join(parts[:most]) + f" and {len(parts) - most} more"
    return ", ".join(parts)


class Tally:
    """What a wait over many hosts has done so far, as ``Notices.countdown`` shows it on a terminal
    (``probing hosts 37/64``); ``one`` from any thread."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.total, self.done = what, total, 0
        self._lock = threading.Lock()

    def one(self) -> None:
        with self._lock:
            self.done += 1

    def next(self, what: str) -> None:
        """The wait's next phase over the same hosts, counted from 0."""
        with self._lock:
            self.what, self.done = what, 0

    def text(self) -> str:
        return f"{self.what} {self.done}/{self.total}"
