"""Processes: identify them by (pid, start time) so a recycled pid is never mistaken for ours, and
say how one ended."""

from __future__ import annotations

import os
import signal
import time
from typing import Optional


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):  # a zombie has ended; only its parent has yet to reap it
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def is_same(pid: int, started: Optional[int]) -> bool:
    """True if ``pid`` is alive and is the process that started at ``started``."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_gone(pid: int, started: Optional[int], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not is_same(pid, started):
            return True
        time.sleep(0.1)
    return not is_same(pid, started)


def kill_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end and group_alive(pgid):
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def describe_exit(code: int) -> str:
    """How a process ended, for a person: ``exit code 3``, ``killed by SIGKILL (exit 137)``."""
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            return f"exit code {code}"
        return f"killed by {name} (exit {code})"
    return f"exit code {code}"
