"""Processes: identify them by (pid, start time) so a recycled pid is never mistaken for ours, prove
that a process a run record names is the run's own before anything signals it (``not_own``), and
say how one ended."""

from __future__ import annotations

import os
import signal
import stat
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


def state(pid: int) -> str:
    """Process ``pid``'s state letter (/proc/PID/stat field 3: ``t`` stopped by a tracer, ``T`` by
    a signal, ``Z`` a zombie), "" if gone."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            fields = fh.read(4096).rsplit(b")", 1)[-1].split()
    except OSError:
        return ""
    return fields[0].decode("ascii", errors="replace") if fields else ""


def is_same(pid: int, started: Optional[int]) -> bool:
    """True if ``pid`` is alive and is the process that started at ``started``."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


PROC_BYTES = 1 << 20  # /proc/PID/cmdline and environ are read up to this (a page or two in practice)


def _proc_file(pid: int, name: str) -> Optional[bytes]:
    """/proc/PID/NAME's bytes (bounded), or None: gone, or not ours to read (another user's)."""
    try:
        with open(f"/proc/{int(pid)}/{name}", "rb") as fh:
            return fh.read(PROC_BYTES)
    except (OSError, ValueError):
        return None


def cmdline(pid: int) -> Optional[list[str]]:
    """The process's command line as it was started (argv), or None."""
    data = _proc_file(pid, "cmdline")
    if data is None:
        return None
    return [a.decode("utf-8", "surrogateescape") for a in data.split(b"\0")[:-1]] if data else []


def environ_value(pid: int, name: str) -> Optional[str]:
    """``name`` in the environment the process was started with, or None (unset, or unreadable)."""
    data = _proc_file(pid, "environ")
    prefix = name.encode() + b"="
    for entry in (data or b"").split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "surrogateescape")
    return None


def file_id(path) -> Optional[tuple[int, int, int]]:
    """(device, inode, owner's uid) of the regular file at ``path`` itself, or None. It is opened
    without following a symlink and without being read (``O_PATH | O_NOFOLLOW``: a symlink planted
    there is the link itself, a FIFO or a device is never opened), and must have no other name (one
    link): a hard link to a file some other process holds open is not a run's own file."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return None
    return st.st_dev, st.st_ino, st.st_uid


def uids(pid: int) -> Optional[tuple[int, int]]:
    """The process's (real, effective) uid (/proc/PID/status), or None if it is gone."""
    data = _proc_file(pid, "status")
    for line in (data or b"").splitlines():
        if line.startswith(b"Uid:"):
            try:
                real, effective = line.split()[1:3]
                return int(real), int(effective)
            except ValueError:
                return None
    return None


def holds_open(pid: int, path) -> bool:
    """Whether the process has the file at ``path`` open: that very file (device and inode of the
    file ``file_id`` opens, never where a symlink there points), owned by the process's user."""
    want, mine = file_id(path), uids(pid)
    if want is None or mine != (want[2], want[2]):
        return False
    try:
        fds = os.listdir(f"/proc/{int(pid)}/fd")
    except (OSError, ValueError):
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{int(pid)}/fd/{fd}")  # (the open file itself, whatever its name now)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == want[:2]:
            return True
    return False


