"""A host's fork server for a run over ssh, as the host agent (agent.py) starts and keeps it
(request 1's "zygote": {"argv": [python, options...], "imports": [...], "env": {...}, "pad":
NAME, "title": N, "grace": s, and "socket": the path of a server whose keeper ended, bound again,
as a waiting standby's wrapper asks it}; then "keep"):
zygote.py, the agent's child, in the environment boot.py gives a task (the agent's own, the run's
common variables, the interpreter's dir first on PATH), its socket bound first (privsock.py: the
wrappers never wait for one that is gone: zygoteask.py), its lines in the run dir's
zygote.HOST.log. Its lifeline is the agent, which the launcher keeps as its own channel, leased
like a task's: the server ends with the run and never outlives a lost session. The keeper stops
it when its channel ends (SIGTERM, its grace, SIGKILL), and the kernel kills it the moment its
keeper dies any other way (zygote.py --parent: PR_SET_PDEATHSIG), so it needs no wrapper of its
own. At "keep" the agent becomes a small keeper (``become_keeper``: this file run as
``python -S zygotehost.py --keeper FD``, the same process, the same channel): the agent's code
and what its preflight left in its memory are not kept for the run (about 6 MB a host).

The keeper's channel (after "keep", stdin also carries the lease's bytes, "."):
  <- {"ended": exit code, "cold": its reason or ""}  once the server ended (at once: its pidfd)
  -> {"restart":true}                                  start a new one, on the same socket path
  <- {"restarted": {"socket": path} | {"error": text}}
The launcher decides whether to ask (launcher/backends/zygotes.py Restarts); tasks forked from an
ended server keep their own waiters (zygotewait.py), nothing of theirs depends on it.

Kept warm (the order's "keep_warm": s > 0, ``ssh.keep_warm``): the server may outlive the run
by that many seconds (zygotewarm.py).
Stdlib only, Python 3.6+; shipped in the run dir (launcher/remote/__init__.py TASK_FILES),
imported by the agent from there."""

import json
import os
import select
import signal
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shipped beside it
from sibling import sibling  # noqa: E402

sys.path.pop(0)
# (shutil, subprocess, socket and privsock are imported where they are used: the keeper, which
# runs for the whole run, imports them only to start a server again)


def start(order, run_dir, workdir, path=None):
    """Start the host's fork server (zygote.py, beside this file in ``run_dir``, this process's
    child) for ``order`` (agent.py's request 1 "zygote"), its socket at ``path`` (a new one's: the path of
    the one that ended), else at the order's "socket" where privsock.earlier takes it, else in a
    new private dir: (its process or None, what the reply says). With "keep_warm", the server
    kept warm (``warm``: one adopted or started), unless that cannot be (its reply then says why
    in "warm_off" and the server is the run's own)."""
    note = None
    if path is None and _seconds(order.get("keep_warm")) > 0:
        proc, said = sibling("zygotewarm").warm(order, run_dir, workdir)
        if proc is not None:
            return proc, said
        note = said.get("warm_off")
    proc, said = _start(order, run_dir, workdir, path)
    return proc, (dict(said, warm_off=note) if note and proc is not None else said)


def _seconds(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


def _env(order):
    """The environment the server starts in: boot.py's for a task (the agent's own, the run's
    common variables, the interpreter's dir first on PATH)."""
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (order.get("env") or {}).items()})
    bindir = os.path.dirname(sys.executable)  # as boot.py gives a task its PATH
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


def _argv(order, env):
    argv = [str(a) for a in order.get("argv") or []]
    import shutil

    exe = shutil.which(argv[0], path=env["PATH"]) if argv and "/" not in argv[0] else (argv[0] if argv else "")
    return [exe or (argv[0] if argv else "python3")] + argv[1:]


def _server_args(order, where, path, listener):
    return [os.path.join(where, "zygote.py"), "--socket", path, "--listen-fd", str(listener.fileno()),
            "--import", ",".join(order.get("imports") or ["tensorflow"]), "--pad", str(order.get("pad") or "")]


