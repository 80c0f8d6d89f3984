"""The wrapper's side of the zygote (zygote.py): ask it for a task, then wait for that task's end.
Stdlib only, shipped beside taskwrap.py, which imports it (``--zygote``)."""

import json
import os
import select
import signal
import socket
import struct
import time

import promotion  # shipped beside this file (launcher/remote/__init__.py TASK_FILES)
from sibling import sibling


def check(path: str, argv: list, env: dict, cwd: str, wait: float) -> str:
    """Whether the zygote at ``path`` would serve ``argv`` (its imports done): "" where it would,
    else why not. Forks nothing (a standby's wrapper: ready now, the fork once promoted)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        sock, got = ask(path, argv, env, cwd, [devnull, devnull, devnull], wait, check=True)
    finally:
        os.close(devnull)
    if sock is not None:
        sock.close()
        return ""
    return str(got)


def ask(path: str, argv: list, env: dict, cwd: str, fds: list, wait: float, check: bool = False,
        control: str = ""):
    """Ask the zygote at ``path`` for a child running ``argv``: (socket, pid) or (None, why not).
    Never waits for a server that is not there: the socket is bound before any wrapper could ask
    (its starter binds it, zygote.py --listen-fd), so a connection refused or no socket is a
    server gone, said at once (with its reason where it left one, PATH.cold). Waits up to
    ``wait`` seconds for the answer (the server's import), and no longer than the server runs:
    its end closes the connection, and a server stopped (SIGSTOP) is not waited for.
    ``fds``: the child's stdin, stdout and stderr, and with ``control`` (a variable's name) a
    fourth, its control channel (taskstream.py), which that variable names in its environment.
    ``check``: fork nothing, only say whether it would (then (socket, 0) where it would)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        return None, gone(path, exc)
    try:
        server, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
    except OSError as exc:
        sock.close()
        return None, f"zygote {path}: {exc.strerror}"
    if uid != os.getuid():  # another user's server there: nothing of ours (environment, stdio) goes to it
        sock.close()
        return None, f"{path} is served by uid {uid}, not by this user"
    request = {"argv": list(argv), "env": dict(env), "cwd": cwd, **({"check": True} if check else {}),
               **({"control": control} if control and len(fds) == 4 else {})}
    body = json.dumps(request).encode()
    try:
        socket.send_fds(sock, [struct.pack("!I", len(body))], fds)
        sock.sendall(body)
        answer = _answer(sock, server, time.monotonic() + wait)
    except OSError as exc:
        sock.close()
        return None, f"zygote {path}: {exc.strerror or exc}"
    if isinstance(answer, str):
        sock.close()
        return None, answer
    if not answer:
        sock.close()
        return None, _left_why(path) or "the zygote closed without an answer (it ended)"
    if "pid" in answer or (check and answer.get("ok") is True):
        sock.settimeout(None)
        return sock, int(answer.get("pid", 0))
    sock.close()
    return None, str(answer.get("cold", "refused"))[:300]


def gone(path: str, exc: OSError) -> str:
    """Why a connection to ``path`` failed, in one line: the server's own reason where it left one."""
    why = _left_why(path)
    if why:
        return why
    if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
        return f"no zygote serves {path} ({exc.strerror}: it ended)"
    return f"zygote {path}: {exc.strerror or exc}"


def _left_why(path: str) -> str:
    return sibling("zygote").cold_reason(path)


def _answer(sock, server: int, deadline: float):
    """The server's one-line answer (a dict; {} where it closed first), or why it is not waited
    for: past ``deadline``, or the server stopped."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "the zygote did not answer in time"
        ready, _, _ = select.select([sock], [], [], min(left, 0.5))
        if ready:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            return _read_line(sock)
        if _state(server) in ("T", "t"):
            return f"the zygote (pid {server}) is stopped"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _read_line(sock) -> dict:
    """One line of the server's (or the waiter's) and no more: a task that ends at once has its
    pid and its status sent back to back, and the status must stay for wait_status to read. A
    line left in parts for 5 s is none (its sender writes each whole, with one sendall)."""
    since = None
    while True:
        data = sock.recv(65536, socket.MSG_PEEK)
        if not data:
            return {}
        at = data.find(b"\n")
        if at >= 0:
            data = sock.recv(at + 1)
            break
        since = time.monotonic() if since is None else since
        if len(data) > 65536 - 1 or time.monotonic() - since > 5.0:
            return {}
        select.select([sock], [], [], 0.05)  # (a line in parts: the rest is on its way)
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def wait_status(sock, pid: int) -> "int | None":
    """The task's waitpid status from its waiter (zygote.py Waiter), or None where the waiter
    ended first (then this waits for the task itself to end: it is SIGKILLed with its waiter)."""
    try:
        answer = _read_line(sock)
    except OSError:
        answer = {}
    finally:
        sock.close()
    if "status" in answer:
        return int(answer["status"])
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
    return None


def defer_standby(path: str, argv: list, wait: float, names: str, blocked: set, say):
    """A warm standby whose task the zygote at ``path`` forks only once promoted (taskwrap.py
    --standby-defer STANDBY,STANDBY_ENV), the signals of ``blocked`` blocked in every thread: ask the
    zygote whether it would serve ``argv``, speak the standby protocol on the task's stdout
    (``tfcluster-standby waiting``, ``ready``), wait for SIGUSR1, take the environment from the file
    STANDBY_ENV names (both variables dropped from os.environ) and say ``promoted``; the wrapper then
    asks for the fork, a cold start of ``argv`` in the promoted environment that finds the zygote's
    import done. Returns "" once promoted; why not where the zygote would not serve it (at once:
    the standby then starts as its own process); the number of another signal of ``blocked`` that
    came first (a stop: nothing forked). ``say(text, fd)`` writes a line: ``fd`` 1 the standby
    protocol (the control channel where the wrapper frames its stream), 2 a message of its own."""
    standby, standby_env = (names.split(",") + [""])[:2]
    if os.environ.get(standby) != "1":
        return f"{standby} is not 1: not a standby"
    began = time.monotonic()
    why = check(path, argv, dict(os.environ), os.getcwd(), wait)
    if why:
        return why
    say("tfcluster-standby waiting\n", 1)
    say(f"tfcluster-standby ready after={time.monotonic() - began:.1f}s waited=0.0s zygote "
        "(forked from the host's zygote once promoted)\n", 1)
    got = signal.sigwait(blocked)
    if got != signal.SIGUSR1:
        return int(got)
    promotion.take_promotion(standby, standby_env, lambda line: say(line + "\n", 2))
    say("tfcluster-standby promoted\n", 1)
    return ""
