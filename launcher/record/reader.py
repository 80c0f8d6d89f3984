"""Reading a run record: the one reader of its files (events.jsonl, plan.json, launcher.json,
a backend's ``<backend>.json``) and of where its runs are (``latest``, the run ids under a
name's folder). A file that cannot be read as what it should be is ``RecordDamaged``, named in
one line, never a traceback.

What the files say about a run is built above this module: record/feed.py replays them into
the run's ``RunModel`` (record/view.py), record/status.py adds what ``status`` and ``runs``
show. The record is written by record/writer.py.
"""

from __future__ import annotations

import json
import re
import os
from pathlib import Path
from typing import IO, Any, Iterator, NamedTuple, Optional

from launcher.safefile import open_regular
from launcher.bounded import shown
from launcher.errors import NoRun
from launcher.record.eventbase import JSON, Count, RecordEvent, RunRecordDamaged, check_fields
from launcher.record.events import parse_event
from launcher.record.layout import EVENTS_FILE, LATEST, LAUNCHER_FILE, allocation_path

# What a record's file may be, read whole: tfcluster writes far less (an event is a few hundred
# bytes: 256 MiB is a million task starts; plan.json of 100,000 tasks is about 10 MB). Past these,
# the file is damaged or not tfcluster's, and is named in one line instead of filling memory.
FILE_BYTES = 256 << 20
EVENT_CHARS = 1 << 20  # one line of events.jsonl

# ------------------------------------------------------------------ events.jsonl


RecordDamaged = RunRecordDamaged  # (the name its readers have used)


def parse_events(lines: list[str], path: Path, first: int = 1, strict: bool = True) -> list[RecordEvent]:
    """The events in ``lines`` (complete lines of ``path``, the first being line ``first``), each
    checked field by field (``events.parse_event``). A line that is not an event of its kind
    raises RunRecordDamaged naming it, or with ``strict=False`` is skipped (a line a full disk
    cut short). NaN and Infinity are not JSON, and not read as numbers."""
    out = []
    for number, line in enumerate(lines, first):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            raw = json.loads(line, parse_constant=_no_constant) if len(line) <= EVENT_CHARS else None
            if raw is None:
                raise RunRecordDamaged(f"run record damaged: {where} is not an event ({shown(line)})")
            out.append(parse_event(raw, where))
        except (ValueError, RecursionError, RunRecordDamaged) as exc:  # (RecursionError: [[[[... nested)
            if not strict:
                continue
            if isinstance(exc, RunRecordDamaged):
                raise RunRecordDamaged(f"{exc.lines[0]}; the events before it are intact") from None
            raise RunRecordDamaged(f"run record damaged: {where} is not an event ({shown(line)}); "
                                   "the events before it are intact") from None
    return out


def _no_constant(name: str) -> Any:
    """json's hook for NaN, Infinity and -Infinity, which Python reads and JSON lacks."""
    raise ValueError(f"{name} is not a JSON number")


def loads_strict(text: str) -> Any:
    """JSON as the standard says it (NaN and Infinity refused: ValueError)."""
    return json.loads(text, parse_constant=_no_constant)


