"""Warm standby (restart.warm_standby): the next attempt's processes, started once the current
attempt is ready, import TensorFlow and wait for SIGUSR1; a restart promotes them instead of
starting cold. Their output is marked ``(standby)`` until they are promoted."""

from __future__ import annotations

import signal
from typing import Callable, Optional, Sequence

from . import envnames
from .backends.base import Backend, TaskHandle
from .console import Console
from .plan import PlannedTask
from .record.events import Event
from .record.writer import RunRecord

# A standby blocks SIGUSR1 as its first act; one younger than this may not have yet.
MIN_AGE = 2.0


class WarmStandby:
    def __init__(self, backend: Backend, record: RunRecord, console: Console, clock: Callable[[], float],
                 on_line: Callable[[str, str], None],
                 drain_line: Callable[[str, str, Optional[Callable[[str, str], None]]], None]) -> None:
        """``on_line``: what a promoted standby's lines go to (the supervisor's sink);
        ``drain_line(key, line, sink)``: the never-raising wrapper every output reader calls."""
        self.backend = backend
        self.record = record
        self.console = console
        self.clock = clock
        self.on_line = on_line
        self.drain_line = drain_line
        self._handles: dict[str, TaskHandle] = {}
        self._active: dict[str, list] = {}  # key -> [promoted?], read by its output sink
        self._at = 0.0

    def start(self, number: int, tasks: Sequence[PlannedTask], env: dict[str, str]) -> None:
        """Start attempt ``number``'s processes now; they import TensorFlow and wait for SIGUSR1."""
        if self._handles:
            return
        self._at = self.clock()
        for task in tasks:
            active = [False]

            def sink(key: str, line: str, active=active) -> None:
                if active[0]:
                    self.on_line(key, line)
                else:
                    self.record.log_line(key, f"(standby) {line}")
                    self.console.task_line(key, f"(standby) {line}")

            handle = self.backend.start(task, {**env, envnames.STANDBY: "1"},
                                        lambda key, line, sink=sink: self.drain_line(key, line, sink))
            self._handles[task.key] = handle
            self._active[task.key] = active
        self.record.event(Event.STANDBY_START, attempt=number,
                          pids={k: h.info().get("pid") for k, h in self._handles.items()})

    def promote(self, key: str) -> Optional[TaskHandle]:
        """Hand over the waiting standby for ``key``, or None (none, dead, or too young to have
        blocked SIGUSR1 yet: then it is stopped and a fresh process starts instead)."""
        handle = self._handles.pop(key, None)
        active = self._active.pop(key, None)
        if handle is None:
            return None
        if handle.poll() is not None or self.clock() - self._at < MIN_AGE:
            self.backend.stop([handle], grace=0)
            return None
        active[0] = True
        handle.signal(signal.SIGUSR1)
        self.record.event(Event.STANDBY_PROMOTED, task=key, **handle.info())
        return handle

    def drop(self) -> None:
        """Stop every standby not promoted (the run ends)."""
        if self._handles:
            self.backend.stop(list(self._handles.values()), grace=0)
            self.record.event(Event.STANDBY_STOPPED, tasks=list(self._handles))
            self._handles.clear()
            self._active.clear()
