"""Feeding a ``RunModel`` (launcher/record/view.py) from a run's record on disk, as the supervisor fed
it live: ``tfcluster status`` replays what is there, ``tfcluster attach`` goes on following.

The record holds the run's events (``events.jsonl``) and each task's output and progress
records (``logs/``: its log and its progress file), but not how they interleaved. Each ``start``
event carries ``log_offset`` and ``progress_offset``, the sizes of the task's two files when it
started, so a task's lines before those offsets are fed before its ``start`` and the lines after
them after. Between attempts (after its exit, a stop or a group restart, and before
its first start) a task's new lines wait for its next ``start`` (or the outcome), so a restarted
process's first lines never count for the attempt before. Lines a warm standby printed while it
waited (``(standby) ...``) are not the task's: the live view never saw them either.

Snapshots (``snapshot.json``, record/layout.py): the supervisor keeps a feed of its own record
(``SnapshotWriter``) and writes its state now and then and at the end: the view (``RunModel.to_json``)
and where the feed stands (the bytes of ``events.jsonl`` and of each task's log and progress file
it applied, which tasks wait for their next start). ``RecordFeed.resume`` starts from the last snapshot, so a replay
reads only what came after it; a record without one (written before, or a snapshot that does
not fit the record) is replayed from its start. Either way the view is the one a replay from
the start gives (tests/unit/record/test_record_feed.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from launcher.safefile import open_regular
from launcher.safefile import file_mode_in, write_whole
from launcher.record import events as ev
from launcher.record.eventbase import RecordEvent, fields_conform
from launcher.record.layout import EVENTS_FILE, SNAPSHOT_FILE, log_path, progress_path
from launcher.errors import exc_text
from launcher.record.reader import FILE_BYTES, RecordDamaged, loads_strict, log_chunks, parse_events, read_bounded  # noqa: F401 (RecordDamaged re-exported)
from launcher.record.view import RunModel

SNAPSHOT_VERSION = 5  # 5: the progress files' offsets (4: the final report's rows); an older snapshot is replayed past
SNAPSHOT_EVERY = 30.0  # seconds between the supervisor's snapshots: a replay reads at most this much output
STANDBY_PREFIX = "(standby) "
CHUNK = 4 << 20  # bytes of a log read at a time: a replay's memory does not grow with the log
LINE_BYTES = 1 << 20  # a log line longer (a task that printed 100 MB without a newline) is fed in pieces
# What a damaged record's values of the wrong kind raise in the code that reads them.
DAMAGE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)
_BETWEEN = (ev.Exit, ev.Stopped, ev.Failure, ev.TaskRestart)  # after these, a task's next lines wait


class RecordFeed:
    """Feeds ``view`` from ``run_dir``: each ``poll()`` applies what was appended since the last.

    The first poll replays the record; lines it replays are stamped with their log's
    modification time (when the last of them arrived), later ones with ``clock()``."""

    def __init__(self, run_dir: Path, view: RunModel, clock: Callable[[], float] = time.time) -> None:
        self.run_dir = run_dir
        self.view = view
        self.clock = clock
        self._events_at = 0  # bytes of events.jsonl applied
        self._events_read = 0  # lines of it applied (to name a damaged one)
        self._fed: dict[str, int] = {}  # task -> bytes of its log fed
        self._fed_progress: dict[str, int] = {}  # task -> bytes of its progress file fed
        self._waiting: set[str] = set()  # tasks between attempts: their lines wait
        self._ended = False
        self._replayed = False
        # Called with each event after the view applied it (``attach`` says the new ones, as the
        # supervisor's console said them: launcher/ui/eventlines.py).
        self.listeners: list[Callable[[RecordEvent], None]] = []

    @classmethod
    def resume(cls, run_dir: Path, view: Optional[RunModel] = None, clock: Callable[[], float] = time.time,
               snapshot: bool = True) -> "RecordFeed":
        """A feed of ``run_dir`` that starts where the record's last snapshot ends (its ``view``
        is the snapshot's), or at the record's start without one (or with ``snapshot`` false)."""
        state = read_snapshot(run_dir) if snapshot else None
        if state is None:
            return cls(run_dir, view if view is not None else RunModel(), clock)
        feed = cls(run_dir, RunModel.from_json(state["view"]), clock)
        feed._events_at, feed._events_read = state["events_at"], state["events_read"]
        feed._fed = dict(state["fed"])
        feed._fed_progress = dict(state["fed_progress"])
        feed._waiting = set(state["waiting"])
        feed._ended = state["ended"]
        return feed  # (the lines after it are stamped as a first replay stamps them)

    def to_json(self) -> dict[str, Any]:
        """Where the feed stands and its view, as ``snapshot.json`` holds them."""
        return {"version": SNAPSHOT_VERSION, "events_at": self._events_at, "events_read": self._events_read,
                "fed": dict(self._fed), "fed_progress": dict(self._fed_progress), "waiting": sorted(self._waiting), "ended": self._ended,
                "view": self.view.to_json()}

    @property
    def ended(self) -> bool:
        """The run's outcome has been applied (and every line before it)."""
        return self._ended

    def poll(self) -> int:
        """Apply the events and lines appended since the last poll; how many events that was.
        RecordDamaged, one line, for a record whose files hold what tfcluster never writes."""
        try:
            return self._poll()
        except DAMAGE as exc:
            raise RecordDamaged(f"run record damaged: {self.run_dir} holds an event tfcluster cannot read "
                                f"({exc_text(exc)}); move it away (or delete the run) to read the others") from None

    def _poll(self) -> int:
        events = self._new_events()
        for key in self._keys(events):
            if key not in self._fed:
                self._fed[key] = 0
                self._waiting.add(key)
        for i, event in enumerate(events):
            key = getattr(event, "task", None)  # (the kinds about one task have a task field)
            later = events[i + 1:]
            if isinstance(event, ev.Start):
                if event.log_offset is not None:  # (the last attempt's late lines too: before its start)
                    self._feed(event.task, event, waiting_too=True)
                self._waiting.discard(event.task)
            elif key in self._fed:
                self._feed(key, _next_start(later, key), waiting_too=False)
                if isinstance(event, _BETWEEN):
                    self._waiting.add(key)
            elif isinstance(event, ev.GroupRestart):
                for k in self._fed:
                    self._feed(k, _next_start(later, k), waiting_too=False)
                self._waiting.update(self._fed)
            elif isinstance(event, ev.RunOutcome):
                for k in self._fed:
                    self._feed(k, _next_start(later, k), waiting_too=True)
                self._ended = True
            self.view.event(event)
            for listener in list(self.listeners):
                listener(event)
        for key in self._fed:
            self._feed(key, None, waiting_too=self._ended)
        self._replayed = True
        return len(events)

    # -------------------------------------------------------------- internals

    def _keys(self, events: list[RecordEvent]) -> list[str]:
        keys = list(self.view.tasks)
        for e in events:
            keys += e.tasks if isinstance(e, ev.RunStart) else []
            task = getattr(e, "task", None)
            if task:
                keys.append(task)
        return list(dict.fromkeys(k for k in keys if isinstance(k, str)))

    def _new_events(self) -> list[RecordEvent]:
        path = self.run_dir / EVENTS_FILE
        try:
            with open_regular(path, follow=False) as fh:  # (not a FIFO, nor a link out of the run dir)
                # (the size first: a file past the bound is named without reading it into memory)
                grown = os.fstat(fh.fileno()).st_size - self._events_at
                if grown <= FILE_BYTES:
                    fh.seek(self._events_at)
                    data = fh.read(FILE_BYTES + 1)
            if grown > FILE_BYTES or len(data) > FILE_BYTES:
                how = "grew by" if self._events_at else "is"
                raise RecordDamaged(f"run record damaged: {path} {how} more than {FILE_BYTES:,} bytes, far more "
                                    "than tfcluster writes there; move it away (or delete the run) to read the others")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RecordDamaged(f"cannot read {path}: {exc.strerror or exc}") from None
        complete = data[: data.rfind(b"\n") + 1]  # a torn last line (a crash mid-append) waits
        self._events_at += len(complete)
        lines = complete.decode("utf-8", "replace").split("\n")[:-1]
        out = parse_events(lines, path, first=self._events_read + 1)
        self._events_read += len(lines)
        return out

    def _feed(self, key: str, until: Optional[ev.Start], waiting_too: bool = False) -> None:
        """Feed ``key``'s complete log lines and progress records up to where its start ``until``
        began (None: all there are), unless it is between attempts (and not ``waiting_too``)."""
        if key in self._waiting and not waiting_too:
            return
        self._feed_file(key, until.log_offset if until is not None else None, self._fed, log_path, self.view.lines)
        if until is not None and until.progress_offset is None:
            return  # (a record of a tfcluster that kept no progress file)
        self._feed_file(key, until.progress_offset if until is not None else None, self._fed_progress,
                        progress_path, self.view.progress_lines)

    def _feed_file(self, key: str, upto: Optional[int], fed: dict[str, int], path_of, apply) -> None:
        """Feed ``key``'s complete lines of one of its files (``path_of``), from where ``fed`` says up
        to byte ``upto`` (None: all there are), to ``apply``."""
        start = fed.get(key, 0)
        if upto is not None and upto <= start:
            return
        path = path_of(self.run_dir, key)
        try:
            fh = open_regular(path, follow=False)
        except OSError:  # (missing, or not a regular file of the run dir: nothing of it is read)
            return
        with fh:
            stamp = os.fstat(fh.fileno()).st_mtime
            now = min(stamp, self.clock()) if not self._replayed else self.clock()
            try:
                for piece in log_chunks(fh, start, upto, LINE_BYTES, CHUNK):
                    if not (piece.lines or piece.long):
                        continue  # (a range's last line without its newline: tfcluster writes none)
                    start += len(piece.lines) + len(piece.long)
                    fed[key] = start
                    long = b"".join(piece.long[i:i + LINE_BYTES] + b"\n" for i in range(0, len(piece.long), LINE_BYTES))
                    lines = (piece.lines + long).decode("utf-8", "replace").split("\n")[:-1]
                    apply(key, [line for line in lines if not line.startswith(STANDBY_PREFIX)], now)
            except OSError:
                return


