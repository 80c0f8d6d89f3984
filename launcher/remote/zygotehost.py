"""A host's fork server for a run over ssh, as the host agent (agent.py) starts and keeps it
(request 1's "zygote": {"argv": [python, options...], "imports": [...], "env": {...}, "pad":
NAME, "title": N, "grace": s}; then "keep"):
zygote.py under taskwrap.py in the environment boot.py gives a task (the agent's own, the run's
common variables, the interpreter's dir first on PATH), its socket bound first (the wrappers
never wait for one that is gone: zygoteask.py), its lines in the run dir's zygote.HOST.log. Its
lifeline is the agent, which the launcher keeps as its own channel, leased like a task's: the
server ends with the run and never outlives a lost session. Stdlib only, Python 3.6+; shipped
in the run dir (launcher/remote/__init__.py TASK_FILES), imported by the agent from there."""

import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def start(order, run_dir, workdir):
    """Start the host's fork server (zygote.py under taskwrap.py, beside this file in ``run_dir``)
    for ``order`` (agent.py's request 1 "zygote"): (its process or None, what the reply says)."""
    try:
        # A private dir of this host's own (0700), not the run dir: that may be shared between
        # hosts (an NFS home), and a unix socket's path is at most 107 bytes.
        path = os.path.join(tempfile.mkdtemp(prefix="tfcluster-zygote-"), "z.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            listener.bind(path)
        finally:
            os.umask(old)
        listener.listen(128)
    except OSError as exc:
        return None, {"error": "cannot bind %s (%s)" % (path, exc.strerror)}
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (order.get("env") or {}).items()})
    bindir = os.path.dirname(sys.executable)  # as boot.py gives a task its PATH
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    argv = [str(a) for a in order.get("argv") or []]
    exe = shutil.which(argv[0], path=env["PATH"]) if argv and "/" not in argv[0] else (argv[0] if argv else "")
    argv = [exe or (argv[0] if argv else "python3")] + argv[1:]
    try:
        with open(os.path.join(run_dir, log_name()), "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-S", os.path.join(run_dir, "taskwrap.py"), "--grace", "%g" % float(order.get("grace", 5)),
                 "--", *argv, os.path.join(run_dir, "zygote.py"), "--socket", path,
                 "--listen-fd", str(listener.fileno()), "--import", ",".join(order.get("imports") or ["tensorflow"]),
                 "--pad", str(order.get("pad") or ""), "--title", "t" * int(order.get("title") or 64)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir or run_dir,
                close_fds=True, pass_fds=(listener.fileno(),), start_new_session=True)
    except OSError as exc:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        return None, {"error": "cannot start %s (%s)" % (argv[0], exc.strerror)}
    finally:
        listener.close()  # the server's (and its wrapper's) from now on: refused once they are gone
    proc.socket_path = path
    return proc, {"socket": path}


def log_name():
    """The server's log in the run dir, one per host (the run dir may be shared between hosts)."""
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname())[:64] or "host"
    return "zygote.%s.log" % host


def end(proc, grace):
    """The server's lifeline closed (its wrapper stops it: SIGTERM, its grace, SIGKILL), then its
    socket's dir removed once it has ended."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=grace + 5)
    except subprocess.TimeoutExpired:
        pass
    shutil.rmtree(os.path.dirname(proc.socket_path), ignore_errors=True)


def keep(fd, lease, socks=()):
    """The host agent stays the fork server's keeper (agent.py "keep") until its stdin ``fd``
    closes or, with a lease, stays silent for ``lease`` seconds (as taskwrap.py's lifeline); then
    the agent ends, and the server's lifeline (its wrapper's stdin, a pipe) with it. ``socks``:
    the ports the preflight held, released first. Returns 0 (the agent's exit)."""
    for sock in socks:
        sock.close()
    last = time.monotonic()
    while True:
        timeout = 1.0 if lease <= 0 else max(0.1, min(1.0, lease / 4))
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:
                return 0
            last = time.monotonic()
        elif lease > 0 and time.monotonic() - last > lease:
            return 0
