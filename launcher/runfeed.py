"""Feeding a ``RunView`` (launcher/runview.py) from a run's record on disk, as the supervisor fed
it live: ``tfcluster status`` replays what is there, ``tfcluster attach`` goes on following.

The record holds the run's events (``events.jsonl``) and each task's output (``logs/``), but
not how the two interleaved. Each ``start`` event carries ``log_offset``, the size of the task's
log when it started, so a task's lines before that offset are fed before its ``start`` and the
lines after it after. Between attempts (after its exit, a stop or a group restart, and before
its first start) a task's new lines wait for its next ``start`` (or the outcome), so a restarted
process's first lines never count for the attempt before. Lines a warm standby printed while it
waited (``(standby) ...``) are not the task's: the live view never saw them either.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

from .record.events import Event
from .record.layout import EVENTS_FILE, log_path
from .rundir import RecordDamaged, parse_events  # noqa: F401 (RecordDamaged re-exported)
from .runview import RunView

STANDBY_PREFIX = "(standby) "
CHUNK = 4 << 20  # bytes of a log read at a time: a replay's memory does not grow with the log
_BETWEEN = (Event.EXIT, Event.STOPPED, Event.FAILURE, Event.TASK_RESTART)  # after these, a task's next lines wait


class RecordFeed:
    """Feeds ``view`` from ``run_dir``: each ``poll()`` applies what was appended since the last.

    The first poll replays the record; lines it replays are stamped with their log's
    modification time (when the last of them arrived), later ones with ``clock()``."""

    def __init__(self, run_dir: Path, view: RunView, clock: Callable[[], float] = time.time) -> None:
        self.run_dir = run_dir
        self.view = view
        self.clock = clock
        self._events_at = 0  # bytes of events.jsonl applied
        self._events_read = 0  # lines of it applied (to name a damaged one)
        self._fed: dict[str, int] = {}  # task -> bytes of its log fed
        self._waiting: set[str] = set()  # tasks between attempts: their lines wait
        self._ended = False
        self._replayed = False

    @property
    def ended(self) -> bool:
        """The run's outcome has been applied (and every line before it)."""
        return self._ended

    def poll(self) -> int:
        """Apply the events and lines appended since the last poll; how many events that was."""
        events = self._new_events()
        for key in self._keys(events):
            if key not in self._fed:
                self._fed[key] = 0
                self._waiting.add(key)
        for i, event in enumerate(events):
            kind, key = event.get("event"), event.get("task")
            later = events[i + 1:]
            if kind == Event.START and key:
                offset = event.get("log_offset")
                if isinstance(offset, int):
                    self._feed(key, offset)
                self._waiting.discard(key)
            elif key in self._fed:
                self._feed(key, _next_start(later, key), waiting_too=False)
                if kind in _BETWEEN:
                    self._waiting.add(key)
            elif kind == "restart":
                for k in self._fed:
                    self._feed(k, _next_start(later, k), waiting_too=False)
                self._waiting.update(self._fed)
            elif kind == Event.OUTCOME:
                for k in self._fed:
                    self._feed(k, _next_start(later, k), waiting_too=True)
                self._ended = True
            self.view.event(event)
        for key in self._fed:
            self._feed(key, None, waiting_too=self._ended)
        self._replayed = True
        return len(events)

    # -------------------------------------------------------------- internals

    def _keys(self, events: list[dict]) -> list[str]:
        keys = list(self.view.tasks)
        for e in events:
            keys += list(e.get("tasks") or ()) if e.get("event") == Event.RUN_START else []
            if e.get("task"):
                keys.append(e["task"])
        return list(dict.fromkeys(k for k in keys if isinstance(k, str)))

    def _new_events(self) -> list[dict]:
        path = self.run_dir / EVENTS_FILE
        try:
            with open(path, "rb") as fh:
                fh.seek(self._events_at)
                data = fh.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line (a crash mid-append) waits
        self._events_at += len(complete)
        lines = complete.decode("utf-8", "replace").split("\n")[:-1]
        out = parse_events(lines, path, first=self._events_read + 1)
        self._events_read += len(lines)
        return out

    def _feed(self, key: str, upto: Optional[int], waiting_too: bool = False) -> None:
        """Feed ``key``'s complete log lines up to byte ``upto`` (None: all there are), unless it
        is between attempts (and not ``waiting_too``)."""
        if key in self._waiting and not waiting_too:
            return
        start = self._fed.get(key, 0)
        if upto is not None and upto <= start:
            return
        path = log_path(self.run_dir, key)
        try:
            fh = open(path, "rb")
        except OSError:
            return
        with fh:
            stamp = os.fstat(fh.fileno()).st_mtime
            now = min(stamp, self.clock()) if not self._replayed else self.clock()
            fh.seek(start)
            left = None if upto is None else upto - start
            carry = b""  # the start of a line the last chunk cut
            while left is None or left > 0:
                try:
                    data = fh.read(CHUNK if left is None else min(CHUNK, left))
                except OSError:
                    return
                if not data:
                    return
                if left is not None:
                    left -= len(data)
                data = carry + data
                cut = data.rfind(b"\n") + 1
                complete, carry = data[:cut], data[cut:]
                if complete:
                    start += len(complete)
                    self._fed[key] = start
                    lines = complete.decode("utf-8", "replace").split("\n")[:-1]
                    self.view.lines(key, [line for line in lines if not line.startswith(STANDBY_PREFIX)], now)


def _next_start(events: list[dict], key: str) -> Optional[int]:
    """Where ``key``'s next attempt begins in its log, if one of ``events`` starts it."""
    for e in events:
        if e.get("event") == Event.START and e.get("task") == key and isinstance(e.get("log_offset"), int):
            return e["log_offset"]
    return None


def replay(run_dir: Path) -> RunView:
    """The view of the run as its record says now."""
    view = RunView()
    RecordFeed(run_dir, view).poll()
    return view
