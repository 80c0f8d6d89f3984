"""A host's fork server for a run over ssh, as the host agent (agent.py) starts and keeps it
(request 1's "zygote": {"argv": [python, options...], "imports": [...], "env": {...}, "pad":
NAME, "title": N, "grace": s, and "socket": the path of a server whose keeper ended, bound again,
as a waiting standby's wrapper asks it}; then "keep"):
zygote.py under taskwrap.py in the environment boot.py gives a task (the agent's own, the run's
common variables, the interpreter's dir first on PATH), its socket bound first (privsock.py: the
wrappers never wait for one that is gone: zygoteask.py), its lines in the run dir's
zygote.HOST.log. Its lifeline is the agent, which the launcher keeps as its own channel, leased
like a task's: the server ends with the run and never outlives a lost session.

The keeper's channel (after "keep", stdin also carries the lease's bytes, "."):
  <- {"ended": exit code, "cold": its reason or ""}  once the server ended (at once: its pidfd)
  -> {"restart":true}                                  start a new one, on the same socket path
  <- {"restarted": {"socket": path} | {"error": text}}
The launcher decides whether to ask (launcher/backends/zygotes.py Restarts); tasks forked from an
ended server keep their own waiters (zygotewait.py), nothing of theirs depends on it.

Kept warm (the order's "keep_warm": s > 0, ``ssh.keep_warm``): the server may outlive the run by
that many seconds, so that the next run of the same spec forks at once (``warm``). It lives in a
dir of its own, WARM/KEY (WARM: the user's ``tfcluster-warm-UID`` in the temp dir, 0700, refused
where it is not this user's alone; KEY: a digest of everything its forks depend on: the host's
name, the interpreter and its options, the imports and the files they load (installed again, they
differ), the environment but for a task's own variables, the workdir, and the bytes of the server's
own files, copied there), is not under a wrapper, and is
held by each run that uses it: the agent keeps a connection open to it (zygote.py "hold") for the
run, instead of a lifeline. Once no run has held it for keep_warm seconds it removes its dir
and ends (zygote.py --idle-exit). A later run whose KEY is the same adopts it (its reply
"warm": {"pid": N, "reused": true}); another user cannot reach it (the dir, SO_PEERCRED), and a
run in another environment gets a server of its own.
Stdlib only, Python 3.6+; shipped in the run dir (launcher/remote/__init__.py TASK_FILES),
imported by the agent from there."""

import fcntl
import hashlib
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shipped beside it
from sibling import sibling  # noqa: E402

sys.path.pop(0)
privsock = sibling("privsock")


def start(order, run_dir, workdir, path=None):
    """Start the host's fork server (zygote.py under taskwrap.py, beside this file in ``run_dir``)
    for ``order`` (agent.py's request 1 "zygote"), its socket at ``path`` (a new one's: the path of
    the one that ended), else at the order's "socket" where privsock.earlier takes it, else in a
    new private dir: (its process or None, what the reply says). With "keep_warm", the server
    kept warm (``warm``: one adopted or started), unless that cannot be (its reply then says why
    in "warm_off" and the server is the run's own)."""
    note = None
    if path is None and _seconds(order.get("keep_warm")) > 0:
        proc, said = warm(order, run_dir, workdir)
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
    exe = shutil.which(argv[0], path=env["PATH"]) if argv and "/" not in argv[0] else (argv[0] if argv else "")
    return [exe or (argv[0] if argv else "python3")] + argv[1:]


def _server_args(order, where, path, listener):
    return [os.path.join(where, "zygote.py"), "--socket", path, "--listen-fd", str(listener.fileno()),
            "--import", ",".join(order.get("imports") or ["tensorflow"]), "--pad", str(order.get("pad") or "")]


