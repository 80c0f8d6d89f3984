"""``tfcluster status``, ``logs`` and ``runs``: what a run record says, as data.

Everything is read through launcher/record/: reader.py (the record's files, finding the run) and
status.py (the run's state and task rows). ``status`` and ``runs`` return ``RunStatus`` views (the
CLI formats them: launcher/ui/runstatus.py); ``logs`` streams a log's bytes into a ``Write`` it is
given, and ``follow`` keeps doing so until the run ends (``attach`` follows too: app/attach.py).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from launcher.safefile import UnsafeFile, open_regular
from launcher.bounded import listing
from launcher.system.interrupts import pause, take_interrupt
from launcher.errors import LaunchError, NoRun
from launcher.record.events import Start
from launcher.record.layout import OUTPUT_FILE, log_path, name_dir
from launcher.record.reader import find_run, log_chunks, read_events, runs_root
from launcher.record.status import RUNNING, RunStatus, list_runs, load_run
from launcher.spec.model import LoadedSpec

POLL = 0.3  # seconds between looks at a followed run

# Where streamed text goes: whole lines (or the cut piece of an overlong one), shown at once.
Write = Callable[[str], None]


def find(loaded: LoadedSpec, run_id: Optional[str]) -> Path:
    """The run dir of ``run_id`` (default: the latest) of this spec; NoRun if there is none."""
    return find_run(name_dir(loaded), run_id)


# ------------------------------------------------------------------ status


def status(loaded: LoadedSpec, run_id: Optional[str] = None) -> RunStatus:
    """The state of run ``run_id`` (default: the latest) and a row per task."""
    return load_run(find(loaded, run_id))


# ------------------------------------------------------------------ runs


@dataclass(frozen=True)
class RunList:
    """The runs of one spec name, oldest first, and the folder that keeps them."""
    where: Path
    runs: list[RunStatus]


def runs(loaded: LoadedSpec) -> RunList:
    where = name_dir(loaded)
    return RunList(where, list_runs(where))


def runs_under(path: Path) -> list[RunList]:
    """``tfcluster runs DIR``: DIR is a run_dir (one folder per spec name) or one name's folder;
    a list per name that has a run folder (none: an empty list). NoRun if DIR is no folder."""
    if not path.is_dir():
        raise NoRun(f"no run directory at {path}; give a cluster.yaml or a run dir such as runs/")
    names = [path] if runs_root(path) else sorted(p for p in path.iterdir() if p.is_dir() and runs_root(p))
    return [RunList(name, list_runs(name)) for name in names]


# ------------------------------------------------------------------ logs


@dataclass(frozen=True)
class LogsDone:
    """How ``logs`` ended: ``interrupted`` by Ctrl-C while following."""
    interrupted: bool = False


def logs(loaded: LoadedSpec, write: Write, *, task: Optional[str] = None, run_id: Optional[str] = None,
         attempt: Optional[int] = None, tail: Optional[int] = None, follow_run: bool = False) -> LogsDone:
    """Write run ``run_id``'s log of ``task`` (default: every task's output, prefixed), only of
    attempt ``attempt`` (1-based), from its last ``tail`` lines; with ``follow_run``, then the new
    lines until the run ends."""
    run = find(loaded, run_id)
    keys = [t.key for t in load_run(run, progress=False).tasks]
    if task is not None and task not in keys:
        raise LaunchError(f"TASK: no task {task} in run {run.name}; its tasks: {listing(keys, 'tasks')}")
    path = log_path(run, task) if task else run / OUTPUT_FILE
    start, end = _attempt_range(run, task, attempt)
    if tail is not None and tail < 0:
        raise LaunchError("--tail: give a number of lines >= 0")
    position = _write_range(path, start, end, tail, write)
    if not follow_run or end is not None:
        return LogsDone()
    try:
        follow([(path, position, "")], run, lambda _path: write, on_state=lambda _view: take_interrupt())
    except KeyboardInterrupt:
        return LogsDone(interrupted=True)
    return LogsDone()


def _attempt_range(run: Path, task: Optional[str], attempt: Optional[int]) -> tuple[int, Optional[int]]:
    """Byte range [start, end) of attempt ``attempt`` (1-based) in the task's log or output.log."""
    if attempt is None:
        return 0, None
    starts: dict[int, int] = {}
    for e in read_events(run, strict=True):
        offset = (e.log_offset if task else e.output_offset) if isinstance(e, Start) else None
        if isinstance(e, Start) and (task is None or e.task == task) and offset is not None:
            starts[e.attempt] = min(starts.get(e.attempt, offset), offset)
    if attempt - 1 not in starts:
        known = ", ".join(str(n + 1) for n in sorted(starts)) or "none recorded"
        raise LaunchError(f"--attempt: run {run.name} has no attempt {attempt}"
                          f"{' of ' + task if task else ''}; attempts: {known}")
    later = [off for n, off in starts.items() if n > attempt - 1]
    return starts[attempt - 1], (min(later) if later else None)


