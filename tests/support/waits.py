"""Waiting in tests: on a condition or on an output line, never for a fixed time. Every wait has a
timeout, and its failure says what was awaited (and, given ``detail``, what was seen instead)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from typing import Callable, Iterator, Optional


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1, what: str = "condition",
             detail: Optional[Callable[[], str]] = None, proc: Optional[subprocess.Popen] = None):
    """``predicate()``'s first true value, polled every ``interval`` s; after ``timeout`` s an
    AssertionError naming ``what`` (and ``detail()``, what there was to see). With ``proc`` (a
    launcher, its output a text pipe) the wait ends at once if it exits, showing its output."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            output = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"launcher exited ({proc.returncode}) while waiting for {what}:\n{output[-4000:]}")
        time.sleep(interval)
    message = f"timed out after {timeout:g} s waiting for {what}"
    raise AssertionError(message + (f"; {detail()}" if detail else ""))


@contextlib.contextmanager
def _group_killed_after(proc: subprocess.Popen, timeout: float) -> Iterator[threading.Event]:
    """Within the block, ``proc``'s process group is killed after ``timeout`` s (which ends any read
    of its output); the event yielded says whether that happened."""
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


def wait_line(proc: subprocess.Popen, pattern: str, seen: list[str], timeout: float) -> None:
    """Read ``proc``'s output (a text pipe) into ``seen`` until a line matches ``pattern``; after
    ``timeout`` s its process group is killed, which ends the read (so ``proc`` must lead its own
    group: ``start_new_session=True``)."""
    with _group_killed_after(proc, timeout) as expired:
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if re.search(pattern, line):
                return
    why = f"no line matched {pattern!r} within {timeout:g} s (killed)" if expired.is_set() else \
        f"launcher ended before printing {pattern!r}"
    raise AssertionError(why + ":\n" + "\n".join(seen[-30:]))


def read_rest(proc: subprocess.Popen, timeout: float) -> str:
    """The rest of ``proc``'s output (a text pipe) to its end, ``proc`` waited for; after
    ``timeout`` s its process group is killed and ``subprocess.TimeoutExpired`` raised (so ``proc``
    must lead its own group). Read through the same file object as ``wait_line``: its read-ahead
    keeps the lines after the matched one in that object's buffer, and ``Popen.communicate`` with
    a timeout reads the file descriptor beneath it, so those lines would be lost (seen in three
    suites run side by side: a resumed run's first ``tfcluster-start`` line, missing)."""
    with _group_killed_after(proc, timeout) as expired:
        rest = proc.stdout.read()
        proc.stdout.close()
        proc.wait()
    if expired.is_set():
        raise subprocess.TimeoutExpired(proc.args, timeout, output=rest)
    return rest
