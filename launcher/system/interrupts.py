"""Ctrl-C as a request that a watching command takes between its polls, never inside a library.

Python turns SIGINT into a ``KeyboardInterrupt`` wherever the main thread is when the signal
arrives, and that can be inside a library's critical section. The ssh.supervisor relay of
``attach`` polls paramiko's ``Channel.recv_ready()``, whose ``BufferedPipe.read_ready`` runs
``self._lock.acquire()`` and then ``try:``; CPython 3.11 checks for pending signals when a call
returns, so a Ctrl-C landing there raises with the lock still held (tests/unit/system/test_interrupts.py
shows it on paramiko's own class). paramiko's transport thread then blocks for ever feeding that
channel, and whatever needs it afterwards (the channel's close, a window adjust, a rekey) waits
behind it: an ``attach`` that does not end on Ctrl-C. The same holds for any lock taken the same
way (rich's live panel, the record reader's files are plain).

So the commands that only watch a run (``attach``, ``logs --follow``, and their relays over ssh)
run under ``watching()``: SIGINT sets a flag that their loops read at points of their choosing
(``requested()``), between polls of at most a fraction of a second. As a backstop for a command
blocked where no loop reads the flag (a write to a pipe nobody drains, a library call that never
returns), ``bound`` seconds after the first Ctrl-C, or at a second one, it writes its ``message``
and exits with ``code`` at once (``os._exit``): these commands hold nothing that a run needs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator, Optional

_requested = threading.Event()
# A Ctrl-C was taken under watching(): the process then ends through leave() without the
# interpreter's shutdown (see there).
_taken = threading.Event()


def requested() -> bool:
    """Whether Ctrl-C was pressed under the current ``watching()``."""
    return _requested.is_set()


@contextlib.contextmanager
def watching(message: str, code: int, bound: Optional[float] = 1.0) -> Iterator[None]:
    """SIGINT sets ``requested()`` instead of raising, for the duration; ``bound`` (None: no
    backstop) seconds later, or at a second SIGINT, ``message`` (one line) and exit ``code``.
    Outside the main thread (no signal handler can be set there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    timer: list[threading.Timer] = []

    def overdue() -> None:
        try:  # (on a terminal a live panel may have hidden the cursor: show it again)
            lead = b"\r\n\x1b[?25h" if os.isatty(2) else b""
            os.write(2, lead + (message.rstrip("\n") + "\n").encode("utf-8", "replace"))
        finally:
            os._exit(code)

    def on_sigint(signum, frame) -> None:
        if _requested.is_set():
            overdue()
        _requested.set()
        if bound is not None:
            t = threading.Timer(bound, overdue)
            t.daemon = True
            timer.append(t)
            t.start()

    _requested.clear()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        for t in timer:
            t.cancel()
        if _requested.is_set():
            _taken.set()
        _requested.clear()


def leave(code: int) -> None:
    """End the process with ``code`` (the console script's and ``python -m launcher``'s exit).
    After a Ctrl-C that a watching command took, the interpreter's shutdown is skipped: it
    collects every object of paramiko, rich and the record reader, a few tenths of a second on a
    quiet machine and over two seconds on a loaded one (bench/attach_ctrl_c.py), after the
    command has already said that it detached, and the prompt comes back only when it is done.
    The atexit functions still run and stdout and stderr are flushed; then ``os._exit``. These
    commands hold nothing that a run needs. Any other end is the usual ``sys.exit``."""
    if not _taken.is_set():
        sys.exit(code)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def pause(seconds: float) -> None:
    """Wait ``seconds`` between two polls; a Ctrl-C under ``watching()`` ends the wait at once
    (the flag is an event the handler sets), so the loop takes it now, not at its next poll."""
    _requested.wait(seconds)


def take_interrupt() -> None:
    """Raise KeyboardInterrupt here, at the caller's safe point, if Ctrl-C was pressed."""
    if _requested.is_set():
        raise KeyboardInterrupt