def _start(order, run_dir, workdir, path):
    import shutil
    import subprocess

    privsock = sibling("privsock")
    try:
        # A private dir of this host's own (0700), not the run dir: that may be shared between
        # hosts (an NFS home), and a unix socket's path is at most 107 bytes.
        path = path or privsock.earlier(order.get("socket")) or os.path.join(privsock.private_dir(), "z.sock")
        listener = privsock.bind_private(path)
    except privsock.NotPrivate as exc:
        return None, {"error": str(exc)}
    except OSError as exc:
        return None, {"error": "cannot bind %s (%s)" % (path or "a socket in the temp dir", exc.strerror or exc)}
    env = _env(order)
    argv = _argv(order, env)
    try:
        with open(os.path.join(run_dir, log_name()), "ab") as log:
            proc = subprocess.Popen(
                [*argv, *_server_args(order, run_dir, path, listener), "--parent", str(os.getpid()),
                 "--title", "t" * int(order.get("title") or 64)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir or run_dir,
                close_fds=True, pass_fds=(listener.fileno(),), start_new_session=True)
    except OSError as exc:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        return None, {"error": "cannot start %s (%s)" % (argv[0], exc.strerror)}
    finally:
        listener.close()  # the server's (and its wrapper's) from now on: refused once they are gone
    proc.socket_path = path
    try:  # (the keeper notices its end at once: keep)
        proc.pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        proc.pidfd = None
    return proc, {"socket": path}


def log_name():
    """The server's log in the run dir, one per host (the run dir may be shared between hosts)."""
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in os.uname().nodename)[:64] or "host"
    return "zygote.%s.log" % host


def end(proc, grace):
    """The server stopped (SIGTERM; SIGKILL after its grace: a stopped one too), then its
    socket's dir removed once it has ended. A warm one is let go: its hold closed, it counts idle
    from now (``Warm``)."""
    if getattr(proc, "warm", False):
        proc.release()
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.kill(proc.pid, sig)  # (not reaped yet, so the pid is still its own)
        except OSError:
            pass
        deadline = time.monotonic() + wait
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    _close_pidfd(proc)
    import shutil

    shutil.rmtree(os.path.dirname(proc.socket_path), ignore_errors=True)


def exit_code(proc):
    """How ``proc`` ended as a shell says it (128+N for signal N), or None."""
    code = proc.returncode if type(proc.returncode) is int else None
    return 128 - code if code is not None and code < 0 else code


def _close_pidfd(proc):
    if getattr(proc, "pidfd", None) is not None:
        os.close(proc.pidfd)
        proc.pidfd = None


def keep(lines, order, socks, proc, zygote, reply):
    """The host agent stays the fork server's keeper (agent.py "keep": ``order``) until its stdin
    (``lines``, agent.py's reader) closes or, with a lease, stays silent for that many seconds (as
    taskwrap.py's lifeline); then the agent ends, and its server with it (``end``, or the kernel
    where the keeper is killed: zygote.py --parent). Meanwhile it says when the server ends and
    starts a new one when asked (the module's docstring), for ``zygote`` (request 1's) in
    ``reply``'s dirs. ``socks``: the ports the preflight held, released first. Returns 0 (the
    agent's exit)."""
    for sock in socks:
        sock.close()
    lease, fd, buf, first = float(order.get("lease") or 0), lines.fd, lines.buf.replace(b".", b""), proc
    last, told = time.monotonic(), False
    try:
        while True:
            if not told and proc.poll() is not None:
                told = _tell({"ended": exit_code(proc), "cold": sibling("zygote").cold_reason(proc.socket_path)})
            timeout = 1.0 if lease <= 0 else max(0.1, min(1.0, lease / 4))
            watched = [fd] + ([proc.pidfd] if not told and getattr(proc, "pidfd", None) is not None else [])
            ready, _, _ = select.select(watched, [], [], timeout)
            if fd in ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    return 0
                last, buf = time.monotonic(), (buf + data.replace(b".", b""))[-65536:]  # (the lease's bytes)
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip() != b'{"restart":true}':
                        continue
                    if not told:  # (it serves still)
                        _tell({"restarted": {"socket": proc.socket_path}})
                        continue
                    _close_pidfd(proc)
                    new, said = start(zygote, reply["run_dir"], reply["workdir"], proc.socket_path)
                    proc, told = (new, False) if new is not None else (proc, told)
                    _tell({"restarted": said})
            elif not ready and lease > 0 and time.monotonic() - last > lease:
                return 0
    finally:
        if proc is not first:
            end(proc, float(zygote.get("grace") or 5))


