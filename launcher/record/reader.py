"""Reading a run record: the one reader of its files (events.jsonl, plan.json, launcher.json,
a backend's ``<backend>.json``) and of where its runs are (``latest``, the run ids under a
name's folder). A file that cannot be read as what it should be is ``RecordDamaged``, named in
one line, never a traceback.

What the files say about a run is built above this module: record/feed.py replays them into
the run's ``RunView`` (record/view.py), record/status.py adds what ``status`` and ``runs``
show. The record is written by record/writer.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..errors import LaunchError, NoRun
from .layout import EVENTS_FILE, LATEST, LAUNCHER_FILE, allocation_path

# ------------------------------------------------------------------ events.jsonl


class RecordDamaged(LaunchError):
    """A file of the run record cannot be read as what it should be."""


def parse_events(lines: list[str], path: Path, first: int = 1, strict: bool = True) -> list[dict[str, Any]]:
    """The events in ``lines`` (complete lines of ``path``, the first being line ``first``).
    A line that is not an event raises RecordDamaged naming it, or with ``strict=False`` is
    skipped (a line a full disk cut short)."""
    out = []
    for number, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or "event" not in event:
            if not strict:
                continue
            raise RecordDamaged(f"run record damaged: {path} line {number} is not an event "
                                f"({line[:60]!r}); the events before it are intact")
        out.append(event)
    return out


def read_events(run_dir: Path, strict: bool = False) -> list[dict[str, Any]]:
    """A run's ``events.jsonl`` as written by ``RunRecord.event``; no file, no events. A last
    line without its newline was cut by a crash mid-write and is skipped. Any other line that is
    not an event is skipped, or with ``strict`` makes the record damaged (RecordDamaged naming
    the line; also for a file that exists but cannot be read)."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        if not strict:
            return []
        raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
    return parse_events(text.split("\n")[:-1], path, strict=strict)


def read_allocation(run_dir: Path, backend: str) -> dict[str, Any]:
    """What the backend of the run in ``run_dir`` allocated, from ``<backend>.json``: for a record
    whose launcher.json lacks its ``allocation`` (``RecordedRun.allocation``)."""
    try:
        data = json.loads(allocation_path(run_dir, backend).read_text())
    except (OSError, ValueError):
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
    """The run ``<root>/<name>/latest`` points at (the last one started), if any."""
    link = root / name / LATEST
    if link.exists():
        return link.resolve()
    return None


def find_run(name_dir: Path, run_id: Optional[str]) -> Path:
    """The run ``run_id`` (or the latest) under ``name_dir``; LaunchError naming the fix if none."""
    if run_id:
        run = name_dir / run_id
        if not (run / EVENTS_FILE).exists() and not (run / LAUNCHER_FILE).exists():
            known = [p.name for p in runs_root(name_dir)][-5:]
            raise NoRun(f"--run: no run {run_id} under {name_dir}"
                              + (f"; recent runs: {', '.join(known)}" if known else "; no runs there yet"))
        return run
    link = name_dir / LATEST
    if link.exists():
        return link.resolve()
    runs = runs_root(name_dir)
    if runs:
        return runs[-1]
    raise NoRun(f"no run of this spec under {name_dir}; start one with `tfcluster up FILE`")


# ------------------------------------------------------------------ reading files


def read_json(path: Path, required: bool = False) -> Optional[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            raise RecordDamaged(f"run record incomplete: {path} is missing") from None
        return None
    except OSError as exc:
        raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordDamaged(f"run record damaged: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise RecordDamaged(f"run record damaged: {path} is not a JSON object")
    return data


def read_launcher(run_dir: Path, required: bool = False) -> Optional[dict]:
    """The run's launcher.json (the supervisor's pid, host and start time, each task's pid/pgid,
    the backend's ``allocation``): the one reader of it (``status``, ``runs``, ``up``'s check
    for a running run, ``down``). None when it is missing, unless ``required``; RecordDamaged
    when it cannot be read or is not a JSON object."""
    return read_json(Path(run_dir) / LAUNCHER_FILE, required=required)
