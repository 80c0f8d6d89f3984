"""A task's stacks as faulthandler writes them (the stacks' signal: launcher/contract/liveness.py;
the record's stacks files, launcher/record/layout.py's ``stacks_path``), parsed: its threads, each
thread's frames innermost first, each frame's kind (tfcluster's own, TensorFlow's, a library's or
the user's) and the user frame a thread sits in. Pure. launcher/supervise/stuck.py decides from them
which task stopped the group; a hang's report (launcher/ui/failurelines.py) shows them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')
# Frames of TensorFlow's own execution (and of Keras, which drives it): a thread whose innermost
# non-library frame is one of these waits inside TensorFlow.
_TF = re.compile(r"/(site|dist)-packages/(tensorflow|keras|tf_keras|tensorflow_datasets|tsl|xla|jax|absl)/")
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d+(\.\d+)?/")
# tfcluster's own code beside the task: the stub (<string>), its liveness, the reference worker's helpers.
_OURS = re.compile(r"^<[^>]*>$|/launcher/(contract|remote)/")


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


def kind(frame: Frame) -> str:
    """``ours`` (tfcluster's stub), ``tf`` (TensorFlow, Keras), ``library`` (the standard library,
    another installed package) or ``user``."""
    if _OURS.search(frame.file):
        return "ours"
    if _TF.search(frame.file):
        return "tf"
    if _LIBRARY.search(frame.file):
        return "library"
    return "user"


def in_user_code(thread: Thread) -> Optional[Frame]:
    """The user frame a thread sits in, or None: from its innermost frame outwards, libraries are
    passed over; the first other frame decides (user code, or TensorFlow/tfcluster: waiting)."""
    for frame in thread.frames:
        k = kind(frame)
        if k == "library":
            continue
        return frame if k == "user" else None
    return None


