"""A host's fork server kept warm past its run, so that the next run of the same spec forks at once:
zygotehost.py's start of it when the order says "keep_warm": s > 0 (``ssh.keep_warm``).

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
imported through sibling.py by zygotehost.py."""

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sibling import sibling  # noqa: E402

sys.path.pop(0)
privsock = sibling("privsock")


def host():
    """zygotehost.py (imported once, by its agent or here): the run's server's environment, argv
    and log, which a warm one shares."""
    return sibling("zygotehost")


WARM_FILES = ("zygote.py", "zygotewait.py", "zygotechild.py", "masking.py", "sibling.py", "privsock.py")
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

    warm = True  # (zygotehost.end lets it go rather than stopping it)

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
        host()._close_pidfd(self)


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
    env = host()._env(order)
    argv = host()._argv(order, env)
    try:
        key = warm_key(order, env, argv, workdir, run_dir)
    except OSError as exc:
        return None, {"warm_off": "cannot tell what its forks would depend on (%s)" % (exc.strerror or exc)}
    folder = os.path.join(base, key)
    path = os.path.join(folder, "z.sock")
    keep = host()._seconds(order.get("keep_warm"))
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
                [*argv, *host()._server_args(order, folder, path, listener), "--idle-exit", "%g" % keep,
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
        with open(os.path.join(run_dir, host().log_name()), "a") as fh:
            fh.write("tfcluster-zygote: %s\n" % line)
    except OSError:
        pass