def _next_start(events: list[RecordEvent], key: str) -> Optional[ev.Start]:
    """The start of ``key``'s next attempt (where it begins in its files), if one of ``events`` is it."""
    for e in events:
        if isinstance(e, ev.Start) and e.task == key and e.log_offset is not None:
            return e
    return None


def replay(run_dir: Path, snapshot: bool = True) -> RunModel:
    """The view of the run as its record says now (from its last snapshot on, unless ``snapshot``
    is false: the same view, from the record's start)."""
    feed = RecordFeed.resume(run_dir, snapshot=snapshot)
    feed.poll()
    return feed.view


# ------------------------------------------------------------------ snapshots


def write_snapshot(run_dir: Path, feed: RecordFeed) -> None:
    """Write ``feed``'s state as the record's snapshot, atomically (a reader sees the last whole one)."""
    write_whole(run_dir / SNAPSHOT_FILE, json.dumps(feed.to_json(), separators=(",", ":")), file_mode_in(run_dir))


def read_snapshot(run_dir: Path) -> Optional[dict[str, Any]]:
    """The record's snapshot, if it has one that fits it: a version this reads, and offsets
    that end lines of ``events.jsonl`` and of each task log as they are now. None otherwise
    (a replay then starts at the record's start: a snapshot only saves time)."""
    try:
        state = loads_strict(read_bounded(run_dir / SNAPSHOT_FILE).decode("utf-8", "replace"))
        if not isinstance(state, dict) or state.get("version") != SNAPSHOT_VERSION:
            return None
        ends = {run_dir / EVENTS_FILE: state["events_at"]}
        ends.update({log_path(run_dir, key): at for key, at in state["fed"].items()})
        ends.update({progress_path(run_dir, key): at for key, at in state["fed_progress"].items()})
        for path, at in ends.items():
            if not isinstance(at, int) or at < 0:
                return None
            if at and not _ends_a_line(path, at):
                return None
        if not (isinstance(state["events_read"], int) and isinstance(state["waiting"], list)
                and isinstance(state["ended"], bool) and isinstance(state["view"], dict)):
            return None
        view = RunModel.from_json(state["view"])  # (one that does not read back is not used)
        if any(fields_conform(x) is not None for x in (view, view.run, *view.tasks.values())):
            return None
        return state
    except (OSError, RecordDamaged) + DAMAGE:
        return None


def _ends_a_line(path: Path, at: int) -> bool:
    with open_regular(path, follow=False) as fh:
        fh.seek(at - 1)
        return fh.read(1) == b"\n"


class SnapshotWriter:
    """The supervisor's side: a feed of its own record, polled and written as ``snapshot.json``
    every ``every`` seconds on a thread of its own, and once more at ``close`` (after the
    outcome). A failure to read or write only ends the snapshots (the last one written still
    fits the record); the run goes on."""

    def __init__(self, run_dir: Path, every: float = SNAPSHOT_EVERY) -> None:
        self.run_dir = run_dir
        self.every = every
        self.feed = RecordFeed(run_dir, RunModel())
        self.problem = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tfcluster-snapshot", daemon=True)

    def start(self) -> "SnapshotWriter":
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop, and write the last snapshot: everything the record holds now."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.write()

    def write(self) -> None:
        if self.problem:
            return
        try:
            self.feed.poll()
            write_snapshot(self.run_dir, self.feed)
        except (OSError, RecordDamaged) as exc:
            self.problem = str(exc)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.write()