def _start(order, run_dir, workdir, path):
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
                [sys.executable, "-S", os.path.join(run_dir, "taskwrap.py"), "--grace", "%g" % float(order.get("grace", 5)),
                 "--", *argv, *_server_args(order, run_dir, path, listener),
                 "--title", "t" * int(order.get("title") or 64)],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir or run_dir,
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
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname())[:64] or "host"
    return "zygote.%s.log" % host


def end(proc, grace):
    """The server's lifeline closed (its wrapper stops it: SIGTERM, its grace, SIGKILL), then its
    socket's dir removed once it has ended. A warm one is let go: its hold closed, it counts idle
    from now (``Warm``)."""
    if isinstance(proc, Warm):
        proc.release()
        return
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=grace + 5)
    except subprocess.TimeoutExpired:
        pass
    _close_pidfd(proc)
    shutil.rmtree(os.path.dirname(proc.socket_path), ignore_errors=True)


def _close_pidfd(proc):
    if getattr(proc, "pidfd", None) is not None:
        os.close(proc.pidfd)
        proc.pidfd = None


def keep(lines, order, socks, proc, zygote, reply):
    """The host agent stays the fork server's keeper (agent.py "keep": ``order``) until its stdin
    (``lines``, agent.py's reader) closes or, with a lease, stays silent for that many seconds (as
    taskwrap.py's lifeline); then the agent ends, and the server's lifeline (its wrapper's stdin, a
    pipe) with it. Meanwhile it says when the server ends and starts a new one when asked (the
    module's docstring), for ``zygote`` (request 1's) in ``reply``'s dirs. ``socks``: the ports
    the preflight held, released first. Returns 0 (the agent's exit)."""
    for sock in socks:
        sock.close()
    lease, fd, buf, first = float(order.get("lease") or 0), lines.fd, lines.buf.replace(b".", b""), proc
    last, told = time.monotonic(), False
    try:
        while True:
            if not told and proc.poll() is not None:
                code = proc.returncode if type(proc.returncode) is int else None
                told = _tell({"ended": code, "cold": sibling("zygote").cold_reason(proc.socket_path)})
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


def _tell(obj):
    """One line to the launcher on the keeper's channel (this agent's stdout)."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return True


# ---- a server kept warm past its run (ssh.keep_warm) ---------------------------------------------

WARM_FILES = ("zygote.py", "zygotewait.py", "zygotechild.py", "sibling.py", "privsock.py")
# How long an adopting agent waits for a live server's answer to its hold: one of an earlier run
# answers at once; one still importing (another run's, started a moment ago) may not, and this
# run then starts its own (within the preflight's own timeout, 60 s by default).
HOLD_WAIT = 20.0
# A task's own variables (zygote.py TASK_OWN): not part of what a server's forks depend on.
_OWN_PREFIXES = ("TFCLUSTER_",)


class Warm:
    """A server kept warm, as the keeper sees it: its pid (a pidfd on it, so its end is seen at
    once, whether it is this agent's child or an earlier run's), its socket, and this run's hold
    on it. ``returncode``: its exit where it is this agent's child, else None (unknown)."""

    def __init__(self, pid, socket_path, hold, child=None):
        self.pid, self.socket_path, self.hold, self.child = pid, socket_path, hold, child
        self.returncode = None
        self.stdin = None
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def poll(self):
        """None while it serves; else its exit code, or -1 where that is unknown (not our child)."""
        if self.child is not None:
            code = self.child.poll()
            if code is not None:
                self.returncode = code
                return code
            return None
        if self.pidfd is not None:
            ready, _, _ = select.select([self.pidfd], [], [], 0)
            return -1 if ready else None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return -1
        except OSError:
            pass
        return None

    def release(self):
        """This run's hold let go (it counts idle from now), its pidfd closed."""
        if self.hold is not None:
            self.hold.close()
            self.hold = None
        _close_pidfd(self)


