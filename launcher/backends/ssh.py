"""SSH backend: run the plan's tasks on remote hosts over one Fabric connection per host.

* One ``fabric.Connection`` per host, opened in parallel and reused for preflight, setup,
  task start, output streaming, port checks and stops (SSH handshakes are the expensive part).
* Host keys are verified against known_hosts (see ssh_connect); trust-on-first-use is opt-in.
* One remote command (so one login shell) per host before its first task runs: the host agent
  (``remote/agent.py``) does the preflight, holds the task ports for the reachability probe, and
  on "go" becomes the host's first task wrapper in the same process and channel. Later tasks on
  that host (and restarts) start through ``boot.py``.
* Each task runs under ``taskwrap.py`` (uploaded into a per-run remote dir) and gets its
  environment over the channel's stdin, so no value ever appears on a remote command line.
  Every other value that reaches a remote shell is ``shlex.quote``d.
* The channel's stdin is the lifeline: the launcher writes a byte about every second and the
  wrapper kills its task group when the channel closes or nothing arrives for ``ssh.lease`` s.
* Stop = signal the task's process group, after verifying that the pid in its pid file is still
  the wrapper of this run (its command line names that pid file's run-unique tail) -- never by
  name pattern.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import shlex
import signal as _signal
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from ..console import Console
from ..errors import LaunchError
from ..plan import Plan, PlannedTask
from ..remote import source as remote_source
from ..spec import Host, LoadedSpec, SSHOptions
from .base import Backend, LineSink, TaskHandle
from .ssh_heartbeat import Heartbeat
from .ssh_state import StateSync

TASKWRAP = Path(__file__).resolve().parent.parent / "taskwrap.py"
EXIT_CONNECTION_LOST = 255  # what ssh(1) reports when the connection drops
_SIG_EXIT = 128
_PROBE_REPLY_TIMEOUT = 60.0
_SYNC_EXCLUDE = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv", "venv", "node_modules"}

# (host name, command, stdin bytes or None, timeout) -> (exit code, combined output)
Runner = Callable[[str, str, Optional[bytes], float], tuple[int, str]]


# ---------------------------------------------------------------- remote command lines (pure)


def q(value: str) -> str:
    return shlex.quote(str(value))


def task_command(python: str, workdir: str, run_dir: str, pidfile: str, lease: float, grace: float,
                 argv: Sequence[str]) -> str:
    """The shell command that starts one task. The env is NOT in it (it goes over stdin).

    ``; exit $?`` keeps the shell waiting, so a wrapper killed by signal N is reported as
    exit status 128+N (paramiko ignores SSH's exit-signal message)."""
    boot = posixpath.join(run_dir, "boot.py")
    wrap = posixpath.join(run_dir, "taskwrap.py")
    # -S: the wrapper needs only the stdlib; skipping site saves a large part of its start-up.
    # The task itself starts its own interpreter normally.
    parts = [q(python), "-S", q(boot), q(wrap), "--lease", f"{lease:g}", "--grace", f"{grace:g}",
             "--pidfile", q(pidfile), "--"] + [q(a) for a in argv]
    return f"cd {q(workdir)} && " + " ".join(parts) + "; exit $?"


def env_block(env: Mapping[str, str]) -> bytes:
    body = json.dumps(dict(env), separators=(",", ":")).encode("utf-8")
    return str(len(body)).encode("ascii") + b"\n" + body


def pid_tag(pidfile: str) -> str:
    """The run-unique tail of a pid file path (``NAME/RUN_ID/pids/FILE``). A wrapper's command
    line always contains it: the host agent is started with it before the remote run dir's
    absolute path is known, boot.py with the whole path."""
    return "/".join(pidfile.split("/")[-4:])


_VERIFY = (
    'read pid child < "$pf" 2>/dev/null || {{ echo "nopid $pf"; continue; }}; '
    'case $pid in ""|*[!0-9]*) echo "nopid $pf"; continue;; esac; '
    'tag=${{pf#"${{pf%/*/*/*/*}}"}}; tag=${{tag#/}}; [ -n "$tag" ] || tag=$pf; '
    'grep -qaF -- "$tag" /proc/$pid/cmdline 2>/dev/null || {{ echo "gone $pf"; continue; }}; '
)


def signal_command(sig: int, pidfiles: Iterable[str]) -> str:
    """Signal each task's process group, but only if the pid in its pid file is still the
    wrapper that wrote it (its /proc cmdline names the pid file's run-unique tail)."""
    name = _signal.Signals(sig).name.removeprefix("SIG")
    files = " ".join(q(p) for p in pidfiles)
    return (
        f"for pf in {files}; do "
        + _VERIFY.format()
        + f'kill -s {name} -- "-$pid" 2>/dev/null && echo "sent $pf" || echo "gone $pf"; done; true'
    )


def state_command(pidfile: str) -> str:
    """Print the scheduler state letter of the task process (the wrapper's child)."""
    return (
        f"pf={q(pidfile)}; tag={q(pid_tag(pidfile))}; read pid child < \"$pf\" && "
        "grep -qaF -- \"$tag\" /proc/$pid/cmdline && sed 's/.*) //' /proc/$child/stat | cut -d' ' -f1"
    )


def down_command(run_dirs: Iterable[str], grace: float) -> str:
    """Stop every task of the given remote run dirs: verified TERM to each group, wait up to
    ``grace`` s, then KILL what is left. Prints ``stopped PIDFILE`` per task it stopped."""
    globs = " ".join(f"{q(posixpath.join(d, 'pids'))}/*.pid" for d in run_dirs)
    return (
        f'found=""; for pf in {globs}; do [ -f "$pf" ] || continue; '
        + _VERIFY.format()
        + 'kill -s TERM -- "-$pid" 2>/dev/null && { found="$found $pid"; echo "stopped $pf"; }; done; '
        f"n=0; while [ -n \"$found\" ] && [ $n -lt {max(0, int(round(grace * 10)))} ]; do "
        'alive=""; for pid in $found; do kill -0 -- "-$pid" 2>/dev/null && alive="$alive $pid"; done; '
        'found=$alive; [ -n "$found" ] || break; sleep 0.1; n=$((n+1)); done; '
        'for pid in $found; do kill -s KILL -- "-$pid" 2>/dev/null; done; true'
    )


def setup_command(workdir: str, command: str) -> str:
    return f"mkdir -p {q(workdir)} && cd {q(workdir)} && {command}"


def sync_command(workdir: str) -> str:
    return f"mkdir -p {q(workdir)} && tar -xzf - -C {q(workdir)}"


def wrap_args(workdir: str, pidfile: str, lease: float, grace: float, argv: Sequence[str]) -> list[str]:
    """taskwrap's arguments for a task started by the host agent (which has no shell to cd)."""
    return ["--lease", f"{lease:g}", "--grace", f"{grace:g}", "--pidfile", pidfile, "--cwd", workdir, "--",
            *argv]


def agent_command(python: str, pidfile: Optional[str]) -> str:
    """The host agent (preflight, then the host's first task). -S for a fast start; it imports
    site itself when it has modules to look for. ``; exit $?`` as in ``task_command``."""
    tag = f" {q(pid_tag(pidfile))}" if pidfile else ""
    return f"{q(python)} -S -c {q(remote_source('agent.py'))}{tag}; exit $?"


def remote_paths(opts: SSHOptions, name: str, run_id: str) -> tuple[str, str, str]:
    """(run dir, state dir, workdir) on a host, relative to the remote home unless absolute."""
    base = posixpath.join(opts.remote_dir, name)
    run_dir = posixpath.join(base, run_id)
    state = posixpath.join(base, "state")
    if opts.workdir:
        workdir = opts.workdir
    elif opts.sync:
        workdir = posixpath.join(base, "work")
    else:
        workdir = "."
    return run_dir, state, workdir


def probe_deadline(probe_timeout: float, hosts: int) -> float:
    """How long a host keeps retrying a target before naming it unreachable: ``ssh.probe_timeout``
    for a few hosts, growing with the host count (every host probes every task port at once,
    and on a loaded machine the last hosts up answer late); a dropping firewall is named then."""
    return round(probe_timeout * max(1.0, hosts / 8), 3)


def make_tar(root: Path, paths: Sequence[str], exclude_dirs: Iterable[Path] = ()) -> bytes:
    """A gzipped tar of ``paths`` (relative to ``root``), without VCS and cache dirs."""
    excluded = {p.resolve() for p in exclude_dirs}
    buf = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        parts = Path(info.name).parts
        if any(p in _SYNC_EXCLUDE for p in parts) or info.name.endswith(".pyc"):
            return None
        if (root / info.name).resolve() in excluded:
            return None
        return info

    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for rel in paths:
            src = (root / rel).resolve()
            if not src.exists():
                raise LaunchError(f"ssh.sync: {rel} does not exist under {root}; fix the path")
            arcname = os.path.relpath(src, root.resolve())
            if arcname.startswith(".."):
                raise LaunchError(f"ssh.sync: {rel} is outside the workdir {root}; list paths inside it")
            tar.add(str(src), arcname=arcname, filter=keep)
    return buf.getvalue()


# ---------------------------------------------------------------- per-host state


class _HostState:
    def __init__(self, host: Host, opts: SSHOptions) -> None:
        self.spec = host
        self.name = host.name
        self.python = host.python or opts.python
        self.conn = None  # fabric.Connection, set when connected
        self.ready = False  # probe ran: run dir exists and helpers are uploaded
        self.run_dir = ""
        self.state_dir = ""
        self.workdir = ""
        self.lock = threading.Lock()
        self.forwarding = True
        # After preflight: (task key, channel) of the host agent waiting to become that task's
        # wrapper, so the host's first task costs no second remote shell.
        self.spare: Optional[tuple[str, object]] = None

    @property
    def transport(self):
        return self.conn.client.get_transport() if self.conn is not None else None


class SSHTask(TaskHandle):
    def __init__(self, task: PlannedTask, backend: "SSHBackend", host: _HostState, channel, pidfile: str,
                 on_line: LineSink) -> None:
        super().__init__(task)
        self.backend = backend
        self.host = host
        self.channel = channel
        self.pidfile = pidfile
        self._code: Optional[int] = None
        self._note = ""
        self._reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"ssh-out-{task.key}")
        self._reader.start()

    def _pump(self, on_line: LineSink) -> None:
        pending = b""
        try:
            while True:
                data = self.channel.recv(65536)
                if not data:
                    break
                pending += data
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    on_line(self.key, raw.decode("utf-8", "replace").rstrip("\r"))
        except Exception:  # noqa: BLE001 - a dropped connection ends the stream
            pass
        if pending:
            on_line(self.key, pending.decode("utf-8", "replace").rstrip("\r"))

    def poll(self) -> Optional[int]:
        if self._code is not None:
            return self._code
        silent = self.backend.heartbeat.silence(self.host.name)
        if silent > self.backend.opts.lease and not self.channel.exit_status_ready():
            # Its wrapper has heard nothing for as long and stops the task (the lease).
            self._note = f"{self.host.name}: no word for {silent:.0f} s (network partition or host down)"
            self._code = EXIT_CONNECTION_LOST
            return self._code
        if not self.channel.exit_status_ready():
            transport = self.host.transport
            if transport is not None and transport.is_active():
                return None
            if not self.channel.closed and transport is not None:
                return None
        code = self.channel.exit_status
        self._reader.join(timeout=2.0)
        if code is None or code < 0:
            code = EXIT_CONNECTION_LOST
            self._note = f"SSH connection to {self.host.name} lost; the wrapper stops the task within ssh.lease"
        self._code = code
        try:
            self.channel.close()
        except Exception:  # noqa: BLE001
            pass
        return code

    def signal(self, sig: int) -> None:
        self.backend.signal_tasks([self], sig)

    def info(self) -> dict:
        # No "host"/"pid"/"pgid" keys: the supervisor logs host itself and down.py treats pgid as local.
        return {"ssh_host": self.host.name, "remote_pidfile": self.pidfile, "remote_run_dir": self.host.run_dir}

    def state_note(self) -> str:
        if self._note or self._code is not None:
            return self._note
        silent = self.backend.heartbeat.silence(self.host.name)
        if silent > min(self.backend.opts.lease, 5.0):
            return f"{self.host.name}: no word for {silent:.0f} s (network partition or host down?)"
        code, out = self.backend.run_on(self.host.name, state_command(self.pidfile), None, 5.0)
        return "process is stopped (SIGSTOP?)" if code == 0 and out.strip() in ("T", "t") else ""

    def lifeline_cut(self) -> None:
        """Close our end of stdin: the wrapper sees EOF and stops its task group itself."""
        try:
            self.channel.shutdown_write()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------- the backend


