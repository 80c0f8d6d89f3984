"""``tfcluster status``, ``logs``, ``attach`` and ``runs``: what a run record says, for people.

Everything is read through launcher/record/: reader.py (the record's files, finding the run),
status.py (the run's state and task rows) and feed.py (the record replayed into the live panel's
``RunView``); this module only formats and follows.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import time
from pathlib import Path
from typing import Optional, TextIO

from launcher.bounded import escape, listing
from launcher.ui.console import Console
from launcher.errors import LaunchError, NoRun
from launcher.app.up import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_RUN, EXIT_OK, EXIT_SUPERVISOR_LOST, JSON_FORMAT
from launcher.record.events import Event
from launcher.record.feed import RecordFeed
from launcher.record.layout import OUTPUT_FILE, SUPERVISOR_LOG, log_path, name_dir
from launcher.record.reader import find_run, read_events, runs_root
from launcher.record.status import FAILED, LOST, RUNNING, STOPPED, SUCCEEDED, RunStatus, list_runs, load_run
from launcher.spec.model import LoadedSpec
from launcher.ui.columns import STATUS, Row, plain
from launcher.ui.table import render

_POLL = 0.3  # seconds between looks at a followed run


def exit_code(view: RunStatus) -> int:
    """status/attach: 0 running or succeeded, 1 failed or stopped, 3 supervisor lost."""
    if view.state in (RUNNING, SUCCEEDED):
        return EXIT_OK
    if view.state == LOST:
        return EXIT_SUPERVISOR_LOST
    return EXIT_FAILED


def _run(loaded: LoadedSpec, run_id: Optional[str]) -> Path:
    return find_run(name_dir(loaded), run_id)


# ------------------------------------------------------------------ status


def status(loaded: LoadedSpec, args: argparse.Namespace, console: Console) -> int:
    view = load_run(_run(loaded, args.run))
    if args.json:
        print(json.dumps({"format": JSON_FORMAT, **view.to_json()}, indent=2))
    else:
        print("\n".join(escape(line) for line in render_status(view, args.spec)))  # (a record's bytes: never raw)
    return exit_code(view)


def render_status(view: RunStatus, spec: str, now: Optional[float] = None) -> list[str]:
    elapsed = view.elapsed(now)
    head = f"run {view.run_id} ({view.name}, {view.backend}): {view.state}"
    if view.attempts:
        head += f", attempt {view.attempts}"
    if elapsed is not None:
        head += f", {duration(elapsed)}" + (" elapsed" if view.state == RUNNING else "")
    if view.state == RUNNING and view.supervisor_pid:
        where = f" on {view.supervisor_host}" if view.supervisor_host else ""
        head += f"; supervisor pid {view.supervisor_pid}{where}" + (" (detached)" if view.detached else "")
    lines = [head]
    if view.reason and view.state != SUCCEEDED:  # (why it failed or stopped, or a note on the supervisor)
        lines.append(f"  {view.reason}")
    lines += task_table(view)
    if view.spares:
        lines.append(f"spare hosts: {', '.join(view.spares)}")
    if view.suspects:
        lines.append(f"suspect hosts: {', '.join(view.suspects)}")
    lines += view.host_changes
    if view.state == LOST:
        lines += lost_advice(view, spec)
    return lines


def task_table(view: RunStatus) -> list[str]:
    """A row per task (status's columns: launcher/ui/columns.py)."""
    return plain(STATUS, [Row.of_status(t, view.state == LOST) for t in view.tasks])


def lost_advice(view: RunStatus, spec: str) -> list[str]:
    alive = [t.key for t in view.tasks if t.alive]
    unknown = [t.key for t in view.tasks if t.alive is None and t.life.live]
    out = []
    if alive:
        out.append(f"still running without a supervisor: {', '.join(alive)}")
    if unknown:
        out.append(f"may still be running (not checkable from here): {', '.join(unknown)}; they stop on their own "
                   "once their lifeline (the supervisor's connection) is gone")
    if not alive and not unknown:
        out.append("no task of the run is left running here (they stopped with their lifeline)")
    out.append(f"clean up: tfcluster down {shlex.quote(spec)} --run {view.run_id}   "
               "(stops what is left and marks the run stopped)")
    return out


def _num(value: Optional[float], digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# ------------------------------------------------------------------ runs


def runs(loaded: LoadedSpec, args: argparse.Namespace, console: Console) -> int:
    views = list_runs(name_dir(loaded))
    if args.json:
        print(json.dumps(runs_json(views), indent=2))
    else:
        print("\n".join(escape(line) for line in render_runs(views, name_dir(loaded))))  # (a record's bytes: never raw)
    return EXIT_OK if views else EXIT_NO_RUN


def runs_under(path: Path, console: Console, as_json: bool = False) -> int:
    """``tfcluster runs DIR``: DIR is a run_dir (one folder per spec name) or one name's folder.
    No run there: exit 4 (EXIT_NO_RUN), after saying so (or an empty list in JSON)."""
    if not path.is_dir():
        raise NoRun(f"no run directory at {path}; give a cluster.yaml or a run dir such as runs/")
    names = [path] if runs_root(path) else sorted(p for p in path.iterdir() if p.is_dir() and runs_root(p))
    views = [v for name_dir in names for v in list_runs(name_dir)]
    if as_json:
        print(json.dumps(runs_json(views), indent=2))
    elif not names:
        print(f"no runs under {path}")
    else:
        out: list[str] = []
        for name_dir in names:
            out += render_runs(list_runs(name_dir), name_dir)
        print("\n".join(escape(line) for line in out))
    return EXIT_OK if views else EXIT_NO_RUN


def runs_json(views: list[RunStatus]) -> dict:
    """``runs --json``: ``{"format": 1, "runs": [{"name", "run", "started", "duration", "outcome",
    "attempts", "accuracy"}, ...]}`` (started: Unix seconds; duration: seconds; null when unknown)."""
    return {"format": JSON_FORMAT, "runs": [
        {"name": v.name, "run": v.run_id, "started": v.started, "duration": v.elapsed(), "outcome": v.state,
         "attempts": v.attempts or None, "accuracy": v.final_accuracy} for v in views]}


def render_runs(views: list[RunStatus], where: Path) -> list[str]:
    if not views:
        return [f"no runs under {where}"]
    rows = []
    for v in views:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.started)) if v.started else None
        elapsed = v.elapsed()
        rows.append((v.run_id, started, duration(elapsed) if elapsed is not None else None,
                     v.state if v.state != LOST else "supervisor lost", str(v.attempts or "-"),
                     _num(v.final_accuracy, 4)))
    return [f"runs of {views[0].name} ({where}):"] + render(
        ("run", "started", "duration", "outcome", "attempts", "accuracy"), rows)


