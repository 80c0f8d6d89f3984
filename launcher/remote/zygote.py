#!/usr/bin/env python3
"""A host's fork server ("zygote"): one interpreter that imports TensorFlow once, then forks each
Python task of the host from there, so the tasks and their warm standbys share the import's
memory (copy on write) and pay its CPU once (BENCHMARKS.md, "A zygote").

Standalone and stdlib-only, shipped next to taskwrap.py. Usage::

    python zygote.py --socket PATH [--import MODULE[,MODULE...]] [--pad NAME] [--title ROOM]

* ``--title ROOM``: ROOM (any text, its last option) is room in its argv for each child's title:
  /proc/PID/cmdline (``ps``, ``pgrep -f``) shows the child's own argv, not ``zygote.py``
  (zygotechild.show_argv).
* ``--pad NAME``: the variable NAME of its environment is room (its value, any text) for each
  child's own variables in the environment /proc/PID/environ shows: the block the kernel shows is
  the one a process started with, the zygote's, unless it is rewritten in place (_show_environ).
* It binds PATH (a unix socket, mode 0600: bound under umask 077) and listens at once, then
  imports the modules; a request that came meanwhile waits in the backlog for the import.
* The wrapper (taskwrap.py ``--zygote PATH``) connects and sends its task: argv, environment and
  working directory, with its stdin/stdout/stderr as descriptors (SCM_RIGHTS). Only a peer of this
  process's own uid is served (SO_PEERCRED): another user of the host gets nothing forked.
* Served only where a cold start of argv would be this very interpreter: ``python [FLAGS] -c CODE
  | -m MODULE | SCRIPT ARGS...`` with this executable, this process's FLAGS, and the same
  environment but for the variables each task has its own of (TASK_OWN). Else the answer is
  ``{"cold": why}`` and the wrapper starts the task as it always has (exec).
* A request with ``"check": true`` forks nothing: the answer is ``{"ok": true}`` where the task
  would be served (the imports done), else ``{"cold": why}``. A standby's wrapper asks it to say it
  is ready, and asks for the fork itself only when promoted (taskwrap.py ``--standby-defer``).
* Served: ``{"pid": N}``, N a child forked in its own session, with the wrapper's descriptors as
  its stdio (and a fourth, its control channel, where the request names its variable: taskstream.py), the environment and directory given, Python's own signal dispositions, its random
  generators reseeded, and the entry run as ``__main__`` as the interpreter runs it (sys.argv,
  sys.path[0]). The child ends itself and its group once the wrapper is gone (a pidfd of the
  wrapper, watched by a thread), since it is not the wrapper's child. Its exit is sent to the
  wrapper as ``{"status": S}`` (waitpid's status), then the connection closes.
* Not served at all (the socket removed, one line, exit 0) where the import opened an NVIDIA
  device: a CUDA context made before a fork is unusable in the child.

Threads: the server is one thread (the import's only others are OpenBLAS's pool, which OpenBLAS
remakes in a child); nothing of TensorFlow's runtime has started when it forks.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling, shipped beside it
import zygotechild as forked  # noqa: E402

sys.path.pop(0)

# What every task of a host has its own of: they may differ between the zygote and a task.
TASK_OWN_PREFIXES = ("TFCLUSTER_",)
TASK_OWN = frozenset({
    "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_GPU_ALLOCATOR", "TF_PER_PROCESS_GPU_MEMORY_FRACTION",
    "PWD", "OLDPWD", "SHLVL", "_",
})
MAX_REQUEST = 8 * 2**20  # argv and environment; the standby stub's text is about 40 KB
READ_TIMEOUT = 5.0  # s a peer has to send its whole request
SAY = "tfcluster-zygote"


def _say(text: str) -> None:
    try:
        os.write(2, f"{SAY}: {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


# ---- the zygote's side -------------------------------------------------------------------------

def _own_flags() -> list:
    """The interpreter options this zygote was started with (sys.orig_argv up to its script)."""
    orig = list(getattr(sys, "orig_argv", []))
    script = os.path.abspath(__file__)
    for i, word in enumerate(orig[1:], 1):
        if os.path.abspath(word) == script:
            return orig[1:i]
    return orig[1:]


def _entry(argv: list, env: dict, flags: list):
    """(mode, target, args) of a cold start of ``argv`` that this interpreter is, or (None, why)."""
    import shutil

    if not argv:
        return None, "no command"
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath)) if os.sep not in argv[0] else argv[0]
    if not exe or os.path.realpath(exe) != os.path.realpath(sys.executable):
        return None, f"{argv[0]!r} is not this zygote's interpreter ({sys.executable})"
    rest = list(argv[1:])
    if rest[:len(flags)] != flags:
        return None, f"interpreter options differ from the zygote's ({' '.join(flags) or 'none'})"
    rest = rest[len(flags):]
    if not rest:
        return None, "an interactive interpreter"
    if rest[0] in ("-c", "-m") and len(rest) >= 2:
        return (rest[0], rest[1], rest[2:]), ""
    if rest[0].startswith("-"):
        return None, f"interpreter option {rest[0][:20]!r} the zygote was not started with"
    return ("script", rest[0], rest[1:]), ""


def _env_differs(env: dict, before: dict) -> str:
    """The first variable (not a task's own) whose value differs from this zygote's environment
    as it started (``before`` the imports, which may set some), or ""."""
    def shared(items):
        return {k: v for k, v in items if k not in TASK_OWN and not k.startswith(TASK_OWN_PREFIXES)}

    mine, theirs = shared(before.items()), shared(env.items())
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return key
    return ""


def _cuda_opened() -> str:
    """An NVIDIA device this process has open (a CUDA context made by an import), or ""."""
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                return target
    except OSError:
        pass
    return ""


def _receive(conn):
    """(request dict, [fds]) from a connection, or (None, why)."""
    conn.settimeout(READ_TIMEOUT)
    msg, fds, _flags, _addr = socket.recv_fds(conn, 4, 4)
    if len(msg) != 4 or len(fds) not in (3, 4):
        for fd in fds:
            os.close(fd)
        return None, "a request without its header and three descriptors"  # (or four: the control channel)
    (size,) = struct.unpack("!I", msg)
    if size > MAX_REQUEST:
        for fd in fds:
            os.close(fd)
        return None, f"a request of {size} bytes (at most {MAX_REQUEST})"
    body = b""
    while len(body) < size:
        chunk = conn.recv(min(2**20, size - len(body)))
        if not chunk:
            break
        body += chunk
    try:
        req = json.loads(body)
        ok = (isinstance(req, dict) and isinstance(req.get("argv"), list) and isinstance(req.get("env"), dict)
              and isinstance(req.get("cwd"), str) and all(isinstance(a, str) for a in req["argv"])
              and all(isinstance(k, str) and isinstance(v, str) for k, v in req["env"].items())
              and (len(fds) == 3) == ("control" not in req) and isinstance(req.get("control", ""), str))
    except ValueError:
        ok = False
    if not ok:
        for fd in fds:
            os.close(fd)
        return None, "a malformed request"
    return req, fds


class Zygote:
    """The server: the listening socket, the connections of the children alive, SIGCHLD's pipe."""

    def __init__(self, path: str, listener, before: dict, pad: str = "") -> None:
        """``before``: the environment this process started with, before its imports; ``pad``:
        the variable that is room for a child's own (--pad)."""
        self.path, self.listener, self.pad = path, listener, pad
        self.before = before
        # What the imports set in the environment (TensorFlow sets one): a cold start's import
        # would set it in the task's too.
        self.added = {k: v for k, v in os.environ.items() if k not in before}
        self.flags = _own_flags()
        self.waiting: dict = {}  # child pid -> its wrapper's connection
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def serve(self) -> None:
        while True:
            ready, _, _ = select.select([self.listener, self.wake_r, *self.waiting.values()], [], [])
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
                self._reap()
            for pid, conn in list(self.waiting.items()):
                if conn in ready:
                    self._wrapper_gone(pid, conn)
            if self.listener in ready:
                conn, _ = self.listener.accept()
                self._serve_one(conn)

    def _wrapper_gone(self, pid: int, conn) -> None:
        """A wrapper never writes after its request: its end readable is its end closed, the
        wrapper gone (SIGKILLed with its group, its lifeline's end). Its task goes with it, by
        SIGKILL to the task's group: the task's own watch cannot act while it is stopped
        (SIGSTOP), and a stopped task would hold its port for ever."""
        try:
            if conn.recv(1, socket.MSG_PEEK):
                return
        except OSError:
            pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        self.waiting.pop(pid, None)
        conn.close()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                except OSError:
                    pass
                conn.close()

    def _serve_one(self, conn) -> None:
        try:
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
            if uid != os.getuid():
                conn.close()  # another user: nothing of ours, not even an answer
                return
            req, fds = _receive(conn)
        except (OSError, ValueError, struct.error):
            conn.close()
            return
        if req is None:
            self._answer(conn, {"cold": fds})
            return
        entry, why = _entry(req["argv"], req["env"], self.flags)
        differs = _env_differs(req["env"], self.before) if entry else ""
        if differs:
            entry, why = None, f"environment variable {differs[:60]!r} differs from the zygote's"
        if entry is None or req.get("check") is True:
            for fd in fds:
                os.close(fd)
            self._answer(conn, {"cold": why} if entry is None else {"ok": True})
            return
        try:
            peer = os.pidfd_open(pid)
        except OSError:
            for fd in fds:
                os.close(fd)
            conn.close()  # the wrapper is gone already
            return
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            self._become(conn, req, entry, fds, peer)  # never returns
        os.close(peer)
        for fd in fds:
            os.close(fd)
        self.waiting[child] = conn
        self._answer(conn, {"pid": child}, keep=True)

    @staticmethod
    def _answer(conn, what: dict, keep: bool = False) -> None:
        try:
            conn.sendall(json.dumps(what).encode() + b"\n")
        except OSError:
            pass
        if not keep:
            conn.close()

    def _become(self, conn, req: dict, entry, fds: list, peer: int) -> None:
        """In the child: the task's process, as a cold start of its argv would be."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sock in (conn, self.listener, *self.waiting.values()):
                sock.close()
            for fd in (self.wake_r, self.wake_w):
                os.close(fd)
            os.setsid()
            for i, fd in enumerate(fds[:3]):
                os.dup2(fd, i)
                os.close(fd)
            control = {}
            if len(fds) == 4:  # the task's control channel (taskstream.py): kept where it is, named in its env
                os.set_inheritable(fds[3], True)
                control = {req["control"]: str(fds[3])}
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update({**self.added, **req["env"], **control})
            if self.pad:
                forked.show_environ({k: v for k, v in {**req["env"], **control}.items() if self.before.get(k) != v},
                                    self.pad)
            forked.show_argv(req["argv"])
            forked.python_defaults()
            forked.watch(peer)
            code = forked.run_main(*entry)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the server
            forked.print_uncaught(exc)
            if isinstance(exc, KeyboardInterrupt):  # as the interpreter: killed by SIGINT
                forked.exit_as_interpreter(None, signal.SIGINT)
            code = 1
        forked.exit_as_interpreter(code)


def main(argv: list) -> int:
    path, mods, pad = None, ["tensorflow"], ""
    it = iter(argv)
    for flag in it:
        if flag == "--socket":
            path = next(it, None)
        elif flag == "--title":
            next(it, None)  # only room (show_argv)
        elif flag == "--pad":
            pad = next(it, "") or ""
        elif flag == "--import":
            mods = [m for m in (next(it, "") or "").split(",") if m]
        else:
            _say(f"unknown option {flag[:40]!r}")
            return 2
    if not path:
        _say("usage: zygote.py --socket PATH [--import MODULE,...] [--pad NAME]")
        return 2
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(128)
    import gc
    import importlib

    before = dict(os.environ)
    # As the reference worker does (worker/main.py import_tensorflow): the import's million
    # long-lived objects frozen, so no collection walks them again, in the zygote or a child
    # (a walk would also write to their pages, which the children share until then).
    gc.disable()
    try:
        for name in mods:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    finally:
        gc.freeze()
        gc.enable()
    device = _cuda_opened()
    if device:
        os.unlink(path)
        _say(f"the import opened {device}: a fork would not have its CUDA; every task of this host starts cold")
        return 0
    print(f"{SAY} ready pid={os.getpid()} imported={','.join(m for m in mods if m in sys.modules)}", flush=True)
    Zygote(path, listener, before, pad).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
