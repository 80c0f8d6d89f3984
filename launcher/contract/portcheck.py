"""A task's own TensorFlow port, checked by the task itself right before the user's code runs
(docs/concepts/trust.md, "Network: TensorFlow's ports").

TensorFlow's gRPC server binds ``0.0.0.0:PORT`` (the port of the task's own address in TF_CONFIG)
with SO_REUSEADDR and SO_REUSEPORT off, so nothing can hold the port for it: between any check and
its bind, another process (another user's among them) may take it. The launcher's preflight checks
at ``up``; this check, made in the task's process just before the script's first line (the task
stub, launcher/remote/pystandby.py, which carries this text; the reference worker, once TensorFlow
is imported), leaves only the script's own time up to its strategy's server. A port found taken
is one line naming its holder (user, pid, command line, escaped) and exit TASK_EXIT_PORT_TAKEN, which
the supervisor reports as the port taken (launcher/supervise/diagnose.py), not as a TF crash.

Also who holds a port on this machine (``port_holders``), for the launcher's own messages.

Stdlib only, no ``from __future__`` and no import of its own package's: the stub carries this
text in the middle of its own.
"""

import errno
import json
import os
import socket
import time

TASK_EXIT_PORT_TAKEN = 98  # a task's exit code, not tfcluster's (launcher/errors.py); Linux's EADDRINUSE
PORT_FIX = "stop it, or change ports.base in the spec"
# /proc/net/tcp's states that hold a port against a new bind (not TIME_WAIT, 06, which gRPC's
# SO_REUSEADDR binds over): ESTABLISHED..CLOSING and LISTEN.
_PORT_HOLDING = {"01", "02", "03", "04", "05", "07", "08", "09", "0A", "0B"}


def task_port(tf_config):
    """(task key, port) of the task's own address in the TF_CONFIG text, or None where it names
    none (no cluster, an evaluator: TensorFlow starts no server for it)."""
    try:
        config = json.loads(tf_config or "{}")
        task = config["task"]
        address = config["cluster"][task["type"]][int(task["index"])]
        return f"{task['type']}:{int(task['index'])}", int(str(address).rsplit(":", 1)[1])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def port_bind_problem(port):
    """Why ``port`` cannot be bound here as gRPC binds it (``in use``, ``not permitted``), or None.
    SO_REUSEADDR like gRPC's own bind, so only a live socket (not TIME_WAIT) counts."""
    for family, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((addr, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "in use"
            if exc.errno == errno.EACCES:
                return "not permitted (a privileged port)"
            if exc.errno == errno.EADDRNOTAVAIL:
                continue
            return f"not bindable ({exc.strerror})"
        finally:
            sock.close()
    return None


def port_shown(text, limit=120):
    """``text`` for one line: control and other unprintable characters escaped (``\\x1b``), cut."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text[:limit * 2])
    return out[:limit]


def _port_user(uid):
    try:
        import pwd

        return f"user {port_shown(pwd.getpwuid(int(uid)).pw_name, 32)}"
    except (KeyError, ValueError, ImportError):
        return f"uid {port_shown(str(uid), 12)}"


def port_holders(port, limit=3, budget=1.0):
    """Who holds TCP ``port`` on this machine, for a message: ``pid 123 of user ann (python -m
    http.server)`` per process found (at most ``limit``), or ``a process of user ann`` where its
    descriptors cannot be read (another user's, to anyone but root). Reads /proc/net/tcp and
    tcp6, then the socket inodes in /proc/*/fd, for at most ``budget`` seconds; [] if none."""
    owners = {}  # socket inode -> uid
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/net/{name}", "rb") as fh:
                rows = fh.read(8 << 20).decode("ascii", "replace").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[1].rsplit(":", 1)[-1] == f"{port:04X}" and cols[3] in _PORT_HOLDING:
                owners.setdefault(cols[9], cols[7])
    owners.pop("0", None)
    if not owners:
        return []
    found = {}
    wanted = {f"socket:[{inode}]": inode for inode in owners}
    end = time.monotonic() + budget
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        if time.monotonic() > end or len(found) >= min(limit, len(owners)):
            break
        for link in _port_fd_links(pid):
            if link in wanted and wanted[link] not in found:
                found[wanted[link]] = f"pid {pid} of {_port_user(owners[wanted[link]])} ({_port_cmdline(pid)})"
                break
    out = list(dict.fromkeys(found.values()))
    out += [f"a process of {_port_user(uid)}" for inode, uid in owners.items() if inode not in found]
    return list(dict.fromkeys(out))[:limit]


def _port_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read(4096).decode("utf-8", "replace").split("\0")
    except OSError:
        return "?"
    return port_shown(" ".join(a for a in argv if a)) or "?"


def _port_fd_links(pid):
    """What each of ``pid``'s descriptors points at ([] if they cannot be read); one that closes
    while they are read (this process's own listing of them, among others) is left out."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return links


# How long a port found in use is looked at again before it counts as taken: a process of the
# task's previous attempt may still be on its way out (its listener closes when it exits).
IN_USE_GRACE = 3.0


def port_taken_line(environ, grace=IN_USE_GRACE):
    """The one line for a task whose own port (TF_CONFIG in ``environ``) is taken, or None. A port
    in use is looked at again for up to ``grace`` seconds; still in use, its holders are named."""
    found = task_port(environ.get("TF_CONFIG"))
    if found is None:
        return None
    key, port = found
    problem = port_bind_problem(port)
    end = time.monotonic() + grace
    while problem == "in use" and time.monotonic() < end:
        time.sleep(0.1)
        problem = port_bind_problem(port)
    if problem is None:
        return None
    held = port_holders(port) if problem == "in use" else []
    what = f"taken by {', '.join(held)}" if held else ("taken" if problem == "in use" else problem)
    return f"tfcluster: port {port} of {key} is {what}; {PORT_FIX}"


def check_task_port(environ=None):
    """Exit TASK_EXIT_PORT_TAKEN with the one line on stderr when the task's own port is taken."""
    line = port_taken_line(os.environ if environ is None else environ)
    if line is not None:
        import sys

        print(line, file=sys.stderr, flush=True)
        sys.exit(TASK_EXIT_PORT_TAKEN)


def check_task_port_once_imported(module="tensorflow", environ=None):
    """Check the task's port again right after ``module``'s import, wherever the script imports it
    (the import is most of a cold start's time before its server binds): ``check_task_port`` when
    the module's own code has run (after_import). A taken port is then a SystemExit(98) out of
    that import. Nothing where ``module`` is imported already (a promoted standby: the check
    before the script was the last one) or the task has no port."""
    import sys

    env = os.environ if environ is None else environ
    if module in sys.modules or task_port(env.get("TF_CONFIG")) is None:
        return
    after_import(module, lambda: check_task_port(env))


def after_import(module, then):
    """Run ``then()`` right after ``module``'s own code has run, wherever it is imported first: a
    finder first on ``sys.meta_path``, used once, whose module's loader runs ``then`` after it.
    (The standby stub, which carries this text, sets TensorFlow's frame filter by it too.)"""
    import sys

    class _Once:
        def find_spec(self, name, path=None, target=None):
            if name != module:
                return None
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec(name)
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run = loader.exec_module

            def exec_module(mod):
                run(mod)
                then()

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Once())