# ------------------------------------------------------------------ logs


def logs(loaded: LoadedSpec, args: argparse.Namespace, console: Console) -> int:
    run = _run(loaded, args.run)
    keys = [t.key for t in load_run(run, progress=False).tasks]
    if args.task is not None and args.task not in keys:
        raise LaunchError(f"TASK: no task {args.task} in run {run.name}; its tasks: {listing(keys, 'tasks')}")
    path = log_path(run, args.task) if args.task else run / OUTPUT_FILE
    start, end = _attempt_range(run, args.task, args.attempt)
    if args.tail is not None and args.tail < 0:
        raise LaunchError("--tail: give a number of lines >= 0")
    position = _print_range(path, start, end, args.tail)
    if not args.follow or end is not None:
        return EXIT_OK
    try:
        follow([(path, position, "")], run)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


def _attempt_range(run: Path, task: Optional[str], attempt: Optional[int]) -> tuple[int, Optional[int]]:
    """Byte range [start, end) of attempt ``attempt`` (1-based) in the task's log or output.log."""
    if attempt is None:
        return 0, None
    field = "log_offset" if task else "output_offset"
    starts: dict[int, int] = {}
    for e in read_events(run, strict=True):
        if e.get("event") == Event.START and (task is None or e.get("task") == task) and field in e:
            n = int(e.get("attempt", 0))
            starts[n] = min(starts.get(n, e[field]), e[field])
    if attempt - 1 not in starts:
        known = ", ".join(str(n + 1) for n in sorted(starts)) or "none recorded"
        raise LaunchError(f"--attempt: run {run.name} has no attempt {attempt}"
                          f"{' of ' + task if task else ''}; attempts: {known}")
    later = [off for n, off in starts.items() if n > attempt - 1]
    return starts[attempt - 1], (min(later) if later else None)


