"""Where the tasks' output goes: every line a backend's reader thread reads (a task's, or a
promoted standby's) into the task group (beats, stacks, save marks, the last lines), the view,
and the task's log (which hands it to the record's line listeners: the console). ``TaskOutput`` is
a part of the supervisor (loop.py), given the run's context and the task group; the tasks' starts (starts.py) and the standbys (standby.py)
hand its ``drain`` to the backend as the line sink."""

from __future__ import annotations

import time
from typing import Callable, Optional

from launcher.errors import exc_text
from launcher.record import events as ev
from launcher.supervise.context import RunContext
from launcher.supervise.group import BEAT, STACK, AttemptGroup


class TaskOutput:
    def __init__(self, ctx: RunContext, group: AttemptGroup) -> None:
        self.ctx, self.group = ctx, group
        self._sink_failed: set[str] = set()

    def drain(self, key: str, line: str, sink: Optional[Callable[[str, str], None]] = None) -> None:
        """The sink every backend's output reader calls (``sink``: another way for the line,
        a standby's own). It never raises: a reader that stopped would leave the task blocked
        writing to a full pipe (a full disk, a closed terminal)."""
        try:
            (sink or self.line)(key, line)
        except Exception as exc:  # noqa: BLE001
            if key not in self._sink_failed:
                self._sink_failed.add(key)
                try:
                    self.ctx.record.write(ev.OutputLost(task=key, why=exc_text(exc)))
                except Exception:  # noqa: BLE001
                    pass

    def line(self, key: str, line: str) -> None:
        """One line of ``key``'s: progress, stacks asked for, or output to log and show."""
        kind = self.group.line(key, line)
        if kind == BEAT:
            return  # progress, not output
        record = self.ctx.record
        if kind == STACK:  # asked for by the hang watchdog: into the log and the record, not on the console
            record.log_line(key, line, console=False)  # (nor into output.log, which `attach` shows)
            return
        line = self.group.task_text(line)
        self.ctx.view.line(key, line, time.time())
        record.log_line(key, line)  # (and to the console, a listener on the record's lines)
