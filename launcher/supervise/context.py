"""What every part of the supervisor reads, as one small frozen value: ``Supervisor`` (loop.py)
builds it once and hands it to each part (output.py, starts.py, phases.py, prewarm.py, outcome.py,
standby.py) beside the few collaborators that part uses. Each field is shared, none is a way back
into the supervisor: the parts act on the record, the backend and the task group, and tell the
supervisor what happened through what they return. What a person reads of the run is the record's
events and task lines, said by the console the app made a listener on the record (app/up.py): no
part holds a console."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from launcher.backends.base import Backend
from launcher.record.view import RunModel
from launcher.record.writer import RunRecord
from launcher.spec.model import Restart, Watchdog


@dataclass(frozen=True)
class RunContext:
    """One run's shared readings: where it writes (``record``; ``view``: the run as the live panel
    and final report show it, fed by the record's events), its settings (``restart``, ``watchdog``), its
    ``backend``, its ``clock``, how often an attempt is polled (``poll_interval``), and the events a
    stop sets (``stop_event``: stop gracefully; ``hurry_event``: a second Ctrl-C, kill at once)."""

    record: RunRecord
    view: RunModel
    backend: Backend
    restart: Restart
    watchdog: Watchdog
    clock: Callable[[], float]
    poll_interval: float
    stop_event: threading.Event
    hurry_event: threading.Event