def _print_range(path: Path, start: int, end: Optional[int], tail: Optional[int]) -> int:
    """Print the lines of ``path`` in [start, end), or the last ``tail`` of them; the offset reached.
    Read a chunk at a time (a log of gigabytes, or one line of 100 MB, does not fill memory): the
    last ``tail`` lines are kept as they pass, each cut to _TAIL_LINE bytes."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return start
    kept: "collections.deque[bytes]" = collections.deque(maxlen=tail or 1)
    position = start
    with fh:
        fh.seek(start)
        left = None if end is None else max(0, end - start)
        carry = b""
        while left is None or left > 0:
            data = fh.read(_CHUNK if left is None else min(_CHUNK, left))
            if not data:
                break
            if left is not None:
                left -= len(data)
            data = carry + data
            cut = data.rfind(b"\n") + 1
            complete, carry = data[:cut], data[cut:]
            if tail is None:
                if complete:
                    _out(complete.decode("utf-8", "replace"))
                if len(carry) > _TAIL_LINE:  # a line past the bound is printed as it comes
                    _out(carry.decode("utf-8", "replace"))
                    complete, carry = data, b""
            else:
                kept.extend(line[:_TAIL_LINE] for line in complete.split(b"\n")[:-1])
                if len(carry) > _TAIL_LINE:
                    kept.append(carry[:_TAIL_LINE])
                    complete, carry = data, b""  # (the rest of that line is skipped)
            position += len(complete)
        if end is not None and carry:  # a range ends where the next attempt starts: its last line is whole
            if tail is None:
                _out(carry.decode("utf-8", "replace") + "\n")
            else:
                kept.append(carry[:_TAIL_LINE])
            position += len(carry)
    if tail:
        _out("".join(line.decode("utf-8", "replace") + "\n" for line in kept))
    return position


_CHUNK = 1 << 20
_TAIL_LINE = 1 << 20


def _out(text: str, stream: Optional[TextIO] = None) -> None:
    import sys

    if text:
        (stream or sys.stdout).write(text)
        (stream or sys.stdout).flush()


def follow(files: list[tuple[Path, int, str]], run: Path, stream_for=None,
           on_state=None, interval: float = _POLL) -> RunStatus:
    """Print new complete lines of each (path, offset, prefix) until the run is no longer
    running (then what is left), returning the run's final view."""
    positions = {path: offset for path, offset, _ in files}
    prefixes = {path: prefix for path, _, prefix in files}

    def drain() -> None:
        for path in positions:
            try:
                with open(path, "rb") as fh:
                    fh.seek(positions[path])
                    data = fh.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            if complete:
                positions[path] += len(complete)
                text = complete.decode("utf-8", "replace")
                if prefixes[path]:
                    text = "".join(prefixes[path] + line + "\n" for line in text.splitlines())
                _out(text, stream_for(path) if stream_for else None)

    while True:
        view = load_run(run, progress=False)
        drain()
        if on_state:
            on_state(view)
        if view.state != RUNNING:
            drain()
            return view
        time.sleep(interval)


# ------------------------------------------------------------------ attach


class _ConsoleGone(Exception):
    """``attach``'s console went away (its terminal closed, its reader gone: over ssh, the
    channel of the ``attach`` that runs it there): leave the run going, as on Ctrl-C."""


def attach(loaded: LoadedSpec, args: argparse.Namespace, console: Console) -> int:
    """The live view of a run from its record, until the run ends; Ctrl-C leaves the run going,
    and so does a console that goes away (its writes never raise: launcher/ui/console.py).

    On a terminal: the live panel of ``up`` (launcher/ui/panel.py), drawn from a ``RunView`` that
    launcher/record/feed.py replays from the record and then follows, with task output and the
    supervisor's messages scrolling above it. Otherwise: the status, then the lines as they come."""
    console.follow(lambda why: None)  # (console.lost, checked below, also once its terminal hangs up)
    try:
        return _attach(loaded, args, console)
    finally:
        console.unfollow()