class _Adopted:
    """The server a keeper's exec'd self finds as its child (``become_keeper``): what ``keep`` and
    ``end`` use of a Popen (pid, poll, returncode), with its pidfd and its socket's path."""

    def __init__(self, pid, pidfd, socket_path):
        self.pid, self.pidfd, self.socket_path, self.returncode = pid, pidfd, socket_path, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 255 << 8  # (reaped elsewhere: unknown, said as 255)
            if pid == self.pid:
                self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        return self.returncode


def become_keeper(lines, order, socks, proc, zygote, reply, unsafe=None):
    """``keep`` in a small interpreter of its own: this process (the agent, whose channel the
    launcher keeps) exec's ``python -S zygotehost.py --keeper FD``, FD an unlinked file with what
    ``keep`` needs (the channel's bytes read ahead, the orders, the server's pid, its pidfd's
    number); the server stays its child. Where it cannot (a server kept warm: a hold of the
    agent's own; an exec that fails; a file it would run that another user could have swapped since
    the agent checked it: ``unsafe``, pathtrust.py's), ``keep`` here. Returns as ``keep`` (only
    where it did not exec)."""
    if not getattr(proc, "warm", False) and not (unsafe and unsafe(reply["run_dir"], files=("zygotehost.py", "sibling.py"))):
        import tempfile

        state = {"buf": lines.buf.decode("latin-1"), "order": order, "zygote": zygote,
                 "reply": {"run_dir": reply["run_dir"], "workdir": reply["workdir"]},
                 "pid": proc.pid, "pidfd": getattr(proc, "pidfd", None), "socket": proc.socket_path}
        for sock in socks:
            sock.close()
        socks = []
        try:
            with tempfile.TemporaryFile(dir=os.path.dirname(proc.socket_path)) as fh:
                fh.write(json.dumps(state).encode())
                fh.flush()
                fds = [fh.fileno()] + ([state["pidfd"]] if state["pidfd"] is not None else [])
                for fd in fds:
                    os.set_inheritable(fd, True)
                sys.stdout.flush()
                os.execv(sys.executable, [sys.executable, "-S", os.path.abspath(__file__), "--keeper", str(fh.fileno())])
        except (OSError, ValueError):
            pass  # (kept here, as before)
    return keep(lines, order, socks, proc, zygote, reply)


def _keeper(fd):
    """``--keeper FD`` (``become_keeper``'s exec): ``keep`` with what FD holds, then its first
    server ended (as agent.py's end of its server), unless another one replaced it."""
    with os.fdopen(fd, "rb") as fh:
        fh.seek(0)
        state = json.loads(fh.read().decode())
    first = _Adopted(int(state["pid"]), state.get("pidfd"), state["socket"])
    channel = types.SimpleNamespace(fd=0, buf=state["buf"].encode("latin-1"))  # (as agent.py's reader)
    try:
        return keep(channel, state["order"] or {}, [], first, state["zygote"], state["reply"])
    finally:
        end(first, float(state["zygote"].get("grace") or 5))


def _tell(obj):
    """One line to the launcher on the keeper's channel (this agent's stdout)."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return True


if __name__ == "__main__":
    if sys.argv[1:2] == ["--keeper"] and len(sys.argv) == 3:
        sys.exit(_keeper(int(sys.argv[2])))
    sys.stderr.write("usage: zygotehost.py --keeper FD (the host agent's exec of itself)\n")
    sys.exit(2)