def user_name(uid: int) -> str:
    """``ann`` (uid 1000's name), or the number where it has none."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def not_own(pid: int, started: Optional[int], marker: tuple[str, str], cmd: Optional[list[str]] = None,
            holds: Optional[object] = None, owner: Optional[int] = None) -> Optional[str]:
    """Why process ``pid`` cannot be proven to be the one a run record names, or None when it is
    proven: alive with the recorded start time (``started``: a record without one proves
    nothing), run by ``owner`` (the uid that owns the record naming it, where given: a record
    another user wrote names none of this user's, nor root's, processes), the recorded command
    line ``cmd`` (where recorded), and either the environment marker ``marker`` (NAME, VALUE: set
    by the launcher where it started the process) or, for a process it did not start (the
    launcher itself, run in a terminal), the file ``holds`` open (the run's events.jsonl, that
    file itself: ``holds_open``). The caller says so in one line and signals nothing unless None."""
    now = start_time(pid)
    if now is None:
        return f"process {pid} is not running"
    if started is None:
        return f"the record gives no start time for process {pid}"
    if now != started:
        return f"process {pid} started at another time than the record says (a different process)"
    if owner is not None:
        runs_as = uids(pid)
        if runs_as is None:
            return f"process {pid} is not running"
        if runs_as != (owner, owner):
            return (f"process {pid} runs as user {user_name(runs_as[1])}, and the record is {user_name(owner)}'s "
                    "(a record names only its own user's processes)")
    if cmd is not None and cmdline(pid) != cmd:
        return f"process {pid} runs another command line than the record says"
    name, value = marker
    if environ_value(pid, name) == value:
        return None
    if holds is not None and holds_open(pid, holds):
        return None
    return (f"process {pid} carries no {name}={value} marker" + (" and does not hold the run's record open"
                                                                   if holds is not None else ""))


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


class OutputTooLarge(Exception):
    """A command run by ``run_bounded`` printed more than its bound on stdout (it was ended)."""


class Aborted(Exception):
    """A command run by ``run_bounded`` was ended because its ``abort`` check said so."""


ABORT_EVERY = 0.1  # s between run_bounded's calls of its abort check


def run_bounded(argv: "list[str]", timeout: float, *, cwd=None, env=None, out_bytes: int = 8 << 20,
                err_bytes: int = 64 << 10, abort=None) -> "tuple[int, bytes, bytes]":
    """Run ``argv`` (stdin /dev/null) in a process group of its own; (exit code, stdout, the start of
    stderr). ``subprocess.TimeoutExpired`` past ``timeout`` seconds, OutputTooLarge past ``out_bytes``
    of stdout, Aborted once ``abort()`` (called every ABORT_EVERY s while it runs) is true; OSError if
    it cannot start. However it ends, nothing it started is left: its whole
    process group is killed, and so is any process still holding one of its pipes (a grandchild that
    left the group with ``setsid`` but kept stdout keeps the pipe open: it would outlive the timeout,
    and reading would wait on it). Never waits past ``timeout`` plus a moment for the kill."""
    import selectors
    import subprocess

    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    pipes = [proc.stdout, proc.stderr]
    inodes = {os.fstat(p.fileno()).st_ino for p in pipes}
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    closed = False  # both pipes at their end: no process holds them any more
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout)
                if abort is not None and abort():
                    raise Aborted
                for key, _ in sel.select(left if abort is None else min(left, ABORT_EVERY)):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fileobj)
                    elif key.data is out:
                        out += data
                        if len(out) > out_bytes:
                            raise OutputTooLarge
                    elif len(err) < err_bytes:
                        err += data[: err_bytes - len(err)]
        closed = True
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        code = proc.wait(left)
        return code, bytes(out), bytes(err)
    finally:
        end_everything(proc, () if closed else inodes)  # (the /proc walk only when a pipe is still held)
        for p in pipes:
            p.close()


def end_everything(proc, pipe_inodes=()) -> None:
    """SIGKILL ``proc``'s process group (it was started with ``start_new_session``) and every process
    of this user that still holds one of the pipes ``pipe_inodes``; then reap ``proc``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pipe_holders(pipe_inodes):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(5)
    except Exception:  # noqa: BLE001 - killed; a zombie the next wait reaps
        pass


def pipe_holders(inodes) -> "list[int]":
    """Pids (other than this process) with a file descriptor on one of the pipes ``inodes``."""
    wanted = {f"pipe:[{i}]" for i in inodes}
    if not wanted:
        return []
    me, found = os.getpid(), []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or another user's
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found
