"""Where the tasks' output goes: what a backend's reader thread hands on (a task's, or a promoted
standby's), in two kinds (launcher/backends/channel.py decodes them apart):

* a line the task printed (``line``): its tail and a sign of life in the task group, the view and
  its log (which hands it to the record's line listeners: the console), byte for byte whatever it
  holds: nothing the task prints steers the supervisor. Where the spec opts in
  (``watchdog.printed_progress``), a printed line that is a progress record (``progress.parse``;
  never a beat or the standby protocol) is also taken as one.
* a line of its control channel (``control``): a beat or a line of its stacks (the task group
  keeps them), or a record: a progress record or the standby protocol, into the view and the
  task's progress file (the record's, which hands it to its progress listeners: the console shows
  people, not the protocol).

``TaskOutput`` is a part of the supervisor (loop.py), given the run's context and the task group;
the tasks' starts (starts.py) and the standbys (standby.py) hand its ``sink`` to the backend. It
never raises: a reader that stopped would leave the task blocked writing to a full pipe. A fault
handling one line is recorded against its task (an ``output_fault`` event, the first few, which
the console says) and the run goes on."""

from __future__ import annotations

import time
from typing import Callable, Optional

from launcher.backends.base import OutputSink
from launcher.contract.progress import CHANNEL_ONLY, parse
from launcher.errors import exc_text
from launcher.record import events as ev
from launcher.supervise.context import RunContext
from launcher.supervise.group import RECORD, AttemptGroup

FAULTS_RECORDED = 5  # output_fault events per task at most (each is one line's loss)

Handler = Callable[[str, str], None]


class TaskOutput:
    def __init__(self, ctx: RunContext, group: AttemptGroup) -> None:
        self.ctx, self.group = ctx, group
        self._faults: dict[str, int] = {}

    def sink(self, line: Optional[Handler] = None, control: Optional[Handler] = None) -> OutputSink:
        """The sink a backend's reader gets (``line``, ``control``: other ways for them, a
        standby's own); it never raises."""
        return OutputSink(lambda key, text: self._guard(key, text, line or self.line, "output"),
                          lambda key, text: self._guard(key, text, control or self.control, "control"))

    def _guard(self, key: str, text: str, handle: Handler, what: str) -> None:
        try:
            handle(key, text)
        except Exception as exc:  # noqa: BLE001
            self._fault(key, what, exc)

    def _fault(self, key: str, what: str, exc: Exception) -> None:
        """A line of ``key``'s could not be handled: recorded against it (the first few)."""
        n = self._faults[key] = self._faults.get(key, 0) + 1
        if n > FAULTS_RECORDED:
            return
        try:
            self.ctx.record.write(ev.OutputFault(task=key, what=what, error=exc_text(exc)[:300], first=n == 1))
        except Exception:  # noqa: BLE001 - (a full disk, a closed terminal: the reader goes on)
            pass

    def line(self, key: str, line: str) -> None:
        """One line ``key`` printed: into its tail, the view and its log (and so to the console), as it is."""
        self.group.line(key, line)
        self.ctx.view.line(key, line, time.time())
        self.ctx.record.log_line(key, line)  # (and to the console, a listener on the record's lines)
        if self.ctx.watchdog.printed_progress:  # the spec trusts what its tasks print to be their progress
            p = parse(line)
            if p is not None and p.kind not in CHANNEL_ONLY:
                self.control(key, line.strip())

    def control(self, key: str, line: str) -> None:
        """One line of ``key``'s control channel: a beat and stacks to the task group, a record
        also to the view and its progress file (and so to the console)."""
        if self.group.control(key, line) != RECORD:
            return
        self.ctx.view.progress(key, line, time.time())
        self.ctx.record.progress_line(key, line)  # (and to the console, a listener on the record's progress)