def _gone(console: Console) -> None:
    if console.lost:
        raise _ConsoleGone()


def _attach(loaded: LoadedSpec, args: argparse.Namespace, console: Console) -> int:
    run = _run(loaded, args.run)
    if load_run(run, progress=False).state == RUNNING:
        feed = RecordFeed.resume(run)  # (from the record's last snapshot on)
        live = feed.view
        feed.poll()
        if console.start_panel(live):
            return _attach_panel(run, feed, console, args.spec)
    view = load_run(run)
    renderer = TextRenderer(console, args.spec)
    renderer.start(view)
    if view.state != RUNNING:
        renderer.finished(view)
        return exit_code(view)
    try:  # (the final view is reloaded with its task rows for the outcome)
        final = follow([(run / OUTPUT_FILE, _size(run / OUTPUT_FILE), ""),
                        (run / SUPERVISOR_LOG, _size(run / SUPERVISOR_LOG), "")], run,
                       stream_for=renderer.stream_for, on_state=lambda _view: _gone(console))
    except (KeyboardInterrupt, _ConsoleGone):
        renderer.detached(view)
        return EXIT_OK
    final = load_run(run)
    renderer.finished(final)
    return exit_code(final)


def _attach_panel(run: Path, feed: RecordFeed, console: Console, spec: str) -> int:
    """Follow the run under the live panel ``console`` shows for ``feed.view``."""
    renderer = TextRenderer(console, spec)
    output, messages = run / OUTPUT_FILE, run / SUPERVISOR_LOG
    at = {output: _size(output), messages: _size(messages)}
    console.info(f"attached to run {run.name}; Ctrl-C detaches (the run goes on)")

    def drain() -> None:
        for path in at:
            at[path], lines = _new_lines(path, at[path])
            for line in lines:
                key, _, rest = line[1:].partition("] ") if line.startswith("[") else ("", "", "")
                if path == output and key:
                    console.task_line(key, rest)
                else:
                    console.block([line])

    try:
        while True:
            feed.poll()
            drain()
            if feed.ended:
                break
            state = load_run(run, progress=False)
            if state.state != RUNNING:  # (supervisor lost: no outcome will come)
                feed.poll()
                drain()
                break
            _gone(console)
            time.sleep(_POLL)
    except (KeyboardInterrupt, _ConsoleGone):
        console.end_panel()
        renderer.detached(load_run(run, progress=False))
        return EXIT_OK
    console.end_panel()  # (the supervisor's own report has scrolled by above it)
    final = load_run(run)
    renderer.finished(final)
    return exit_code(final)


def _new_lines(path: Path, offset: int) -> tuple[int, list[str]]:
    """The complete lines of ``path`` after byte ``offset``, and the offset after them."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset, []
    complete = data[: data.rfind(b"\n") + 1]
    return offset + len(complete), complete.decode("utf-8", "replace").splitlines()


class TextRenderer:
    """Plain-text rendering of a run for ``attach`` when stdout is not a terminal: the status
    block, then the output lines as they arrive (task lines on stdout, launcher messages on
    stderr), then the outcome. (Its messages also serve the live panel's attach.)"""

    def __init__(self, console: Console, spec: str) -> None:
        self.console = console
        self.spec = spec

    def start(self, view: RunStatus) -> None:
        self.console.block(render_status(view, self.spec))
        if view.state == RUNNING:
            self.console.info(f"attached to run {view.run_id}; Ctrl-C detaches (the run goes on)")

    def stream_for(self, path: Path) -> TextIO:
        return self.console.err if path.name == SUPERVISOR_LOG else self.console.out

    def detached(self, view: RunStatus) -> None:
        self.console.info(f"detached from run {view.run_id}; it goes on "
                          f"(stop it with: tfcluster down {shlex.quote(self.spec)} --run {view.run_id})")

    def finished(self, view: RunStatus) -> None:
        if view.state == STOPPED:
            self.console.info(f"run {view.run_id} stopped")
        elif view.state == LOST:
            self.console.block(lost_advice(view, self.spec))
        elif view.state in (SUCCEEDED, FAILED):
            self.console.info(f"run {view.run_id} {view.state}" + (f": {view.reason}" if view.reason else ""))


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
