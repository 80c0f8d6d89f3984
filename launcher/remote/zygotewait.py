"""A task's own waiter, forked from the zygote (zygote.py) for each task it serves, and the task's
process the waiter forks: the waiter is the task's parent, so the task's exit reaches its wrapper
whatever becomes of the server. Stdlib only, shipped beside zygote.py, which imports it; with the
small descriptor and pipe helpers both use."""

import json
import os
import select
import signal
import socket
import sys
import time

import zygotechild as forked  # shipped beside this file (its importer, zygote.py, imports it with sibling)

SAY = "tfcluster-zygote"


def say(text: str) -> None:
    """One line of the server's (or a waiter's) on its stderr: zygote.log."""
    try:
        os.write(2, f"{SAY}: {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


# What a waiter ignores: the signals a host's shutdown or a terminal sends to every process.
HOLD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Waiter:
    """A task's own waiter, forked from the server for each task: it forks the task, is its parent
    and reaps it, and tells the wrapper its pid and then its exit on the wrapper's connection. So a
    task's exit status does not depend on the server living (it may die, be restarted or stopped
    meanwhile). The task's group ends once its wrapper is gone (its pidfd, or its end of the
    connection closed: a wrapper never writes after its request), by SIGKILL, which also reaches a
    stopped (SIGSTOP) task. A session of its own: a stop of the server's group never reaches it.
    The task has PR_SET_PDEATHSIG SIGKILL (as a cold start under the wrapper): the waiter gone, it
    goes too."""

    def __init__(self, server, conn, peer: int) -> None:
        self.server, self.conn, self.peer = server, conn, peer

    def run(self, req: dict, entry, fds: list) -> None:
        try:
            self.server.child_of_server()
            os.setsid()
            wake_r, _wake_w = wake_pipe()
            me = os.getpid()
            # A host shutting down sends SIGTERM to every process: the waiter must outlive its task
            # (whose PR_SET_PDEATHSIG would kill it mid-save), as a cold start's wrapper does. Held
            # over the fork, ignored here after it; the task gets a fresh interpreter's mask.
            signal.pthread_sigmask(signal.SIG_BLOCK, HOLD)
            try:
                task = os.fork()
            except OSError as exc:
                close(fds)
                answer(self.conn, {"cold": f"the zygote could not fork ({exc.strerror}: a limit on processes?)"})
                os._exit(0)
            if task == 0:
                become(self.server, self.conn, req, entry, fds, [self.peer, *wake_fds()], me)  # never returns
            for sig in HOLD:
                signal.signal(sig, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HOLD)
            close(fds)
            forked.show_argv([title(task)])  # (ps: not another zygote)
            answer(self.conn, {"pid": task}, keep=True)
            # Small at once (LEAN_AFTER), at the task's priority: it reports the task's exit.
            if self._wait(task, wake_r, LEAN_AFTER):
                lean(task, self.conn, self.peer, _wake_w)  # returns only where it could not exec
                self._wait(task, wake_r)
        except BaseException as exc:  # noqa: BLE001 - never back into the server's loop
            say(f"a task's waiter failed ({type(exc).__name__}: {str(exc)[:200]})")
        os._exit(0)

    def _wait(self, task: int, wake_r: int, most: "float | None" = None) -> bool:
        return wait_task(task, self.conn.fileno(), self.peer, wake_r, most)


def wait_task(task: int, conn: int, peer: int, wake_r: int, most: "float | None" = None) -> bool:
    """Wait on ``task`` (a child) until it ends, its waitpid status then sent on ``conn`` (the
    wrapper's connection), or until the wrapper is gone (``conn`` closed or its pidfd ``peer``
    readable): the task's group is SIGKILLed. False then; True: ``most`` seconds passed first, the
    task still running. ``wake_r``: the SIGCHLD pipe (wake_pipe). The waiter's, as a fork of the
    server and as its small process (``--lean`` below)."""
    end = None if most is None else time.monotonic() + most
    while True:
        pid, status = os.waitpid(task, os.WNOHANG)
        if pid == task:
            try:
                os.write(conn, json.dumps({"status": status}).encode() + b"\n")
            except OSError:
                pass
            return False
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return True
        try:
            ready, _, _ = select.select([wake_r, conn, peer], [], [], left)
        except InterruptedError:
            continue
        drain(wake_r)
        if conn in ready or peer in ready:  # the wrapper gone: its task goes too
            for kill in (os.kill, os.killpg):  # (the task, and its group once it has made it)
                try:
                    kill(task, signal.SIGKILL)
                except OSError:
                    pass
            os.waitpid(task, 0)
            return False


def title(task: int) -> str:
    """The waiter's title, its own line of its /proc cmdline (the ssh backend's signal command
    checks that a task's parent says it is the task's waiter: ssh/commands.py)."""
    return f"{SAY}: the waiter of task {task}"


# The waiter's wait in a small interpreter of its own: a fork of the zygote maps all of its import
# (TensorFlow's, about 250 MB of Rss in each waiter, though shared with the zygote: top, ps and an
# Rss sum count it once per waiter), where this file run with -S is 10 MB. It is exec'd in the
# waiter's place as soon as the task is forked (LEAN_AFTER 0; its start is 20-30 ms of CPU). Not
# niced: it reports the task's exit, and a niced waiter on a busy machine reported a worker's exit
# 0 after its peer's failure, which that failure's diagnosis reads. (Waiting 5 s first kept each
# waiter's 250 MB in an Rss sum through the tasks' start, where the sum peaks; the ssh restarts
# were no faster for it: BENCHMARKS.md, "A fork server per ssh host".) The task
# stays its child (exec keeps the children and PR_SET_PDEATHSIG, which fires on the parent's exit,
# not its exec), the signals the waiter ignores stay ignored. Its sys.path[0] is this file's dir
# (the shipped files), not the run's workdir. Its arguments: --lean, its title (a line of its
# cmdline: ssh/commands.py), the task's pid, the wrapper's connection, the wrapper's pidfd.
LEAN_AFTER = 0.0


def lean(task: int, conn, peer: int, wake_w: int) -> None:
    """Become this file run with --lean (exec), waiting on ``task`` as this waiter would; back here only where it cannot
    (no interpreter to name, an exec that failed: one line, and this waiter waits as it is)."""
    exe = sys.executable
    if not exe:
        return
    try:
        os.set_inheritable(conn.fileno(), True)
        os.set_inheritable(peer, True)
        signal.set_wakeup_fd(-1)
        os.execv(exe, [exe, "-S", "-s", os.path.abspath(__file__), "--lean", title(task), str(task),
                       str(conn.fileno()), str(peer)])
    except (OSError, ValueError) as exc:
        signal.set_wakeup_fd(wake_w)
        say(f"the waiter of task {task} waits as a fork of the zygote: exec of {exe} failed "
            f"({getattr(exc, 'strerror', None) or exc})")


def become(server, conn, req: dict, entry, fds: list, others: list, waiter: int) -> None:
    """In the task's process: what a cold start of its argv would be."""
    code = 1
    try:
        forked.die_with_parent(waiter)
        signal.set_wakeup_fd(-1)
        conn.close()
        close(others)
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
        os.environ.update({**server.added, **req["env"], **control})
        if server.pad:
            forked.show_environ({k: v for k, v in {**req["env"], **control}.items() if server.before.get(k) != v},
                                server.pad)
        forked.show_argv(req["argv"])
        if hasattr(sys, "orig_argv"):  # (3.10+) the command as the kernel ran it: the task's, not the zygote's
            sys.orig_argv = list(req["argv"])
        forked.python_defaults()
        code = forked.run_main(*entry)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the waiter
        forked.print_uncaught(exc)
        if isinstance(exc, KeyboardInterrupt):  # as the interpreter: killed by SIGINT
            forked.exit_as_interpreter(None, signal.SIGINT)
        code = 1
    forked.exit_as_interpreter(code)


_WAKE: list = []  # this process's SIGCHLD pipe (the server's, then each waiter's own)


def end_with(parent: str) -> None:
    """The server ends with ``parent`` (its keeper, zygotehost.py: ``--parent PID``): the kernel
    SIGKILLs it when that process ends, however it ends (PR_SET_PDEATHSIG), a stopped server too.
    Where that cannot be set, or ``parent`` ended already (the setting came too late), it exits 1
    at once (one line): nothing else would end it."""
    import ctypes

    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, ValueError):
        ok = False
    if not ok or str(os.getppid()) != parent:
        say("not serving: " + ("its keeper %s ended first" % parent[:20] if ok else "it could not be bound to its keeper's "
                               "life (prctl PR_SET_PDEATHSIG failed)"))
        sys.exit(1)


def wake_pipe() -> tuple:
    """A new pipe that SIGCHLD wakes (signal.set_wakeup_fd): (read end, write end)."""
    if _WAKE:
        signal.set_wakeup_fd(-1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _WAKE[:] = [wake_r, wake_w]
    return wake_r, wake_w


def wake_fds() -> list:
    return list(_WAKE)


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def reap_any() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def hung_up(conn) -> bool:
    """Whether the wrapper has closed its end (a wrapper never writes after its request)."""
    try:
        if not select.select([conn], [], [], 0)[0]:
            return False  # (nothing to read: not closed)
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def answer(conn, what: dict, keep: bool = False) -> None:
    try:
        conn.sendall(json.dumps(what).encode() + b"\n")
    except OSError:
        pass
    if not keep:
        conn.close()


if __name__ == "__main__" and sys.argv[1:2] == ["--lean"]:  # the waiter's small process (lean)
    wait_task(int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), wake_pipe()[0])