def _write_range(path: Path, start: int, end: Optional[int], tail: Optional[int], write: Write) -> int:
    """Write the lines of ``path`` in [start, end), or the last ``tail`` of them; the offset reached.
    Read a chunk at a time (``log_chunks``): the last ``tail`` lines are kept as they pass, each
    cut to _TAIL_LINE bytes (a longer line is kept as its pieces)."""
    try:
        fh = open_regular(path, follow=False)
    except FileNotFoundError:
        return start
    except UnsafeFile as exc:  # a FIFO, a device, a symlink planted in the run dir: never read
        raise LaunchError(f"run record damaged: {path} {exc}; move it away (or delete the run)") from None
    kept: "collections.deque[bytes]" = collections.deque(maxlen=tail or 1)
    position = start
    with fh:
        for piece in log_chunks(fh, start, end, _TAIL_LINE, _CHUNK):
            position += len(piece.lines) + len(piece.long) + len(piece.last)
            if tail is None:  # as the task wrote it (a line past the bound too)
                _out(write, (piece.lines + piece.long).decode("utf-8", "surrogateescape"))
                if piece.last:
                    _out(write, piece.last.decode("utf-8", "surrogateescape") + "\n")
                continue
            kept.extend(line[:_TAIL_LINE] for line in piece.lines.split(b"\n")[:-1])
            kept.extend(line[:_TAIL_LINE] for line in (piece.long, piece.last) if line)
    if tail:
        _out(write, "".join(line.decode("utf-8", "surrogateescape") + "\n" for line in kept))
    return position


_CHUNK = 1 << 20
_TAIL_LINE = 1 << 20


def _out(write: Write, text: str) -> None:
    if text:
        write(text)


def follow(files: list[tuple[Path, int, str]], run: Path, write_for: Callable[[Path], Write],
           on_state: Optional[Callable[[RunStatus], None]] = None, interval: float = POLL) -> RunStatus:
    """Write the new complete lines of each (path, offset, prefix), into ``write_for(path)``, until
    the run is no longer running (then what is left), returning the run's final view."""
    positions = {path: offset for path, offset, _ in files}
    prefixes = {path: prefix for path, _, prefix in files}

    def drain() -> None:
        for path in positions:
            try:
                with open_regular(path, follow=False) as fh:
                    fh.seek(positions[path])
                    data = fh.read(_CHUNK * 64)  # (the rest at the next drain)
            except (FileNotFoundError, UnsafeFile):
                continue
            complete = data[: data.rfind(b"\n") + 1]
            if complete:
                positions[path] += len(complete)
                text = complete.decode("utf-8", "surrogateescape")
                if prefixes[path]:
                    text = "".join(prefixes[path] + line + "\n" for line in text.splitlines())
                _out(write_for(path), text)

    while True:
        view = load_run(run, progress=False)
        drain()
        if on_state:
            on_state(view)
        if view.state != RUNNING:
            drain()
            return view
        pause(interval)
