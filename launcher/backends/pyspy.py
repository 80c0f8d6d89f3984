"""A task's native frames, where py-spy is installed where the task runs: ``py-spy dump --native
--pid PID``, beside the Python stacks faulthandler gives (launcher/contract/liveness.py).

faulthandler shows each thread's Python frames, needing nothing; a thread blocked inside
TensorFlow's C++ (a collective, a queue, a lock of its own) shows only the Python call that
entered it. py-spy reads the process from outside (ptrace and process_vm_readv: root, or the same
user where ``kernel.yama.ptrace_scope`` is 0) and unwinds the C frames too. It is optional: found
beside the task's interpreter (``pip install py-spy`` in the task's virtualenv puts it there) or
on PATH; where it is not, or may not read the process, one line says so and the Python stacks
stand alone. Its text comes from another process's memory (thread names are the user's), so each
line is escaped and the whole bounded.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from typing import Optional, Sequence

from launcher.bounded import escape
from launcher.system.procinfo import Aborted, run_bounded, state

HEADER = "native frames (py-spy dump --native, pid {pid}):"
WAIT = 20.0  # seconds one dump may take (a process with many threads, on a loaded host: ~1-3 s)
# py-spy holds the task stopped (ptrace) while it unwinds: 2.0-2.9 s for a training TensorFlow
# worker on a host at load 2-3.5 (two workers dumped at once). TensorFlow's coordination service
# ends the group when a task's heartbeats are 10 s late: 2 MWMS workers, the leader SIGSTOPped for
# 3, 4.5 or 6 s trained on (4 trials), for 8 s both ended in 3 of 4 trials and for 9-15 s in all 5
# ("Task /job:worker/replica:0/task:0 heartbeat timeout"). Past PAUSE_LIMIT s py-spy is killed
# (the kernel lets the task run on) and the stacks go without native frames: a look at a live run
# never ends it.
PAUSE_LIMIT = 4.0
HELD = ("native frames: none: py-spy held the task stopped past {limit:g} s and was ended, so that "
        "TensorFlow's heartbeat timeout (10 s) does not end the task; the Python stacks stand alone")
MAX_LINES = 400
MAX_LINE = 300
NOT_FOUND = "native frames: py-spy is not installed where this task runs (pip install py-spy, beside its python)"


def find(interpreter: str) -> Optional[str]:
    """py-spy beside ``interpreter`` (the task's argv[0], a virtualenv's bin), else on PATH."""
    if interpreter and os.sep in interpreter:
        near = os.path.join(os.path.dirname(interpreter), "py-spy")
        if os.path.isfile(near) and os.access(near, os.X_OK):
            return near
    return shutil.which("py-spy")


def shown(out: bytes, pid: int) -> str:
    """py-spy's output as the stacks file keeps it: under HEADER, from its ``Python v...`` line on
    (the ``Process N: <command line>`` before it can be hundreds of lines: the stub's ``-c`` text),
    each line escaped and cut, at most MAX_LINES lines (the rest counted)."""
    lines = out.decode("utf-8", errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Python v")), 0)
    lines = lines[start:]
    kept = [escape(line)[:MAX_LINE] for line in lines[:MAX_LINES]]
    if len(lines) > MAX_LINES:
        kept.append(f"... {len(lines) - MAX_LINES} more lines")
    return "\n".join([HEADER.format(pid=pid), *kept])


def failed(code: int, err: bytes) -> str:
    """One line for a dump that gave nothing: py-spy's own first words, escaped."""
    first = next((line for line in err.decode("utf-8", errors="replace").splitlines() if line.strip()), "")
    why = escape(first.strip())[:200] or f"exit {code}"
    hint = "; it needs root, or ptrace of the task's user (kernel.yama.ptrace_scope 0)" \
        if "ermission" in first or "ptrace" in first.lower() else ""
    return f"native frames: py-spy gave none ({why}){hint}"


# TensorFlow's threads (their names start "tf_": its compute and data pools) that py-spy does not
# show (it dumps the threads that run Python): each one's system call and kernel wait, from /proc,
# read before py-spy pauses the process (launcher/supervise/tfplace.py reads them).
THREADS = "threads of TensorFlow (from /proc: name, system call, kernel wait):"
MAX_THREADS = 400  # threads of a task looked at
_FIELD = 64  # bytes of each /proc field kept (a thread's name is the task's to choose)


def thread_states(pid: int, root: str = "/proc") -> str:
    """THREADS and a line per TensorFlow thread of ``pid`` (``tid N NAME: syscall S in WAIT``; S is
    the system call's number, ``-`` where /proc does not say), or "" where there is none."""
    base = os.path.join(root, str(pid), "task")
    try:
        tids = sorted(os.listdir(base), key=lambda t: int(t) if t.isdigit() else 0)[:MAX_THREADS]
    except OSError:
        return ""
    lines = []
    for tid in tids:
        name, call, wait = (_field(os.path.join(base, tid, f)) for f in ("comm", "syscall", "wchan"))
        if name.startswith("tf_"):
            lines.append(f"  tid {escape(tid)[:12]} {escape(name).replace(' ', '_') or '-'}: syscall "
                         f"{escape(call.split(' ', 1)[0]) or '-'} in {escape(wait).replace(' ', '_') or '-'}")
    return "\n".join([THREADS, *lines]) if lines else ""


def _field(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(_FIELD).decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def dump_local(pid: int, argv0: str, timeout: float = WAIT, pause_limit: float = PAUSE_LIMIT) -> str:
    """The native frames of process ``pid`` on this machine (its interpreter ``argv0``), then its
    TensorFlow threads' states (``thread_states``); py-spy ended if it holds the process stopped
    ``pause_limit`` s (HELD)."""
    threads = thread_states(pid)
    frames = _spy_local(pid, argv0, timeout, pause_limit)
    return frames + ("\n" + threads if threads else "")


class Held:
    """True once process ``pid`` has been stopped by a tracer (state ``t``) for ``limit`` seconds
    without a break (0: at the first look that finds it so): ``run_bounded``'s abort check for a
    py-spy dump."""

    def __init__(self, pid: int, limit: float, clock=None):
        self.pid, self.limit, self.clock = pid, limit, clock or time.monotonic
        self.since: Optional[float] = None

    def __call__(self) -> bool:
        if state(self.pid) != "t":
            self.since = None
            return False
        now = self.clock()
        self.since = now if self.since is None else self.since
        return now - self.since >= self.limit


def _spy_local(pid: int, argv0: str, timeout: float, pause_limit: float = PAUSE_LIMIT) -> str:
    spy = find(argv0)
    if spy is None:
        return NOT_FOUND
    before = state(pid)
    try:
        code, out, err = run_bounded([spy, "dump", "--native", "--pid", str(pid)], timeout, out_bytes=1 << 20,
                                     abort=Held(pid, pause_limit))
    except Aborted:
        _run_on(pid, before)
        return HELD.format(limit=pause_limit)
    except subprocess.TimeoutExpired:
        _run_on(pid, before)
        return f"native frames: py-spy took over {timeout:g} s; none"
    except OSError as exc:
        return f"native frames: py-spy did not start ({escape(str(exc))[:200]})"
    except Exception:  # noqa: BLE001 - OutputTooLarge: a dump of over 1 MiB is no dump to keep
        return "native frames: py-spy wrote over 1 MiB; none kept"
    return shown(out, pid) if code == 0 and out.strip() else failed(code, err)


def _run_on(pid: int, before: str) -> None:
    """After py-spy was killed: the kernel detached it and the task runs on, unless the stop of its
    attach was delivered as a signal's (state ``T``); such a task, running before, is continued."""
    if before != "T" and state(pid) == "T":
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def remote_command(verify: str, pidfile: str, own: str, pause_limit: float = PAUSE_LIMIT) -> str:
    """The shell command that dumps the task of ``pidfile`` on its host: ``verify`` (the pid file
    check of launcher/backends/ssh/commands.py, which sets ``$child`` or continues) first, then
    ``own`` (whether ``$child`` is the wrapper's task: sets ``$own``); py-spy beside the task's
    argv[0] (the first word of a title, for a task the host's fork server forked: its argv is one
    word, launcher/remote/zygotechild.py show_argv) or on PATH. It prints the task's TensorFlow
    threads (between ``threads`` and ``end threads``), ``pid N`` and then py-spy's output, or
    ``nospy`` where there is none, or ``held N`` where py-spy held the task stopped past
    ``pause_limit`` s (its state read every 0.1 s, the time from /proc/uptime) and was killed."""
    limit = max(0, int(round(pause_limit * 100)))  # centiseconds, as /proc/uptime counts
    return (
        # _st PID: the process's state letter ("" once it is gone), its name skipped to the last ")"
        '_st() { _s=$(cat /proc/$1/stat 2>/dev/null); _s=${_s##*")"}; set -- $_s; echo "$1"; }; '
        + f"for pf in {shlex.quote(pidfile)}; do " + verify
        + 'case $child in ""|*[!0-9]*) echo "nopid"; continue;; esac; '
        + own + '{ [ -n "$own" ] && [ "$child" != "$pid" ]; } || { echo "gone"; continue; }; '
        + 'echo "threads"; for t in /proc/$child/task/*; do n=$(head -c 64 $t/comm 2>/dev/null); '
        + 'case $n in tf_*) echo "  tid ${t##*/} $n $(head -c 64 $t/syscall 2>/dev/null | cut -d" " -f1) '
        + '$(head -c 64 $t/wchan 2>/dev/null)";; esac; done | head -n 400; echo "end threads"; '
        + 'first=$(tr "\\0" "\\n" < /proc/$child/cmdline 2>/dev/null | head -n 1); spy=""; '
        + '[ "$(tr "\\0" "\\n" < /proc/$child/cmdline 2>/dev/null | wc -l)" -gt 1 ] || first=${first%% *}; '
        + 'case $first in */*) [ -x "${first%/*}/py-spy" ] && spy="${first%/*}/py-spy";; esac; '
        + '[ -n "$spy" ] || spy=$(command -v py-spy 2>/dev/null); '
        + '[ -n "$spy" ] || { echo "nospy"; continue; }; '
        + 'o=$(mktemp) || continue; b=$(_st $child); h=; '
        # (in a session of its own where setsid is, so that a py-spy that is a wrapper ends whole)
        + 'ss=; command -v setsid >/dev/null 2>&1 && ss=setsid; '
        + '$ss "$spy" dump --native --pid "$child" > "$o" 2>&1 & sp=$!; t0=; '
        + 'while s=$(_st $sp); [ -n "$s" ] && [ "$s" != Z ]; do '
        + 'if [ "$(_st $child)" = t ]; then read up _ < /proc/uptime; up=${up%.*}${up#*.}; '
        + '[ -n "$t0" ] || t0=$up; '
        + f'if [ $((up - t0)) -ge {limit} ]; then kill -9 -$sp 2>/dev/null || kill -9 $sp; h=1; break; fi; else t0=; fi; sleep 0.1; done; '
        + 'wait $sp 2>/dev/null; '
        + 'if [ -n "$h" ]; then [ "$b" != T ] && [ "$(_st $child)" = T ] && kill -s CONT "$child"; '
        + 'echo "held $child"; else echo "pid $child"; cat "$o"; fi; rm -f "$o"; done; true'
    )


def from_remote(code: int, out: str, pause_limit: float = PAUSE_LIMIT) -> str:
    """What ``remote_command`` printed, as the stacks file keeps it ("" for a task that is gone):
    py-spy's frames, then the task's TensorFlow threads (as ``thread_states``)."""
    lines: Sequence[str] = out.splitlines()
    threads: list[str] = []
    if "threads" in lines and "end threads" in lines:
        start, end = lines.index("threads"), lines.index("end threads")
        for line in lines[start + 1:end]:
            words = line.split()
            if len(words) >= 3 and words[0] == "tid":
                call = words[3] if len(words) > 4 else "-"
                threads.append(f"  tid {escape(words[1])[:12]} {escape(words[2])[:64]}: syscall {escape(call)[:12]} "
                               f"in {escape(words[-1])[:64] if len(words) > 3 else '-'}")
        lines = list(lines[:start]) + list(lines[end + 1:])
    frames = _frames_remote(code, lines, pause_limit)
    if not threads:
        return frames
    return (frames + "\n" if frames else "") + "\n".join([THREADS, *threads])


def _frames_remote(code: int, lines: Sequence[str], pause_limit: float = PAUSE_LIMIT) -> str:
    if code != 0 or not lines or lines[0].startswith(("nopid", "gone")):
        return ""
    if lines[0].strip() == "nospy":
        return NOT_FOUND
    head = lines[0].split()
    if len(head) == 2 and head[0] == "held" and head[1].isdigit():
        return HELD.format(limit=pause_limit)
    if len(head) != 2 or head[0] != "pid" or not head[1].isdigit():
        return ""
    rest = "\n".join(lines[1:]).encode()
    looks = any(line.startswith("Thread ") for line in lines[1:])
    return shown(rest, int(head[1])) if looks else failed(1, rest)
