"""faulthandler's text of a task's stacks (launcher/contract/liveness.py) read into threads and
frames, pure: what launcher/supervise/stuck.py and tfplace.py decide from."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} in {self.func}()"


@dataclass(frozen=True)
class Thread:
    ident: str
    frames: tuple[Frame, ...]  # innermost first, as faulthandler prints them


def parse(text: str) -> list[Thread]:
    """Every thread in faulthandler's text (its ``Thread 0x...``/``Current thread 0x...`` blocks),
    once (a signal that reached a task twice, through its wrapper and its group, dumps twice: the
    first is kept); any other line is passed over."""
    seen: dict[str, Thread] = {}
    for thread in _threads(text):
        seen.setdefault(thread.ident, thread)
    return list(seen.values())


def _threads(text: str) -> list[Thread]:
    threads: list[Thread] = []
    ident, frames = None, []
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head:
            if ident is not None:
                threads.append(Thread(ident, tuple(frames)))
            ident, frames = head.group(2), []
            continue
        frame = _FRAME.match(line)
        if frame and ident is not None:
            frames.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
    if ident is not None:
        threads.append(Thread(ident, tuple(frames)))
    return threads


def is_stack_line(line: str) -> bool:
    """A line of faulthandler's text (a thread's header, a frame, its ``<no Python frame>``)."""
    return bool(_HEADER.match(line) or _FRAME.match(line)) or line.strip() == "<no Python frame>"
