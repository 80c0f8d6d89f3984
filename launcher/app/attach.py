"""``tfcluster attach``: the live view of a run from its record, until the run ends.

On a terminal: the live panel of ``up`` (launcher/ui/panel.py), drawn from a ``RunModel`` that
launcher/record/feed.py replays from the record and then follows, with task output and what the
run says scrolling above it. Otherwise: the status, then the lines as they come (``follow``:
app/inspect.py). What the run says is its events as they come, said by the console as the run's
own console said them (a listener on the feed, as the supervisor's console is one on the record):
the same lines for a foreground run and a detached one. It writes through the console and the renderer the CLI gives it
(app/sinks.py: the CLI's Console, launcher/ui/attachtext.py's text), and returns how it ended
(``Attached``); the CLI chooses the exit code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launcher.system.interrupts import pause, take_interrupt
from launcher.safefile import open_regular
from launcher.app.inspect import POLL, find, follow
from launcher.record.feed import RecordDamaged, RecordFeed
from launcher.record.layout import OUTPUT_FILE
from launcher.record.status import RUNNING, RunStatus, load_run
from launcher.spec.model import LoadedSpec
from launcher.app.sinks import AttachRenderer, RunConsole


@dataclass(frozen=True)
class Attached:
    """How ``attach`` ended: ``detached`` (Ctrl-C, or its console went away: the run goes on), or
    not, with the run's ``final`` view (what the exit code says)."""
    final: RunStatus
    detached: bool = False


class _ConsoleGone(Exception):
    """``attach``'s console went away (its terminal closed, its reader gone: over ssh, the
    channel of the ``attach`` that runs it there): leave the run going, as on Ctrl-C."""


def attach(loaded: LoadedSpec, console: RunConsole, renderer: AttachRenderer, *,
           run_id: Optional[str] = None) -> Attached:
    """Follow run ``run_id`` (default: the latest) on ``console`` (the live panel) or through
    ``renderer`` (as text) until it ends; Ctrl-C leaves the run going, and so does a console
    that goes away (its writes never raise: launcher/ui/console.py)."""
    console.follow(lambda why: None)  # (console.lost, checked below, also once its terminal hangs up)
    try:
        return _attach(loaded, console, renderer, run_id)
    finally:
        console.unfollow()


def _gone(console: RunConsole) -> None:
    """At each poll: leave if the console went away or Ctrl-C was pressed (launcher/system/interrupts.py:
    taken here, between polls, not wherever the main thread was when it came)."""
    if console.lost:
        raise _ConsoleGone()
    take_interrupt()


def _attach(loaded: LoadedSpec, console: RunConsole, renderer: AttachRenderer, run_id: Optional[str]) -> Attached:
    run = find(loaded, run_id)
    feed = None
    if load_run(run, progress=False).state == RUNNING:
        feed = RecordFeed.resume(run)  # (from the record's last snapshot on)
        feed.poll()
        if console.start_panel(feed.view):
            return _attach_panel(run, feed, console, renderer)
    view = load_run(run)
    renderer.start(view)
    if view.state != RUNNING or feed is None:
        renderer.finished(view)
        return Attached(view)
    feed.listeners.append(console.saying(feed.view))  # what the run says from now on

    def on_state(_view) -> None:
        try:
            feed.poll()
        except RecordDamaged:  # (what it says stops there; its task lines and outcome still show)
            feed.listeners.clear()
        _gone(console)

    try:  # (the final view is reloaded with its task rows for the outcome)
        follow([(run / OUTPUT_FILE, _size(run / OUTPUT_FILE), "")], run, renderer.write_for, on_state=on_state)
    except (KeyboardInterrupt, _ConsoleGone):
        renderer.detached(view)
        return Attached(view, detached=True)
    final = load_run(run)
    renderer.finished(final)
    return Attached(final)


def _attach_panel(run: Path, feed: RecordFeed, console: RunConsole, renderer: AttachRenderer) -> Attached:
    """Follow the run under the live panel ``console`` shows for ``feed.view``: its new task lines
    from output.log, and its new events said as they are polled."""
    output = run / OUTPUT_FILE
    at = _size(output)
    console.info(f"attached to run {run.name}; Ctrl-C detaches (the run goes on)")
    feed.listeners.append(console.saying(feed.view))

    def drain() -> None:
        nonlocal at
        at, lines = _new_lines(output, at)
        for line in lines:
            key, _, rest = line[1:].partition("] ") if line.startswith("[") else ("", "", "")
            if key:
                console.task_line(key, rest)

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
            pause(POLL)
    except (KeyboardInterrupt, _ConsoleGone):
        console.end_panel()
        now = load_run(run, progress=False)
        renderer.detached(now)
        return Attached(now, detached=True)
    console.end_panel()  # (the supervisor's own report has scrolled by above it)
    final = load_run(run)
    renderer.finished(final)
    return Attached(final)


def _new_lines(path: Path, offset: int) -> tuple[int, list[str]]:
    """The complete lines of ``path`` after byte ``offset``, and the offset after them."""
    try:
        with open_regular(path, follow=False) as fh:  # (never a FIFO or a link out of the run dir)
            fh.seek(offset)
            data = fh.read(64 << 20)  # (the rest at the next call)
    except OSError:
        return offset, []
    complete = data[: data.rfind(b"\n") + 1]
    return offset + len(complete), complete.decode("utf-8", "replace").splitlines()


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
