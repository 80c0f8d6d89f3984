"""The worker's output outlives its reader.

A host that shuts down (a Spot preemption's ACPI soft off) sends SIGTERM to every process at
once: the task's SSH session ends with it, and the pipe the task writes its lines to has no
reader any more. That SIGTERM is also the one the workers agree to save on (preemption.py), so
the task must go on to that save: a ``print`` that raised ``BrokenPipeError`` (the SIGTERM
handler's own line first) would end it mid-step, and its peers' agreed save with it. Once a
write finds the pipe closed, this process's descriptor is pointed at /dev/null (TensorFlow's own
C++ logging included) and the lines are dropped: nobody can read them. The exit code stays the
task's own (Python exits 120 when it cannot flush stdout at exit).
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def _to_devnull(stream: TextIO) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, stream.fileno())
    finally:
        os.close(null)


class Outliving:
    """A text stream whose writes never raise ``BrokenPipeError`` (see the module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _to_devnull(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_devnull(self._stream)
            self._stream.flush()  # what the buffer held goes to /dev/null now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def outlive_reader() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` outlive their reader (once per process)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, Outliving):
            setattr(sys, name, Outliving(stream))