class SSHBackend(Backend):
    name = "ssh"

    def __init__(self, loaded: LoadedSpec, record=None, console: Optional[Console] = None,
                 runner: Optional[Runner] = None) -> None:
        self.loaded = loaded
        self.spec = loaded.spec
        self.opts: SSHOptions = loaded.spec.ssh
        self.record = record
        self.console = console or Console()
        self.run_id = record.run_id if record is not None else "down"
        self.stop_grace = self.spec.watchdog.stop_grace
        self.hosts: dict[str, _HostState] = {h.name: _HostState(h, self.opts) for h in self.spec.hosts}
        self._runner = runner or self._paramiko_run
        self._tasks: list[SSHTask] = []
        self._tasks_lock = threading.Lock()
        self._starts: dict[str, int] = {}
        self._closing = threading.Event()
        self._lease_thread: Optional[threading.Thread] = None
        self.heartbeat = Heartbeat(interval=min(1.0, self.opts.lease / 4))
        if self.opts.config and not self._local(self.opts.config).is_file():
            raise LaunchError(f"ssh.config: {self.opts.config} does not exist; fix the path or remove the key")
        run_dir, state, workdir = remote_paths(self.opts, self.spec.name, self.run_id)
        self._state = StateSync(self)  # state: shared or copied (ssh_state.py)
        state = self._state.state_dir(state)
        for hs in self.hosts.values():
            hs.run_dir, hs.state_dir, hs.workdir = run_dir, state, workdir

    def _local(self, path: str) -> Path:
        from .ssh_connect import resolve_local

        return resolve_local(path, self.loaded.base_dir)

    # -------------------------------------------------------------- connections

    def _pool(self, n: int) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=max(1, min(64, n)), thread_name_prefix="ssh")

    def connect(self, names: Sequence[str]) -> dict[str, str]:
        """Open (or reuse) one connection per host, all in parallel; {host: problem} for failures."""
        with self._pool(len(names)) as pool:
            results = dict(zip(names, pool.map(self._connect_one, names)))
        return {k: v for k, v in results.items() if v}

    def _connect_one(self, name: str) -> Optional[str]:
        """Open (or reuse) the host's connection; None, or the one-line problem."""
        from .ssh_connect import describe_connect_error, make_connection, open_connection

        hs = self.hosts[name]
        with hs.lock:
            if hs.transport is not None and hs.transport.is_active():
                return None
            conn = None
            try:
                conn = make_connection(hs.spec, self.opts, self.loaded.base_dir)
                open_connection(conn, self.opts)
                hs.conn = conn
                return None
            except Exception as exc:  # noqa: BLE001 - every failure becomes one line
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001
                        pass
                    return describe_connect_error(exc, conn, hs.spec, self.opts)
                return f"host {name}: cannot connect ({exc})"

    def run_on(self, name: str, command: str, stdin: Optional[bytes] = None, timeout: float = 30.0) -> tuple[int, str]:
        return self._runner(name, command, stdin, timeout)

    def _paramiko_run(self, name: str, command: str, stdin: Optional[bytes], timeout: float) -> tuple[int, str]:
        """Run one command on the host's open connection; (exit code, output). -1 = no answer."""
        hs = self.hosts[name]
        transport = hs.transport
        if transport is None or not transport.is_active():
            problems = self.connect([name])
            if problems:
                return -1, problems[name]
            transport = hs.transport
        try:
            chan = transport.open_session(timeout=timeout)
            chan.set_combine_stderr(True)
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out = bytearray()
            deadline = time.monotonic() + timeout
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                out += data
                if time.monotonic() > deadline:
                    raise TimeoutError
            end = deadline - time.monotonic()
            if not chan.status_event.wait(max(0.1, end)):
                raise TimeoutError
            code = chan.exit_status
            chan.close()
            return code, out.decode("utf-8", "replace")
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, TimeoutError) or type(exc).__name__ == "timeout":
                return -1, f"no answer within {timeout:g} s"
            return -1, f"{type(exc).__name__}: {exc}"

    # -------------------------------------------------------------- preflight

    def preflight(self, plan: Plan) -> None:
        names = [h.name for h in plan.hosts]
        if not names:
            return
        if self.opts.sync or self.opts.setup:
            # Setup runs on every host at once (a ThreadingGroup): connect them all first.
            self._unreachable(names, self.connect(names))
            self._sync_and_setup(names)
        # Otherwise each host connects and starts its agent without waiting for the others.
        self._probe(plan, names)

    @staticmethod
    def _unreachable(names: Sequence[str], problems: Mapping[str, str]) -> None:
        if problems:
            raise LaunchError(*[problems[n] for n in names if n in problems],
                              f"nothing was started: {len(problems)} of {len(names)} hosts unreachable")

    def _sync_and_setup(self, names: list[str]) -> None:
        if self.opts.sync:
            root = (self.loaded.base_dir / self.spec.workdir).resolve()
            data = make_tar(root, self.opts.sync, exclude_dirs=[self.loaded.base_dir / self.spec.run_dir])
            self._fan(names, lambda n: self._check(n, "ssh.sync", sync_command(self.hosts[n].workdir), data,
                                                   self.opts.setup_timeout))
        if self.opts.setup:
            self._setup_group(names)

    def _setup_group(self, names: list[str]) -> None:
        """Each setup command on every host at once (a Fabric ThreadingGroup over our open
        connections), command after command; the first command failing anywhere stops it."""
        from fabric import ThreadingGroup
        from fabric.exceptions import GroupException

        group = ThreadingGroup.from_connections([self.hosts[n].conn for n in names])
        by_conn = {id(self.hosts[n].conn): n for n in names}
        for i, command in enumerate(self.opts.setup):
            full = setup_command(self.hosts[names[0]].workdir, command)
            try:
                group.run(full, hide=True, warn=False, timeout=self.opts.setup_timeout, in_stream=False)
            except GroupException as exc:
                lines = []
                for conn, res in exc.result.items():
                    if isinstance(res, Exception):
                        name = by_conn.get(id(conn), conn.host)
                        lines.append(self._setup_failure(name, i, command, res))
                raise LaunchError(*lines, "no task was started; fix the setup command and rerun") from None

    def _setup_failure(self, name: str, i: int, command: str, res: Exception) -> str:
        result = getattr(res, "result", None)
        if result is not None and getattr(result, "exited", None) is not None:
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            last = " | ".join(tail)
            return (f"host {name}: ssh.setup[{i}] `{command}` exited {result.exited}"
                    + (f": {last}" if last else "") + "; fix it or the host")
        if type(res).__name__ == "CommandTimedOut":
            return f"host {name}: ssh.setup[{i}] `{command}` timed out; raise ssh.setup_timeout"
        return f"host {name}: ssh.setup[{i}] `{command}` failed ({res})"

    def _check(self, name: str, what: str, command: str, stdin: Optional[bytes], timeout: float) -> Optional[str]:
        code, out = self.run_on(name, command, stdin, timeout)
        if code == 0:
            return None
        tail = " | ".join(out.strip().splitlines()[-3:])
        return f"host {name}: {what} failed (exit {code}): {tail}"

    def _fan(self, names: list[str], fn: Callable[[str], Optional[str]]) -> None:
        with self._pool(len(names)) as pool:
            results = list(pool.map(fn, names))
        problems = [r for r in results if r]
        if problems:
            raise LaunchError(*problems, "no task was started")

    def _probe(self, plan: Plan, names: list[str]) -> None:
        """One host agent per host (connecting first if needed): interpreter, deps, workdir,
        upload helpers, bind every planned port, then connect from every host to every task
        address:port. On success each agent stays, waiting to become its host's first task."""
        files = {"taskwrap.py": TASKWRAP.read_text(encoding="utf-8"), "boot.py": remote_source("boot.py")}
        argv0 = plan.tasks[0].command[0] if plan.tasks else ""
        sessions: dict[str, object] = {}
        replies: dict[str, dict] = {}
        unreachable: dict[str, str] = {}
        reserved: dict[str, tuple[str, str]] = {}
        for task in plan.tasks:
            if task.host not in reserved and self._starts.get(task.key, 0) == 0:
                hs = self.hosts[task.host]
                reserved[task.host] = (task.key, self._pidfile(hs, task, 0))  # hs.run_dir may be relative yet

        def launch(name: str) -> Optional[str]:
            """Connect and start the agent; it waits for its request, so nothing is written on
            any host until every host is known to be reachable."""
            problem = self._connect_one(name)
            if problem:
                unreachable[name] = problem
                return None
            hs = self.hosts[name]
            pidfile = reserved[name][1] if name in reserved else None
            try:
                chan = hs.transport.open_session(timeout=self.opts.connect_timeout)
                chan.set_combine_stderr(False)
                chan.settimeout(_PROBE_REPLY_TIMEOUT)
                chan.exec_command(agent_command(hs.python, pidfile))
                sessions[name] = chan
            except Exception as exc:  # noqa: BLE001
                return f"host {name}: preflight could not run ({type(exc).__name__}: {exc}); check the host"
            return None

        def prepare(name: str) -> Optional[str]:
            hs, chan = self.hosts[name], sessions[name]
            ports = sorted({t.port for t in plan.tasks if t.host == name and t.port is not None})
            req = {"require": list(self.opts.require), "workdir": hs.workdir, "run_dir": hs.run_dir,
                   "state_dir": hs.state_dir, "files": files, "ports": ports, "argv0": argv0}
            try:
                chan.sendall(json.dumps(req).encode() + b"\n")
                line = _readline(chan)
            except Exception as exc:  # noqa: BLE001
                return f"host {name}: preflight could not run ({type(exc).__name__}: {exc}); check the host"
            if not line:
                err = _drain_stderr(chan)
                code = chan.recv_exit_status() if chan.exit_status_ready() else None
                if code == 127 or "not found" in err:
                    return (f"host {name}: python '{hs.python}' not found; install Python 3 there or set "
                            f"hosts[{name}].python / ssh.python to its full path")
                return f"host {name}: preflight failed (exit {code}): {err.strip()[-300:]}; check '{hs.python}'"
            replies[name] = json.loads(line)
            return None

        try:
            with self._pool(len(names)) as pool:
                problems = [p for p in pool.map(launch, names) if p]
                self._unreachable(names, unreachable)
                if problems:
                    raise LaunchError(*problems, "no task was started")
                problems = [p for p in pool.map(prepare, names) if p]
            if problems:
                raise LaunchError(*problems, "no task was started")
            problems += self._judge(plan, names, replies)
            if problems:
                raise LaunchError(*problems, "no task was started")
            for name in names:
                hs, rep = self.hosts[name], replies[name]
                hs.run_dir, hs.state_dir, hs.workdir, hs.ready = rep["run_dir"], rep["state_dir"], rep["workdir"], True
            problems += self._state.detect(plan, names, sessions)
            if problems:
                raise LaunchError(*problems, "no task was started")
            problems += self._reachability(plan, names, sessions)
            if problems:
                raise LaunchError(*problems, "no task was started")
            for name, (key, _) in reserved.items():
                self.hosts[name].spare = (key, sessions.pop(name))
        finally:
            for chan in sessions.values():
                _close_channel(chan)

    def _judge(self, plan: Plan, names: list[str], replies: dict[str, dict]) -> list[str]:
        problems: list[str] = []
        versions: dict[str, dict[str, list[str]]] = {}
        for name in names:
            rep, hs = replies[name], self.hosts[name]
            if rep.get("error"):
                problems.append(f"host {name}: {rep['error']}; fix ssh.remote_dir or the permissions there")
            if tuple(int(x) for x in rep["python"].split(".")[:2]) < (3, 8):
                problems.append(f"host {name}: {hs.python} is Python {rep['python']}; tfcluster needs 3.8 or newer")
            if rep.get("workdir") is None:
                problems.append(f"host {name}: workdir {hs.workdir} does not exist there; create it, set ssh.workdir, "
                                "or use ssh.sync to upload the project")
            if rep.get("argv0_found") is False:
                problems.append(f"host {name}: entrypoint command '{plan.tasks[0].command[0]}' not found on PATH; "
                                "install it there or give its full path")
            for module, (found, version) in rep["deps"].items():
                if not found:
                    problems.append(f"host {name}: {hs.python} cannot import {module}; install it there or point "
                                    f"hosts[{name}].python / ssh.python at the interpreter that has it")
                elif version:
                    versions.setdefault(module, {}).setdefault(version, []).append(name)
            for port, problem in rep["ports"].items():
                if problem:
                    keys = ", ".join(t.key for t in plan.tasks if t.host == name and str(t.port) == port)
                    problems.append(f"port {port} on host {name} is {problem} ({keys}); stop what holds it or "
                                    "change ports.base / the task's ports")
        for module, by_version in versions.items():
            if len(by_version) > 1:
                desc = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in sorted(by_version.items()))
                problems.append(f"{module} versions differ between hosts ({desc}); install the same version everywhere")
        return problems

    def _reachability(self, plan: Plan, names: list[str], sessions: dict) -> list[str]:
        targets = [[t.key, t.address, t.port] for t in plan.tasks if t.port is not None]
        if not targets:
            return []
        timeout = self.opts.probe_timeout
        msg = json.dumps({"targets": targets, "timeout": timeout,
                          "deadline": probe_deadline(timeout, len(names))}).encode() + b"\n"

        def one(name: str) -> list[str]:
            chan = sessions[name]
            try:
                chan.sendall(msg)
                line = _readline(chan)
                results = json.loads(line)["results"] if line else None
            except Exception:  # noqa: BLE001
                results = None
            if results is None:
                return [f"host {name}: the reachability probe gave no answer; check the host"]
            out = []
            for key, problem in results:
                if problem:
                    t = plan.task(key)
                    out.append(f"host {name} cannot reach {t.host} {t.address}:{t.port} ({key}): {problem}; "
                               f"open that port between the hosts or fix hosts[{t.host}].address")
            return out

        with self._pool(len(names)) as pool:
            return [p for ps in pool.map(one, names) for p in ps]

    # -------------------------------------------------------------- state dir (ssh_state.py)

    def prepare_attempt(self, number: int) -> None:
        self._state.prepare_attempt(number)

    def collect_results(self) -> None:
        self._state.collect()

    # -------------------------------------------------------------- tasks

    def task_env(self, task: PlannedTask, hs: _HostState, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(task.env)
        env.update({"TFCLUSTER_RUN_DIR": hs.run_dir, "TFCLUSTER_STATE_DIR": hs.state_dir})
        env.update(extra)
        return env

    def _ensure_ready(self, hs: _HostState) -> None:
        if self.heartbeat.silence(hs.name) > self.opts.lease and hs.conn is not None:
            # Lost (a partition, a reboot): TCP may still look open; connect afresh and probe again.
            try:
                hs.conn.close()
            except Exception:  # noqa: BLE001
                pass
            hs.conn, hs.ready = None, False
        if hs.ready and hs.transport is not None and hs.transport.is_active():
            return
        problems = self.connect([hs.name])
        if not problems:
            self.heartbeat.heard(hs.name)
        if problems:
            raise LaunchError(problems[hs.name])
        if not hs.ready:
            plan = Plan(name=self.spec.name, strategy=self.spec.strategy, backend="ssh", tasks=(), hosts=(hs.spec,))
            self._probe(plan, [hs.name])

    @staticmethod
    def _pidfile(hs: _HostState, task: PlannedTask, n: int) -> str:
        return posixpath.join(hs.run_dir, "pids", f"{task.slug}.{n}.pid")

    def _drop_spare(self, hs: _HostState) -> None:
        spare, hs.spare = hs.spare, None
        if spare is not None:
            _close_channel(spare[1])

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        hs = self.hosts[task.host]
        n = self._starts.get(task.key, 0)
        spare = hs.spare
        if spare is not None and spare[0] == task.key and n == 0 and not spare[1].closed \
                and not spare[1].exit_status_ready():
            hs.spare = None
            self._starts[task.key] = 1
            return self._go(task, hs, spare[1], env, on_line)
        # Not the task it waits for (or it is gone): release its ports, start plainly.
        self._drop_spare(hs)
        self._ensure_ready(hs)
        self._starts[task.key] = n + 1
        pidfile = self._pidfile(hs, task, n)
        command = task_command(hs.python, hs.workdir, hs.run_dir, pidfile, self.opts.lease, self.stop_grace,
                               task.command)
        try:
            chan = hs.transport.open_session(timeout=self.opts.connect_timeout)
            chan.set_combine_stderr(True)
            chan.exec_command(command)
            chan.sendall(env_block(self.task_env(task, hs, env)))
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"host {hs.name}: cannot start {task.key} ({type(exc).__name__}: {exc}); "
                              "check the host and sshd's MaxSessions") from None
        return self._track(SSHTask(task, self, hs, chan, pidfile, on_line))

    def _go(self, task: PlannedTask, hs: _HostState, chan, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        """Turn the host agent waiting on ``chan`` into ``task``'s wrapper: no new shell.
        (The pid file's path is absolute now; its tail is the one the agent was started with.)"""
        pidfile = self._pidfile(hs, task, 0)
        args = wrap_args(hs.workdir, pidfile, self.opts.lease, self.stop_grace, task.command)
        order = {"go": {"env": self.task_env(task, hs, env), "args": args}}
        try:
            chan.set_combine_stderr(True)
            chan.settimeout(None)
            chan.sendall(json.dumps(order).encode() + b"\n")
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"host {hs.name}: cannot start {task.key} ({type(exc).__name__}: {exc}); "
                              "check the host") from None
        return self._track(SSHTask(task, self, hs, chan, pidfile, on_line))

    def _track(self, handle: SSHTask) -> SSHTask:
        with self._tasks_lock:
            self._tasks.append(handle)
        hs = handle.host
        self.heartbeat.watch(hs.name, lambda: hs.transport)
        self._ensure_lease()
        return handle

    def _ensure_lease(self) -> None:
        if self._lease_thread is None:
            self._lease_thread = threading.Thread(target=self._renew, daemon=True, name="ssh-lease")
            self._lease_thread.start()

    def _renew(self) -> None:
        """Write one byte to every live task channel about every second (the lease)."""
        interval = min(1.0, self.opts.lease / 4)
        while not self._closing.wait(interval):
            with self._tasks_lock:
                live = [t for t in self._tasks if t._code is None and not t.channel.closed]
                self._tasks = [t for t in self._tasks if t._code is None]
            for t in live:
                try:
                    if t.channel.send_ready():
                        t.channel.send(b".")
                except Exception:  # noqa: BLE001
                    pass

    def signal_tasks(self, handles: Sequence[SSHTask], sig: int) -> None:
        """Signal tasks, one command per host, hosts in parallel. Tasks whose wrapper has
        already exited are skipped: it took its task group down itself."""
        todo: dict[str, list[SSHTask]] = {}
        for h in handles:
            if h._code is None:
                todo.setdefault(h.host.name, []).append(h)
        if not todo:
            return

        def one(name: str) -> None:
            hs_tasks = todo[name]
            code, out = self.run_on(name, signal_command(sig, [h.pidfile for h in hs_tasks]), None, 10.0)
            nopid = {line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("nopid ")}
            for h in hs_tasks:
                if code != 0 or h.pidfile in nopid:
                    # Not started yet, or the host is unreachable: cut the lifeline instead.
                    if sig in (_signal.SIGTERM, _signal.SIGKILL, _signal.SIGINT):
                        h.lifeline_cut()

        names = list(todo)
        if len(names) == 1:
            one(names[0])
            return
        with self._pool(len(names)) as pool:
            list(pool.map(one, names))

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0) -> list[str]:
        ssh_handles = [h for h in handles if isinstance(h, SSHTask)]
        alive = [h for h in ssh_handles if h.poll() is None]
        if grace > 0 and alive:
            self.signal_tasks(alive, _signal.SIGTERM)
            end = time.monotonic() + grace
            while alive and time.monotonic() < end:
                time.sleep(0.05)
                alive = [h for h in alive if h.poll() is None]
        if alive:
            self.signal_tasks(alive, _signal.SIGKILL)
        end = time.monotonic() + deadline
        while alive and time.monotonic() < end:
            time.sleep(0.02)
            alive = [h for h in alive if h.poll() is None]
        return [h.key for h in alive]

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        hs = self.hosts[task.host]
        transport = hs.transport
        if transport is None or not transport.is_active():
            return False
        if hs.forwarding:
            import paramiko

            try:
                chan = transport.open_channel("direct-tcpip", (task.address, task.port), ("127.0.0.1", 0), timeout=3)
                chan.close()
                return True
            except paramiko.ChannelException as exc:
                if exc.code != 1:  # 1 = administratively prohibited (AllowTcpForwarding no)
                    return False
                hs.forwarding = False
            except Exception:  # noqa: BLE001
                return False
        code, _ = self.run_on(hs.name, f"{q(hs.python)} -c {q(_CONNECT_PY)} {q(task.address)} {task.port}", None, 5.0)
        return code == 0

    def close(self) -> None:
        self._closing.set()
        self.heartbeat.close()
        with self._tasks_lock:
            tasks, self._tasks = self._tasks, []
        for t in tasks:
            _close_channel(t.channel)
        for hs in self.hosts.values():
            self._drop_spare(hs)
            conn, hs.conn = hs.conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass

    # -------------------------------------------------------------- down

    def down(self, run_dir: Path, info: dict, console: Console) -> bool:
        """Stop a run's remote tasks from its record (launcher.json's tasks). True if any ran."""
        by_host: dict[str, set[str]] = {}
        for key, task in (info.get("tasks") or {}).items():
            host, rdir = task.get("ssh_host"), task.get("remote_run_dir")
            if host and rdir:
                by_host.setdefault(host, set()).add(rdir)
        unknown = [h for h in by_host if h not in self.hosts]
        for h in unknown:
            console.error(f"host {h} of the run is no longer in the spec; stop its tasks by hand")
        names = [h for h in by_host if h in self.hosts]
        if not names:
            return False
        problems = self.connect(names)
        for name in names:
            if name in problems:
                console.error(f"{problems[name]}; its tasks stop on their own within ssh.lease "
                              f"({self.opts.lease:g} s) of losing the launcher")
        live = [n for n in names if n not in problems]
        stopped: list[str] = []

        def one(name: str) -> list[str]:
            code, out = self.run_on(name, down_command(sorted(by_host[name]), self.stop_grace), None,
                                    self.stop_grace + 30)
            if code != 0:
                console.error(f"host {name}: stopping tasks failed (exit {code}): {out.strip()[-200:]}")
            return [f"{name}:{posixpath.basename(line.split(' ', 1)[1])}" for line in out.splitlines()
                    if line.startswith("stopped ")]

        try:
            if live:
                with self._pool(len(live)) as pool:
                    for found in pool.map(one, live):
                        stopped += found
        finally:
            self.close()
        if stopped:
            console.info(f"stopped remote tasks: {', '.join(sorted(stopped))}")
        return bool(stopped)


_CONNECT_PY = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()"


def _readline(chan, limit: int = 1 << 20) -> bytes:
    """Read one reply line. Replies answer requests one at a time, so nothing follows the
    newline until we send again, and whole chunks can be read."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        data = chan.recv(65536)
        if not data:
            break
        buf += data
        if len(buf) > limit:
            break
    return bytes(buf)


def _close_channel(chan) -> None:
    try:
        chan.shutdown_write()
        chan.close()
    except Exception:  # noqa: BLE001
        pass


def _drain_stderr(chan) -> str:
    out = bytearray()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if chan.recv_stderr_ready():
            out += chan.recv_stderr(65536)
        elif chan.exit_status_ready() and not chan.recv_stderr_ready():
            break
        else:
            time.sleep(0.02)
    return out.decode("utf-8", "replace")
