"""Remote host agent: preflight, port hold, reachability probe, then the host's first task.

The ssh backend runs it once per host as ``python3 -S -c <this source> TAG`` -- the one
remote shell that host costs before its first task runs (a login shell can cost 0.2 s of CPU,
so one per host, not two, is what keeps fan-out near pdsh's). The shell runs it "quiet"
(launcher/backends/ssh/commands.py): killed by a signal, it is reported as exit 128+N, and the
shell never prints its command line (this source) into the task's output.

Protocol (one JSON object per line on stdin/stdout):

0. argv     -> TAG: the run-unique tail of the pid file of the task "go" will start
1. request  -> {"require": [...], "workdir": d, "run_dir": d, "state_dir": d, "share": "private"|"group",
                "files": {name: text}, "ports": [p, ...], "argv0": cmd, "gpus": bool}
   reply    <- {"python": "3.11.7", "hostname": h, "home": d, "workdir": abs|null, "run_dir": abs,
                "state_dir": abs, "deps": {module: [found, version]}, "ports": {p: null|problem},
                "argv0_found": bool, "gpus": [[index, name, uuid], ...] (when asked: nvidia-smi -L
                through the uploaded gpuplace.py; [] for none), "error": null|text,
                "unsafe": null|[which dir ("run_dir", "state_dir", "workdir"), problem]}
   Each dir, and every dir above it, must be one no other user can swap (pathtrust.py, whose text
   is sent ahead of this one), else "unsafe" says which and nothing is written in it; the run
   and state dirs are made 0700 (0750 with "share": "group"), the files 0600 (0640).
   The listed ports stay bound (listening) until "go" or stdin closes, so other hosts can probe them.
2. request  -> {"targets": [[key, address, port], ...], "timeout": seconds per try,
                "deadline": seconds in all (tries are repeated until then)}
   reply    <- {"results": [[key, null|problem], ...]}
   request  -> {"marker": {"op": "write"|"check"|"remove", "path": p}}   (state.sync: auto)
   reply    <- {"marker": bool, "error": null|text}
   The marker ops also ride on the other requests, saving a round trip each: request 1 with
   "marker" (a write: the chief's host; the launcher asks for its removal once every host looked,
   and this agent removes it at "go" or when it ends if that request never came) and
   a "targets" request with "marker" (a check: the other hosts) add "marker" (and
   "marker_error") to their replies.
   Request 1 with "zygote" also starts the host's fork server (zygotehost.py): the reply adds
   "zygote": {"socket": path} or {"error": text}. It ends with this agent; "keep" instead of "go" (no
   reply) makes this agent its keeper, stdin its lifeline, its channel the server's (zygotehost.keep).
3. request  -> {"go": {"env": {...}, "args": [taskwrap options, "--", argv...]}}
   no reply: the ports are released and this process becomes the task wrapper (``boot.py``
   and ``taskwrap.py`` uploaded in step 1), pid and channel unchanged, once the run dir and
   those files are checked again (else one line and exit 2: nothing of the dir is imported). The ``--pidfile`` of
   those options must end with TAG: stop commands verify that a pid is still this wrapper by
   finding that tail in its command line. The rest of stdin is then the task's lifeline.
Stdin closing before "go" -> listeners close, exit 0. A watchdog exits after 120 s without "go".

Stdlib only, Python 3.6+.
"""

import errno
import json
import os
import socket
import sys
import threading
import time

if "unsafe" not in globals():  # imported as launcher's module (tests); on a host its text came first
    from launcher.remote.pathtrust import absolute, resolved, unsafe  # noqa: F401
if "port_holders" not in globals():  # (likewise: launcher/contract/portcheck.py's text)
    from launcher.contract.portcheck import port_holders  # noqa: F401


def _send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _dist_version(module):
    try:
        from importlib import metadata
    except ImportError:
        return None
    names = [module, module.replace("_", "-")]
    if module == "tensorflow":
        names += ["tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly"]
    try:
        mapping = metadata.packages_distributions()
        names = list(mapping.get(module, [])) + names
    except Exception:
        pass
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def _deps(modules):
    import importlib.util

    if modules and "site" not in sys.modules:
        import site  # started with -S for speed: add site-packages only when needed

        site.main()

    out = {}
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except Exception:
            found = False
        out[m] = [found, _dist_version(m) if found else None]
    return out