def warm_dir():
    """The user's dir of warm servers (made 0700), or (None, why it cannot be used)."""
    base = os.path.join(tempfile.gettempdir(), "tfcluster-warm-%d" % os.geteuid())
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return None, "cannot make %s (%s)" % (base, exc.strerror)
    problem = privsock.check_dir(base)
    return (None, problem) if problem else (base, None)


# What the imports would load, asked of the server's own interpreter (its sys.path, without
# importing them): each one's file, and its size and time. A package installed again (pip
# install -U tensorflow) changes them, so a server kept from before is not used for its forks.
_WHERE = ("import importlib.util, os, sys\n"
          "for name in sys.argv[1:]:\n"
          "    try:\n"
          "        spec = importlib.util.find_spec(name)\n"
          "    except (ImportError, ValueError):\n"
          "        spec = None\n"
          "    path = spec.origin if spec is not None and spec.origin else ''\n"
          "    st = os.stat(path) if path and os.path.exists(path) else None\n"
          "    print(name, path, st.st_size if st else '-', st.st_mtime_ns if st else '-', st.st_ino if st else '-')\n")


def _namespaces():
    """This process's kernel and namespaces (boot id, network, pid and mount namespaces)."""
    out = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/net", "/proc/self/ns/pid", "/proc/self/ns/mnt"):
        try:
            out.append(open(path).read().strip() if path.endswith("boot_id") else os.stat(path).st_ino)
        except OSError:
            out.append(None)
    return out


