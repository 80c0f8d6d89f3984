#!/usr/bin/env python3
"""Run one task so that it can never outlive the launcher that started it.

Standalone and stdlib-only: the local backend runs it with the launcher's Python, the ssh
backend copies it to each host. Usage::

    python3 taskwrap.py [--lease SECONDS] [--grace SECONDS] [--pidfile PATH] [--cwd DIR] [--threads VAR]
                        [--gpus VAR [--gpu-memory-var NAME] [--collective-var NAME]] [--gpu-watch SECONDS] -- ARGV...

* It makes itself the leader of a new session and process group, and the task runs in that
  same group, so ``killpg(wrapper_pid, sig)`` reaches the task and everything it spawned.
* Its standard input is a lifeline from the launcher (a pipe locally, the SSH channel
  remotely). End of file -- the launcher died or the network dropped -- means: SIGTERM the
  group, wait ``--grace`` seconds, SIGKILL the group. With ``--lease N`` the launcher must
  also write a byte at least every N seconds, which catches a silent network partition.
* Stop it by signalling the whole group (``killpg``); the wrapper ignores SIGTERM/SIGINT/SIGHUP
  itself and stays to report the exit code.
* ``--threads VAR``: the environment variable VAR, if set, is the task's place on its host
  (``I/N``, a ``devices: {threads: auto}`` budget the plan could not make: launcher/plan/threads.py);
  the wrapper replaces it with TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS and OMP_NUM_THREADS
  (each unless already set) from this host's cores (its CPU affinity, capped by a cgroup limit).
* ``--gpus VAR``: VAR, if set, is the task's GPU request (launcher/remote/gpuplace.py; taskenv.py
  makes it, both next to this file: shipped with it, see launcher/remote/__init__.py); the wrapper makes it from this host's GPUs (``nvidia-smi -L``):
  CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, TF_FORCE_GPU_ALLOW_GROWTH and the memory limit
  (``--gpu-memory-var``'s name), each unless already set, and says which in one line
  (``taskwrap: GPUs given 0,1``, or ``none``: the ssh backend records it). A host that cannot meet
  it (fewer GPUs than asked) is one line on stderr and exit 2, the task not started.
* ``--gpu-watch SECONDS``: where ``nvidia-smi`` answers and the task has GPUs, sample what its
  process group holds on them and how busy they are (gpuquery.py's queries, as the launcher's
  own watch does locally) at once and then every SECONDS, and write each changed figure as one
  line ``taskwrap: GPU figures [MiB, util]`` (the ssh backend records it and does not log it).
  An nvidia-smi that fails three times in a row ends it, said once.
* ``--zygote PATH [--zygote-wait SECONDS]``: the task is forked by the host's zygote (zygote.py,
  asked with zygoteask.py) rather than exec'd here; the wrapper passes it the signals it catches
  and reports its exit as its own. Where the zygote will not serve it: one line, a plain start.
* ``--standby-defer STANDBY,STANDBY_ENV`` (with ``--zygote``): a warm standby whose process the
  zygote forks only once it is promoted (zygoteask.py defer_standby); until then it is this wrapper.
  SIGTERM, SIGINT or SIGHUP before the promotion end it at once (128+N).
* ``--control VAR``: the wrapper owns the task's output (taskstream.py): the task's stdout and stderr
  a pipe, its control channel another that VAR names, both framed on the wrapper's stdout with its
  own lines. Without it the task writes on the wrapper's stdout and stderr (Slurm's srun).
* It exits with the task's exit code, or 128+N when the task died of signal N, the same
  convention a shell, SSH and Docker use, so every backend reports exits alike.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shipped beside it (TASK_FILES)
from sibling import sibling  # noqa: E402

sys.path.pop(0)

_PR_SET_PDEATHSIG = 1


# How the wrapper says the lease ran out (the launcher recognises the line: launcher/backends/ssh/task.py).
LEASE_EXPIRED = "no word from the launcher for"
# How the wrapper says GCE announced this VM's preemption (likewise recognised by the launcher).
GCE_NOTICE = "GCE preemption notice"

def _parse(argv: list[str]) -> tuple[dict, list[str]]:
    opts = {"lease": 0.0, "grace": 5.0, "pidfile": None, "cwd": None, "gce-metadata": "off", "threads": None,
            "gpus": None, "gpu-memory-var": "", "gpu-watch": 0.0, "collective-var": "", "zygote": None,
            "zygote-wait": 60.0, "standby-defer": "", "control": ""}
    if "--" not in argv:
        sys.stderr.write("taskwrap: usage: taskwrap.py [options] -- ARGV...\n")
        sys.exit(2)
    split = argv.index("--")
    head, cmd = argv[:split], argv[split + 1 :]
    it = iter(head)
    for flag in it:
        name = flag.lstrip("-")
        if name not in opts:
            sys.stderr.write(f"taskwrap: unknown option {flag}\n")
            sys.exit(2)
        value = next(it, None)
        if value is None:
            sys.stderr.write(f"taskwrap: {flag} needs a value\n")
            sys.exit(2)
        opts[name] = float(value) if name in ("lease", "grace", "gpu-watch", "zygote-wait") else value
    if not cmd:
        sys.stderr.write("taskwrap: no command given after --\n")
        sys.exit(2)
    return opts, cmd


def _set_pdeathsig(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# The wrapper's own lines: one lock so that lines from its threads never interleave, and each
# written with os.write on descriptor 2, never through sys.stderr. sys.stderr is a buffered
# stream (unless PYTHONUNBUFFERED is set) whose lock a thread holds for as long as its write
# blocks (a launcher or SSH channel slow to read); a daemon thread holding it when the
# interpreter shuts down made the wrapper abort ("Fatal Python error: _enter_buffered_busy:
# could not acquire lock for <stderr> at interpreter shutdown"), and the task's exit code became
# 134. The wrapper also ends with os._exit (end below), so no thread of its own decides its code.
_SAY_LOCK = threading.Lock()
_STREAM: list = []  # --control: the framed stream (taskstream.Stream) every line of the wrapper's goes on


def _say(text: str, fd: int = 2) -> None:
    """``text`` on ``fd``; with --control a wrapper frame (``fd`` 1, a standby's protocol: a control one)."""
    if _STREAM:
        with _SAY_LOCK:
            (_STREAM[0].control if fd == 1 else _STREAM[0].say)(text)
        return
    data = text.encode("utf-8", "replace")
    with _SAY_LOCK:
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            pass  # the reader is gone (EPIPE) or stderr is closed: the line is dropped


def end(code: int) -> None:
    """End the wrapper with ``code`` whatever its daemon threads are doing: a line being written
    gets a bounded while to finish (one second: a reader that has stopped reading does not hold
    the task's code back), then the process exits without the interpreter's shutdown."""
    if _SAY_LOCK.acquire(timeout=1.0):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # nothing of the wrapper's own goes there after _parse; kept for safety
            except (OSError, ValueError, AttributeError):
                pass
    os._exit(code)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start_ticks() -> str:
    """This process's start time (/proc/self/stat field 22, clock ticks since boot), written into
    the pid file: ``tfcluster down`` signals the pid only while it is still this process."""
    try:
        with open("/proc/self/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def main(argv: list[str]) -> int:
    opts, cmd = _parse(argv)
    pgid = _own_group()
    if opts["control"]:
        _STREAM.append(sibling("taskstream").TaskStream())
    problem = _prepare(opts)
    if problem:
        _say(f"taskwrap: {problem}; the task was not started\n")
        return 2
    groups = [pgid]  # and a task the zygote forked leads a group of its own, added once it is there
    stopping = threading.Event()
    stop_group = _group_stopper(groups, opts["grace"], stopping)
    _survive_stop_signals(groups)
    zygote, lifeline = opts["zygote"], True
    if zygote and opts["standby-defer"]:
        lifeline = False  # watched from now on, by _defer_standby
        if opts["pidfile"]:  # its task is this wrapper until promoted (a promotion signals it by its pid file)
            _write_pidfile(opts["pidfile"], os.getpid())
        why = _defer_standby(opts, cmd, stop_group)
        if why:  # not served: the standby runs as its own process, from now on
            _say(f"taskwrap: started without the zygote: {why}\n")
            zygote = None
    stdio = _STREAM[0].for_task(opts["control"]) if _STREAM else None
    child, served = _start_served(zygote, cmd, opts["zygote-wait"], stdio) if zygote else (None, None)
    if child is not None:
        groups.append(child)
        if stopping.is_set():  # stopped while the zygote forked it: its group goes too
            _killpg(child, signal.SIGKILL)
    child = _start_task(cmd, stdio) if child is None else child
    if _STREAM:
        _STREAM[0].start()  # (its ends of the task's pipes closed here: the task holds them now)
    if opts["pidfile"]:
        _write_pidfile(opts["pidfile"], child)
    ended = threading.Event()
    _start_watchers(opts, groups, child, stop_group, stopping, ended, lifeline)
    code = _wait_served(served, child, groups, ended) if served is not None else _wait_and_reap(child, pgid, ended)
    return _STREAM[0].drained(code) if _STREAM else code


def _defer_standby(opts: dict, cmd: list[str], stop_group) -> str:
    """--standby-defer (zygoteask.py defer_standby): "" once promoted, else why not served; the
    lifeline is watched from the start; a stop before the promotion ends the wrapper."""
    blocked = {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # before any thread: every one inherits it
    threading.Thread(target=_watch_lifeline, args=(opts["lease"], stop_group), daemon=True).start()
    try:
        zygote = sibling("zygoteask")
    except ImportError as exc:  # not shipped beside this copy
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        return str(exc)
    got = zygote.defer_standby(opts["zygote"], cmd, opts["zygote-wait"], opts["standby-defer"], blocked, _say)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)  # a stop that came meanwhile: handled now
    if isinstance(got, int):
        end(128 + got)  # stopped before its promotion: nothing was forked
    return got


def _own_group() -> int:
    """Lead a process group of its own (the task's group, which a stop signals as a whole): its id."""
    if os.getpgid(0) != os.getpid():
        try:
            os.setsid()
        except OSError:
            os.setpgid(0, 0)
    return os.getpgid(0)


def _prepare(opts: dict) -> "str | None":
    """The task's directory, thread budget and GPUs, before it starts: a problem that keeps it from
    starting, or None."""
    if opts["cwd"]:
        os.chdir(opts["cwd"])
    if not (opts["threads"] or opts["gpus"]):
        return None
    taskenv = sibling("taskenv")
    if opts["threads"]:
        taskenv.thread_budget(opts["threads"])
    if opts["gpus"]:
        return taskenv.gpu_request(opts["gpus"], opts["gpu-memory-var"], opts["collective-var"], _say)
    return None


def _start_task(cmd: list[str], stdio: "tuple | None" = None) -> int:
    """Fork and exec the task (in this group): the child's pid. Never returns in the child.
    ``stdio``: its output and control pipe ends (_task_stdio), else it writes on the wrapper's."""
    child = os.fork()
    if child == 0:
        # In the task: die with the wrapper even if the wrapper itself is SIGKILLed.
        _set_pdeathsig(signal.SIGKILL)
        if stdio is not None:
            sibling("taskstream").exec_task(cmd, stdio[0], stdio[1])
        # The lifeline is the wrapper's: a task reading stdin must not swallow lease bytes.
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            _say(f"taskwrap: cannot run {cmd[0]!r}: {exc.strerror}\n")
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    return child


def _start_served(path: str, cmd: list[str], wait: float, stdio: "tuple | None" = None):
    """The task forked by the host's zygote (zygote.py): (its pid, the connection its exit comes
    on), or (None, None) where it does not serve it (then it starts as ever, said in one line).
    ``stdio``: its output and control pipe ends and the control's variable (_task_stdio)."""
    try:
        zygote = sibling("zygoteask")
        devnull = os.open(os.devnull, os.O_RDONLY)  # the lifeline stays the wrapper's, as below
        fds, control = ([devnull, stdio[0], stdio[0], stdio[1]], stdio[2]) if stdio else ([devnull, 1, 2], "")
        sock, got = zygote.ask(path, cmd, dict(os.environ), os.getcwd(), fds, wait, control=control)
        os.close(devnull)
    except ImportError as exc:  # not shipped beside this copy: the task starts as ever
        sock, got = None, exc
    if sock is None:
        _say(f"taskwrap: started without the zygote: {got}\n")
        return None, None
    return got, sock


def _wait_served(sock, child: int, groups: list[int], ended: threading.Event) -> int:
    """_wait_and_reap for a task the zygote forked: its exit from the zygote (128+N for signal N),
    its groups' leftovers taken down with it."""
    status = sibling("zygoteask").wait_status(sock, child)
    ended.set()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for group in groups:
        for member in _group_members(group):
            try:
                os.kill(member, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    if status is None:
        _say("taskwrap: the task's waiter ended before the task: its exit code is unknown (137)\n")
        return 137
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _write_pidfile(path: str, child: int) -> None:
    """``WRAPPER_PID TASK_PID START_TICKS`` at ``path``, replaced whole (the start time: ``tfcluster
    down`` signals the pid only while it is still this process)."""
    # (exclusive, a name no one planted: a symlink at PIDFILE.tmp is never written through)
    tmp = f"{path}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()} {child} {_start_ticks()}\n")
    os.replace(tmp, path)


def _group_stopper(groups: list[int], grace: float, stopping: threading.Event):
    """stop_group(reason): say why, SIGTERM the groups (the wrapper's, and a zygote-forked task's
    own), SIGKILL them (this wrapper too, last) after ``grace`` seconds or once they are empty;
    only the first call acts (``stopping`` is set by it)."""
    pgid = groups[0]
    def stop_group(reason: str) -> None:
        if stopping.is_set():
            return
        stopping.set()
        # The line first (the launcher reads the reason from it): while the task lives, the wrapper's
        # main thread cannot end before it is out. The launcher may be gone with the read end of
        # stderr, or no longer reading it: the line is written by a thread of its own and waited for
        # a bounded while, so that a blocked write cannot hold back the stop.
        sayer = threading.Thread(target=_say, args=(f"taskwrap: {reason}; stopping task group {pgid}\n",), daemon=True)
        sayer.start()
        sayer.join(2.0)
        for group in groups:
            _killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_group_members(g) for g in groups):
            time.sleep(0.05)
        for group in reversed(groups):
            _killpg(group, signal.SIGKILL)  # this wrapper's last: nothing outlives the lifeline
    return stop_group


def _survive_stop_signals(groups: list[int]) -> None:
    def ignore(signum: int, _frame) -> None:
        """Stop signals reach the task because senders signal the whole group; the wrapper
        itself stays to report the exit code. A Python handler, not SIG_IGN, because the
        task inherits ignored dispositions across exec. A task the zygote forked is in a
        group of its own (``groups`` after the wrapper's): the signal is passed on to it."""
        for group in groups[1:]:
            _killpg(group, signum)

    # SIGUSR1 wakes a warm-standby task (sent to the group); SIGUSR2 asks a task for its stacks
    # (launcher/contract/liveness.py: where a backend can only signal the group, docker's init
    # and slurm's step); the wrapper must survive both.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, ignore)


def _watch_lifeline(lease: float, stop_group) -> None:
    """Stop the group when stdin (the launcher's lifeline) closes or, with a lease, stays silent
    for ``lease`` seconds."""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    fd = stdin.fileno()
    last = time.monotonic()
    while True:
        timeout = 1.0 if lease <= 0 else max(0.1, min(1.0, lease / 4))
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        except (OSError, ValueError):
            stop_group("lifeline unreadable")
            return
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:
                stop_group("launcher went away (lifeline closed)")
                return
            last = time.monotonic()
        elif lease > 0 and time.monotonic() - last > lease:
            stop_group(f"{LEASE_EXPIRED} {lease:g} s (lease expired)")
            return


def _start_watchers(opts: dict, groups: list[int], child: int, stop_group, stopping: threading.Event,
                    ended: threading.Event, lifeline: bool = True) -> None:
    """The daemon threads beside the task: the lifeline (unless watched already), its process stopped
    by a signal (said in wrapper frames, with --control), the GCE preemption notice, the GPU watch."""
    if _STREAM:
        threading.Thread(target=sibling("taskstream").watch_stop, args=(child, _say, ended), daemon=True,
                         name="stop-watch").start()
    if lifeline:
        threading.Thread(target=_watch_lifeline, args=(opts["lease"], stop_group), daemon=True).start()
    gcewatch = sibling("gcewatch") if opts["gce-metadata"] != "off" else None
    gce = gcewatch.metadata_host(opts["gce-metadata"]) if gcewatch else ""
    if gce:
        def on_notice() -> None:
            _say(f"taskwrap: {GCE_NOTICE} (metadata {gcewatch.PATH} is TRUE): stopping the task gracefully (SIGTERM) "
                 "before the OS shutdown\n")
            for group in groups:
                _killpg(group, signal.SIGTERM)

        threading.Thread(target=gcewatch.watch, args=(gce, on_notice, stopping), daemon=True).start()
    if opts["gpu-watch"] > 0:
        threading.Thread(target=sibling("taskenv").watch_gpus, daemon=True, name="gpu-watch",
                         args=(opts["gpu-watch"], os.environ.get("CUDA_VISIBLE_DEVICES"),
                               lambda: [m for g in groups for m in _group_members(g)] + [child], ended, _say)).start()


def _wait_and_reap(child: int, pgid: int, ended: threading.Event) -> int:
    """Wait for the task, take its leftovers down with it: its exit code (128+N for signal N)."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    ended.set()
    # Leftover grandchildren of a finished task would be orphans: take them down with it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for member in _group_members(pgid):
        try:
            os.kill(member, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _group_members(pgid: int) -> list[int]:
    """PIDs in process group ``pgid`` other than this wrapper (from /proc, Linux)."""
    me = os.getpid()
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return out


if __name__ == "__main__":
    end(main(sys.argv[1:]))