def _bind(port):
    """Listen on every address like a TF server; (socket, None) or (None, problem)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("0.0.0.0", port))
        sock.listen(128)
        return sock, None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            held = port_holders(port)  # (who: another user's process among them)
            return None, "in use" + (" by " + ", ".join(held) if held else "")
        if exc.errno == errno.EACCES:
            return None, "not permitted (a privileged port)"
        return None, "not bindable (%s)" % exc.strerror


def _write(path, text, mode=0o600):
    # A new file of a name no one could plant beforehand (exclusive: a symlink there fails the open),
    # renamed over the target (which replaces a symlink there, never its target).
    tmp = "%s.%d.%s.tmp" % (path, os.getpid(), os.urandom(6).hex())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _unsafe_dirs(dirs):
    """[which, problem] for the first of ``dirs`` (which, path) another user could swap, else None."""
    for which, path in dirs:
        problem = unsafe(path)
        if problem:
            return [which, problem]
    return None


def _makedirs(path, mode):
    """``path`` and the dirs above it that are missing, each made with ``mode`` whatever the umask."""
    parent = os.path.dirname(path)
    if parent and parent != path and not os.path.isdir(parent):
        _makedirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return
    os.chmod(path, mode)


def _find(argv0, workdir):
    """Whether the task's command exists, with the PATH the task gets (this python's dir first)."""
    import shutil

    if not argv0 or argv0.startswith("-"):
        return False
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(workdir or ".", argv0)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    bindir = os.path.dirname(sys.executable)
    return shutil.which(argv0, path=bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")) is not None


def _prepare(req):
    reply = {"python": "%d.%d.%d" % sys.version_info[:3], "hostname": socket.gethostname(),
             "home": os.path.expanduser("~"), "error": None}
    wd = req.get("workdir")
    reply["workdir"] = absolute(wd) if wd and os.path.isdir(wd) else None  # (`..` kept: as the kernel goes)
    reply["unsafe"] = None
    dir_mode, file_mode = (0o750, 0o640) if req.get("share") == "group" else (0o700, 0o600)
    try:
        run_dir = absolute(req["run_dir"])
        state_dir = req["state_dir"]
        local_state = "://" not in state_dir  # a gs:// state dir is the task's business, not a local path
        if local_state:
            state_dir = absolute(state_dir)
        dirs = [("run_dir", run_dir)] + ([("state_dir", state_dir)] if local_state else []) \
            + ([("workdir", reply["workdir"])] if reply["workdir"] else [])
        reply["unsafe"] = _unsafe_dirs(dirs)  # before anything is made: nothing in another user's dir
        if reply["unsafe"] is None:
            _makedirs(os.path.join(run_dir, "pids"), dir_mode)
            os.chmod(run_dir, dir_mode)
            if local_state:
                _makedirs(state_dir, dir_mode)
                os.chmod(state_dir, dir_mode)
            reply["unsafe"] = _unsafe_dirs(dirs)  # and the dirs just made (a race in a sticky dir)
        if reply["unsafe"] is None:
            # Where the kernel took them (checked on the way there): what runs from the run dir
            # later makes its path absolute as text, and must find the same dir.
            run_dir, state_dir = resolved(run_dir), resolved(state_dir) if local_state else state_dir
            reply["workdir"] = resolved(reply["workdir"]) if reply["workdir"] else None
            for name, text in (req.get("files") or {}).items():
                _write(os.path.join(run_dir, name), text, file_mode)
            reply["run_dir"], reply["state_dir"] = run_dir, state_dir
        else:
            reply["error"] = "%s: %s" % tuple(reply["unsafe"])
    except OSError as exc:
        reply["error"] = "cannot create %s (%s)" % (exc.filename or req.get("run_dir"), exc.strerror)
    reply["deps"] = _deps(req.get("require") or [])
    argv0 = req.get("argv0")
    if argv0:
        reply["argv0_found"] = _find(argv0, reply["workdir"])
    socks, ports = [], {}
    for port in req.get("ports") or []:
        sock, problem = _bind(int(port))
        ports[str(port)] = problem
        if sock is not None:
            socks.append(sock)
    reply["ports"] = ports
    if req.get("gpus") and reply.get("run_dir") and not reply["error"]:
        sys.path.insert(0, reply["run_dir"])
        try:
            import gpuplace  # uploaded in this step, next to taskwrap.py, with gpuquery.py
            import gpuquery

            found, failure = gpuquery.host_gpus_checked()
            # The host's own CUDA_VISIBLE_DEVICES (its environment, which the tasks inherit) bounds them.
            reply["gpus"] = [list(g) for g in gpuplace.within(found, os.environ.get(gpuplace.CUDA_VAR))[0]]
            if failure:
                reply["gpus_failure"] = failure
        except Exception as exc:  # an old or missing file: say so, the launcher reports it
            reply["gpus"] = None
            reply["gpus_error"] = "%s: %s" % (type(exc).__name__, exc)
        finally:
            sys.path.pop(0)
    return reply, socks


def _probe(targets, timeout, deadline=None, parallel=32):
    """Connect to every target; [[key, None|problem], ...].

    Every target is already listening when this runs (the launcher asks only once every host
    has bound its ports). A connection that times out or is refused is tried again until
    ``deadline`` seconds have passed, each try bounded by ``timeout``: a slow host (a loaded
    machine, a cold VM, a SYN lost among many) answers a later try; a firewall that drops
    never does, and is named when the deadline passes. At most ``parallel`` tries at once."""
    deadline = max(float(timeout), float(deadline or timeout))
    end = time.monotonic() + deadline
    gate = threading.Semaphore(parallel)
    results = [None] * len(targets)

    def one(i, key, address, port):
        problem = "no answer"
        while True:
            try:
                with gate:
                    left = end - time.monotonic()
                    conn = socket.create_connection((address, int(port)), timeout=max(0.2, min(timeout, left)))
                conn.close()
                problem = None
                break
            except socket.timeout:
                problem = "timed out after %gs" % deadline
            except OSError as exc:
                problem = exc.strerror or str(exc)
            if end - time.monotonic() < 0.3:
                break
            time.sleep(0.25)
        results[i] = [key, problem]

    threads = [threading.Thread(target=one, args=(i,) + tuple(t)) for i, t in enumerate(targets)]
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()) + timeout + 2)
    return [r if r is not None else [targets[i][0], "no answer"] for i, r in enumerate(results)]


class _Drainer(object):
    """Accept and close probe connections on the held ports, so their backlogs never fill
    (every host probes every port, some more than once). ``stop`` ends the thread before the
    ports are released, so nothing of it outlives "go"."""

    def __init__(self, socks):
        self.socks = list(socks)
        self.wake_r, self.wake_w = os.pipe()
        self.thread = threading.Thread(target=self._run)
        self.thread.daemon = True
        self.thread.start()

    def _run(self):
        import select

        while True:
            try:
                ready, _, _ = select.select(self.socks + [self.wake_r], [], [])
            except (OSError, ValueError):
                return
            if self.wake_r in ready:
                return
            for s in ready:
                try:
                    conn, _ = s.accept()
                    conn.close()
                except OSError:
                    pass

    def stop(self):
        os.write(self.wake_w, b"x")
        self.thread.join(5)
        os.close(self.wake_r)
        os.close(self.wake_w)


def _marker(req):
    """state.sync auto: write, look for, or remove a marker file in the state dir."""
    path, op = req["path"], req["op"]
    try:
        if op == "write":
            _write(path, "tfcluster\n")
            return {"marker": True}
        if op == "check":
            return {"marker": os.path.exists(path)}
        if op == "remove":
            os.unlink(path)
            return {"marker": True}
    except OSError as exc:
        return {"marker": False, "error": exc.strerror or str(exc)}
    return {"marker": False, "error": "unknown op %r" % op}


class _Lines:
    """Lines from fd 0 read with os.read: nothing after the "go" line is buffered away from
    the task wrapper, which watches the same descriptor."""

    def __init__(self, fd=0):
        self.fd = fd
        self.buf = b""

    def readline(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return b""
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _go(order, socks, run_dir, tag):
    """Release the held ports and become the task wrapper (in this process)."""
    for s in socks:
        s.close()
    args = [str(a) for a in order["args"]]
    pidfile = args[args.index("--pidfile") + 1] if "--pidfile" in args[:-1] else ""
    if not tag or not pidfile.endswith(tag):
        sys.stderr.write("tfcluster agent: go with pid file %r, not this agent's %r\n" % (pidfile, tag))
        return 2
    sys.stdout.flush()
    os.dup2(1, 2)  # one ordered stream; the channel merges stderr anyway
    # Checked again now, just before its code is imported: a dir that passed the preflight could
    # since have been swapped only by someone who could write above it, which this check sees.
    problem = unsafe(run_dir, files=("boot.py", "taskwrap.py"))
    if problem:
        sys.stderr.write("tfcluster agent: refusing to run code from %s: %s; fix ssh.remote_dir\n" % (run_dir, problem))
        return 2
    sys.path.insert(0, run_dir)
    import boot  # uploaded in step 1, next to taskwrap.py

    return boot.become(os.path.join(run_dir, "taskwrap.py"), order.get("env") or {}, args)


def main(argv):
    timer = threading.Timer(120.0, lambda: os._exit(3))
    timer.daemon = True
    timer.start()
    tag = argv[0] if argv else None  # the run-unique tail of the pid file "go" must use
    lines = _Lines(0)
    line = lines.readline()
    if not line:
        return 0
    first = json.loads(line.decode("utf-8"))
    reply, socks = _prepare(first)
    written = None  # the marker this agent wrote in its first exchange: removed at "go" or its end
    if first.get("marker") and not reply["error"]:
        reply.update(_riding(first["marker"]))
        written = first["marker"]["path"] if reply.get("marker") is True else None
    zygote, said = _zygote(first["zygote"], reply["run_dir"], reply["workdir"]) \
        if first.get("zygote") and not reply["error"] else (None, None)
    reply.update({"zygote": said} if said else {})
    drainer = _Drainer(socks)
    _send(reply)
    try:
        while True:
            line = lines.readline()
            if not line:
                break
            req = json.loads(line.decode("utf-8"))
            if "targets" in req:
                out = {"results": _probe(req["targets"], float(req.get("timeout", 3.0)), req.get("deadline"))}
                if req.get("marker"):
                    out.update(_riding(req["marker"]))
                _send(out)
            elif "marker" in req:
                _send(_marker(req["marker"]))
            elif ("go" in req and not reply["error"]) or ("keep" in req and zygote is not None):
                timer.cancel()
                timer.join()
                drainer.stop()
                _unlink(written)
                written = None
                if "keep" in req:  # (a small keeper of its own, this process exec'd: zygotehost.py)
                    return zygote[0].become_keeper(lines, req["keep"] or {}, socks, zygote[1], first["zygote"], reply, unsafe)
                return _go(req["go"], socks, reply["run_dir"], tag)
    finally:
        _unlink(written)
        if zygote is not None:
            zygote[0].end(zygote[1], float(first["zygote"].get("grace") or 5))
    drainer.stop()
    for s in socks:
        s.close()
    return 0


def _zygote(order, run_dir, workdir):
    """The host's fork server started (zygotehost.py: its files checked again before it is imported):
    ((zygotehost, its process) or None, the reply's "zygote")."""
    problem = unsafe(run_dir, files=("zygotehost.py", "zygotewarm.py", "taskwrap.py", "sibling.py", "zygote.py",
                                     "zygotewait.py", "zygotechild.py", "masking.py", "privsock.py"))
    if problem:
        return None, {"error": "refusing to run code from %s: %s" % (run_dir, problem)}
    sys.path.insert(0, run_dir)
    import zygotehost

    sys.path.pop(0)
    proc, said = zygotehost.start(order, run_dir, workdir)
    return (zygotehost, proc) if proc is not None else None, said


def _riding(req):
    """A marker op on another request: its answer as "marker", its error as "marker_error"
    ("error" is that request's own)."""
    got = _marker(req)
    return dict({"marker": got["marker"]}, **({"marker_error": got["error"]} if got.get("error") else {}))


def _unlink(path):
    try:
        os.unlink(path) if path else None
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