def _imports_seen(argv, imports, env, workdir):
    """What the server's interpreter finds for its imports (_WHERE's lines), or None."""
    try:
        out = subprocess.run([*argv, "-c", _WHERE, *imports], env=env, cwd=workdir or None, capture_output=True,
                             timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode("utf-8", "replace")[:65536] if out.returncode == 0 else None


def warm_key(order, env, argv, workdir, run_dir):
    """A digest of everything a server's forks depend on (the module's docstring), from this
    run's order: two runs with the same key may share a server. Raises OSError where the
    imports' files cannot be told (no server is kept then)."""
    own = set(sibling("zygote").TASK_OWN) | {str(order.get("pad") or "")}
    shared = sorted((k, v) for k, v in env.items() if k not in own and not k.startswith(_OWN_PREFIXES))
    # (the host's name and namespaces too: a temp dir shared between machines (an NFS one) or
    # between containers must not let one take another's server, whose forks would run in the
    # other's network, and whose pid means another process here)
    imports = [str(m) for m in order.get("imports") or ["tensorflow"]]
    seen = _imports_seen(argv, imports, env, workdir)
    if seen is None:
        raise OSError(0, "%s could not say where its imports are" % argv[0])
    h = hashlib.sha256(json.dumps([socket.gethostname(), _namespaces(), argv, imports, shared, workdir,
                                   order.get("pad"), order.get("title"), seen]).encode())
    for name in WARM_FILES:
        with open(os.path.join(run_dir, name), "rb") as fh:
            h.update(name.encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


def hold(path, wait):
    """A connection that holds the server at ``path`` (zygote.py "hold") and its pid, or (None,
    why): why is "" where no server is there (nothing listens: it ended)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None, ""
    try:
        conn.settimeout(wait)
        body = b'{"hold": true}'
        conn.sendall(struct.pack("!I", len(body)) + body)
        line = b""
        while not line.endswith(b"\n") and len(line) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            line += chunk
        said = json.loads(line.decode() or "null")
        pid = said.get("held") if isinstance(said, dict) else None
        if type(pid) is not int or pid <= 1:
            raise ValueError("no pid in %r" % line[:80])
        conn.settimeout(None)
        return conn, pid
    except socket.timeout:
        conn.close()
        return None, "it did not answer within %g s" % wait
    except (OSError, ValueError) as exc:
        conn.close()
        return None, "its answer: %s" % (getattr(exc, "strerror", None) or exc)


def warm(order, run_dir, workdir):
    """The server kept warm for this run: adopted where one with this run's key serves, else
    started (from its own copy of the server's files, in WARM/KEY): (a Warm, the reply's
    "zygote") or (None, {"warm_off": why}) where none can be (the run then starts its own)."""
    base, problem = warm_dir()
    if base is None:
        return None, {"warm_off": problem}
    env = _env(order)
    argv = _argv(order, env)
    try:
        key = warm_key(order, env, argv, workdir, run_dir)
    except OSError as exc:
        return None, {"warm_off": "cannot tell what its forks would depend on (%s)" % (exc.strerror or exc)}
    folder = os.path.join(base, key)
    path = os.path.join(folder, "z.sock")
    keep = _seconds(order.get("keep_warm"))
    lock = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (two runs starting at once: one server for both)
        _sweep(base, folder)
        if os.path.lexists(folder):
            problem = privsock.check_dir(folder)
            if problem:
                return None, {"warm_off": problem}
            conn, got = hold(path, HOLD_WAIT) if os.path.lexists(path) else (None, "")
            if conn is not None:
                _note(run_dir, "this run's fork server is the warm one in %s (pid %d), of an earlier run" % (folder, got))
                return Warm(got, path, conn), {"socket": path, "warm": {"pid": got, "reused": True, "keep": keep}}
            if got:  # (one is there, but not for this run: this run's server is its own)
                return None, {"warm_off": "the warm server in %s: %s" % (folder, got)}
            shutil.rmtree(folder, ignore_errors=True)  # (a server that ended without removing it)
        return _start_warm(order, run_dir, workdir, env, argv, folder, path, keep)
    finally:
        os.close(lock)


def _sweep(base, mine):
    """The dirs of servers that ended without removing theirs (killed: SIGKILL, OOM) removed, but
    ``mine`` (the caller decides on it). Under the warm dir's lock: a dir is made and its socket
    bound under it, so a dir whose socket refuses (or has none) has no server."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        folder = os.path.join(base, name)
        if folder == mine or privsock.check_dir(folder):
            continue
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(os.path.join(folder, "z.sock"))
        except (FileNotFoundError, ConnectionRefusedError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass
        finally:
            probe.close()


def _start_warm(order, run_dir, workdir, env, argv, folder, path, keep):
    try:
        os.mkdir(folder, 0o700)
        for name in WARM_FILES:  # (its own copy: the run's dir may go before it does)
            shutil.copyfile(os.path.join(run_dir, name), os.path.join(folder, name), follow_symlinks=False)
        listener = privsock.bind_private(path)
    except (OSError, privsock.NotPrivate) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return None, {"warm_off": "cannot start a server in %s (%s)" % (folder, getattr(exc, "strerror", None) or exc)}
    try:
        log = os.open(os.path.join(folder, "zygote.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            child = subprocess.Popen(
                [*argv, *_server_args(order, folder, path, listener), "--idle-exit", "%g" % keep,
                 "--title", "t" * int(order.get("title") or 64)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir or run_dir,
                close_fds=True, pass_fds=(listener.fileno(),), start_new_session=True)
        finally:
            os.close(log)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return None, {"warm_off": "cannot start %s (%s)" % (argv[0], exc.strerror)}
    finally:
        listener.close()
    # This run's hold: sent now, answered once the import is done (it waits in the backlog).
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        body = b'{"hold": true}'
        conn.sendall(struct.pack("!I", len(body)) + body)
    except OSError:
        conn.close()
        conn = None
    _note(run_dir, "this run's fork server is kept warm in %s (pid %d) for %g s after the run" % (folder, child.pid, keep))
    return Warm(child.pid, path, conn, child), {"socket": path, "warm": {"pid": child.pid, "reused": False, "keep": keep}}


def _note(run_dir, line):
    """One line in the run dir's server log (where a run-scoped server's lines go)."""
    try:
        with open(os.path.join(run_dir, log_name()), "a") as fh:
            fh.write("tfcluster-zygote: %s\n" % line)
    except OSError:
        pass