def read_events(run_dir: Path, strict: bool = False) -> list[RecordEvent]:
    """A run's ``events.jsonl`` (written by ``RunRecord.write`` and ``append_event``), each line
    parsed into its event class (``parse_events``); no file, no events. A last line without its
    newline is not whole (still being written by a live run's supervisor, or cut short by a crash
    or a full disk) and is skipped. Any other line that is not an event is
    skipped, or with ``strict`` makes the record damaged (RecordDamaged naming the line). A file
    that exists but cannot be read (or is over ``FILE_BYTES``) reads as no events, or with
    ``strict`` is RecordDamaged."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        text = read_bounded(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except (OSError, RecordDamaged) as exc:
        if not strict:
            return []
        if isinstance(exc, RecordDamaged):
            raise
        raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
    return parse_events(text.split("\n")[:-1], path, strict=strict)


def read_bounded(path: Path, limit: int = FILE_BYTES) -> bytes:
    """The bytes of ``path``; RecordDamaged naming it and the bound if it holds more than ``limit``
    (it is not read past the bound). OSError as ``open`` raises it; UnsafeFile (an OSError) for
    anything but a regular file, or a symlink: tfcluster writes none in a run dir, and one planted
    there must not lead out of it (launcher/safefile.py)."""
    with open_regular(path, follow=False) as fh:
        too_big = os.fstat(fh.fileno()).st_size > limit
        data = b"" if too_big else fh.read(limit + 1)  # (a file growing meanwhile stops at the bound too)
    if too_big or len(data) > limit:
        raise RecordDamaged(f"run record damaged: {path} is more than {limit:,} bytes, far more than tfcluster "
                            "writes there; move it away (or delete the run) to read the others")
    return data


# ------------------------------------------------------------------ a task's log


class LogChunk(NamedTuple):
    """What one read of a log gives (``log_chunks``); the bytes of the file it stands for are
    ``len(lines) + len(long) + len(last)``."""

    lines: bytes  # the whole lines the read ends, each with its newline
    long: bytes = b""  # the start of a line already past the bound, without its newline: its rest comes next
    last: bytes = b""  # the end of a range: its last line, which had no newline


def log_chunks(fh: IO[bytes], start: int, end: Optional[int], line_bytes: int,
               chunk: int) -> Iterator[LogChunk]:
    """The lines of an open log from byte ``start`` to ``end`` (None: as far as it goes), read
    ``chunk`` bytes at a time: a log of gigabytes, or one line of 100 MB, does not fill memory.
    A line longer than ``line_bytes`` is given out as it comes (``LogChunk.long``). Past the
    last newline of the file, a line still being written waits for a later read; a range that
    ``end`` closes ends where the next attempt begins, so its last line is whole
    (``LogChunk.last``). OSError as reading raises it."""
    fh.seek(start)
    left = None if end is None else max(0, end - start)
    carry = b""  # the start of a line the last chunk cut
    while left is None or left > 0:
        data = fh.read(chunk if left is None else min(chunk, left))
        if not data:
            break
        if left is not None:
            left -= len(data)
        data = carry + data
        cut = data.rfind(b"\n") + 1
        lines, carry = data[:cut], data[cut:]
        if len(carry) > line_bytes:
            yield LogChunk(lines, long=carry)
            carry = b""
        elif lines:
            yield LogChunk(lines)
    if end is not None and carry:
        yield LogChunk(b"", last=carry)


def read_allocation(run_dir: Path, backend: str) -> dict[str, Any]:
    """What the backend of the run in ``run_dir`` allocated, from ``<backend>.json``: for a record
    whose launcher.json lacks its ``allocation`` (``RecordedRun.allocation``)."""
    try:
        data = loads_strict(read_bounded(allocation_path(run_dir, backend)).decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError, RecordDamaged):
        return {}
    return data if isinstance(data, dict) else {}


# ------------------------------------------------------------------ finding runs


def runs_root(name_dir: Path) -> list[Path]:
    """Every run directory under ``<run_dir>/<name>/``, oldest first (run ids sort by time)."""
    if not name_dir.is_dir():
        return []
    return sorted(p for p in name_dir.iterdir()
                  if p.is_dir() and not p.is_symlink() and (p / EVENTS_FILE).exists())


def latest_run(root: Path, name: str) -> Optional[Path]:
    """The run ``<root>/<name>/latest`` points at (the last one started), if it is a run of that
    folder: a ``latest`` that leads anywhere else (a symlink planted to another dir, or to a link
    on) is not followed."""
    name_dir = root / name
    link = name_dir / LATEST
    try:
        target = link.resolve(strict=True)
        here = name_dir.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if target.parent == here and target.is_dir() and RUN_ID_RE.fullmatch(target.name):
        return target  # (one tfcluster made: a run of here)
    return None


# A run id as tfcluster makes them (20250101-120000-ab12): one name, never a path.
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def named_run(name_dir: Path, run_id: Optional[str]) -> Optional[Path]:
    """The run dir ``--run RUN_ID`` names (a run id, never a path: NoRun otherwise) or, without
    one, the one ``latest`` points at (``latest_run``: only a run of this folder); None if none."""
    if not run_id:
        return latest_run(name_dir.parent, name_dir.name)
    if not RUN_ID_RE.fullmatch(run_id):  # (a path such as ../../x would lead out of name_dir)
        raise NoRun(f"--run: {shown(run_id)} is not a run id (such as 20250101-120000-ab12); see `tfcluster runs`")
    return name_dir / run_id


def find_run(name_dir: Path, run_id: Optional[str]) -> Path:
    """The run ``run_id`` (or the latest) under ``name_dir``; LaunchError naming the fix if none."""
    run = named_run(name_dir, run_id)
    if run_id:
        assert run is not None
        if not (run / EVENTS_FILE).exists() and not (run / LAUNCHER_FILE).exists():
            known = [p.name for p in runs_root(name_dir)][-5:]
            raise NoRun(f"--run: no run {run_id} under {name_dir}"
                              + (f"; recent runs: {', '.join(known)}" if known else "; no runs there yet"))
        return run
    if run is not None:
        return run
    runs = runs_root(name_dir)
    if runs:
        return runs[-1]
    raise NoRun(f"no run of this spec under {name_dir}; start one with `tfcluster up FILE`")


# ------------------------------------------------------------------ reading files


def read_json(path: Path, required: bool = False) -> Optional[dict]:
    try:
        text = read_bounded(path).decode("utf-8", "replace")
    except FileNotFoundError:
        if required:
            raise RecordDamaged(f"run record incomplete: {path} is missing") from None
        return None
    except OSError as exc:
        raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = loads_strict(text)
    except json.JSONDecodeError as exc:
        raise RecordDamaged(f"run record damaged: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:
        raise RecordDamaged(f"run record damaged: {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise RecordDamaged(f"run record damaged: {path} is not valid JSON (nested past Python's limit)") from None
    if not isinstance(data, dict):
        raise RecordDamaged(f"run record damaged: {path} is not a JSON object")
    return data


# launcher.json's fields (record/writer.py's _write_launcher) and what each must be; a task's
# entry is its handle's info() (TASK_FIELDS checked, the backend's other facts any JSON).
LAUNCHER_FIELDS: dict[str, Any] = {
    "pid": Count, "host": str, "start_time": Count, "run_id": str, "backend": str, "detached": bool,
    "cmdline": list[str], "tasks": dict[str, dict[str, JSON]], "allocation": dict[str, JSON],
}
TASK_FIELDS: dict[str, Any] = {"pid": Count, "pgid": Count, "start_time": Count}


def read_launcher(run_dir: Path, required: bool = False) -> Optional[dict]:
    """The run's launcher.json (the supervisor's pid, host, start time and command line, each
    task's pid/pgid, the backend's ``allocation``): the one reader of it (``status``, ``runs``,
    ``up``'s check for a running run, ``down``), each field checked (``LAUNCHER_FIELDS``: a pid
    that is text, negative or NaN is damage, never a traceback later). None when it is missing,
    unless ``required``; RecordDamaged when it cannot be read or is not what tfcluster writes."""
    path = Path(run_dir) / LAUNCHER_FILE
    data = read_json(path, required=required)
    if data is None:
        return None
    check_fields(data, LAUNCHER_FIELDS, str(path))
    for key, task in (data.get("tasks") or {}).items():
        check_fields(task, TASK_FIELDS, f"{path} task {shown(key, 40)}")
    return data
