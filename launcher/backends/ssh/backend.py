"""SSH backend: run the plan's tasks on remote hosts over one Fabric connection per host.

* One ``fabric.Connection`` per host, opened in parallel and reused for preflight, setup,
  task start, output streaming, port checks and stops (SSH handshakes are the expensive part).
* Host keys are verified against known_hosts (see connect.py); trust-on-first-use is opt-in.
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

Files of this package: options.py (the ``ssh:`` block), commands.py (remote command lines), connect.py
(connections, host keys), runner.py (commands over a connection), host.py (per-host state),
sync.py (ssh.sync/ssh.setup), probe.py (the preflight probe), task.py (a running task),
lease.py (the lease thread), heartbeat.py (is the host still there), state.py (the state
dir), down.py (``tfcluster down``); this file ties them into the Backend.
"""

from __future__ import annotations

import difflib
import json
import signal as _signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ... import envnames
from ...console import Console
from ...errors import LaunchError
from ...plan import Placement, Plan, PlannedTask, Slot
from ...record.events import Event
from ...specmodel import TASK_TYPES, LoadedSpec, Spec
from . import down as ssh_down, probe as ssh_probe, sync as ssh_sync
from ..base import Backend, Capabilities, LineSink, RecordedRun, TaskHandle
from .commands import env_block, port_check_command, remote_paths, signal_command, task_command, wrap_args
from .connect import describe_channel_error
from .heartbeat import Heartbeat
from .host import HostState
from .lease import Lease
from .options import SSHOptions
from .runner import Runner, close_channel, run_command
from .state import StateSync
from .watch import HostWatch
from .task import SSHTask


class SSHBackend(Backend):
    name = "ssh"
    options_key = "ssh"
    Options = SSHOptions
    capabilities = Capabilities(port_preflight=True, port_probe=True, elastic=True)

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A group's own ``hosts`` round-robin, else one cursor shared over all ``hosts:``. With no
        hosts yet (``discovery:`` finds them when tfcluster plans to run), placeholders."""
        if not spec.hosts and spec.discovery is not None:
            slots = {f"{t}:{i}": Slot(f"host{n + 1}", f"host{n + 1}")
                     for n, (t, i) in enumerate((t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t)))}
            return Placement(slots, placeholder=True, note="hosts come from discovery.command when tfcluster plans a run")
        slots = {}
        cursor = 0
        by_name = {h.name: h for h in reversed(spec.hosts)}  # the first of a name, as spec.host; O(1) a task
        for task_type in TASK_TYPES:
            group = spec.tasks.group(task_type)
            for index in range(group.count):
                if group.hosts:
                    host = by_name[group.hosts[index % len(group.hosts)]]
                else:
                    host = spec.hosts[cursor % len(spec.hosts)]
                    cursor += 1
                slots[f"{task_type}:{index}"] = Slot(host.name, host.dial_address)
        return Placement(slots)

    @classmethod
    def check_spec(cls, spec: Spec) -> list[tuple[tuple, str]]:
        problems = []
        if not spec.hosts and spec.discovery is None and any(spec.tasks.count(t) for t in TASK_TYPES):
            problems.append((("hosts",), "backend ssh needs hosts; list them under hosts: with ssh and address"))
        sup, names = spec.ssh.supervisor, [h.name for h in spec.hosts]
        if sup is not None and spec.ssh.sync:
            problems.append((("ssh", "supervisor"), "cannot be combined with ssh.sync yet (the supervisor host "
                             "would sync from its own disk); put the code on the hosts with ssh.setup, or "
                             "remove ssh.supervisor"))
        elif sup is not None and sup not in names:
            close = difflib.get_close_matches(sup, names, n=1)
            problems.append((("ssh", "supervisor"), f"unknown host '{sup}'"
                             + (f" (did you mean '{close[0]}'?)" if close else "")
                             + f"; defined hosts: {', '.join(names) or 'none'}"))
        return problems

    @classmethod
    def run_elsewhere(cls, loaded: LoadedSpec, argv, spec_arg: str, command: str, console) -> Optional[int]:
        if not loaded.spec.ssh.supervisor:
            return None
        from .supervisor import delegate

        return delegate(loaded, argv, spec_arg, command, console, cls(loaded, record=None, console=console))

    # Printed by `up --detach` (without ssh.supervisor the supervisor holds the hosts' leases).
    detach_note = ("the supervisor runs on this machine and holds the hosts' leases: keep it on and online "
                   "(or set ssh.supervisor: HOST to run it on a cluster host)")

    def __init__(self, loaded: LoadedSpec, record=None, console: Optional[Console] = None,
                 runner: Optional[Runner] = None) -> None:
        self.loaded = loaded
        self.spec = loaded.spec
        self.opts: SSHOptions = loaded.spec.ssh
        self.record = record
        self.console = console or Console()
        self.run_id = record.run_id if record is not None else "down"
        self.stop_grace = self.spec.watchdog.stop_grace
        self.hosts: dict[str, HostState] = {h.name: HostState(h, self.opts) for h in self.spec.hosts}
        self._runner = runner or self._paramiko_run
        self.starts: dict[str, int] = {}  # task key -> how many times it was started
        self.lease = Lease(self.opts.lease)
        self.heartbeat = Heartbeat(interval=min(1.0, self.opts.lease / 4))
        self._watch: Optional[HostWatch] = None  # lost hosts, probed for their return (elastic)
        self.preempted: dict[str, float] = {}  # host -> when its GCE preemption notice came
        self._watching: set[str] = set()
        if self.opts.config and not self._local(self.opts.config).is_file():
            raise LaunchError(f"ssh.config: {self.opts.config} does not exist; fix the path or remove the key")
        run_dir, state, workdir = remote_paths(self.opts, self.spec.name, self.run_id)
        self.state_sync = StateSync(self)  # state: shared or copied (state.py)
        state = self.state_sync.state_dir(state)
        for hs in self.hosts.values():
            hs.run_dir, hs.state_dir, hs.workdir = run_dir, state, workdir

    def _local(self, path: str) -> Path:
        from .connect import resolve_local

        return resolve_local(path, self.loaded.base_dir)

    # -------------------------------------------------------------- connections

    def pool(self, n: int) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=max(1, min(64, n)), thread_name_prefix="ssh")

    def connect(self, names: Sequence[str]) -> dict[str, str]:
        """Open (or reuse) one connection per host, all in parallel; {host: problem} for failures."""
        with self.pool(len(names)) as pool:
            results = dict(zip(names, pool.map(self.connect_one, names)))
        return {k: v for k, v in results.items() if v}

    def connect_one(self, name: str) -> Optional[str]:
        """Open (or reuse) the host's connection; None, or the one-line problem."""
        from .connect import describe_connect_error, make_connection, open_connection

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
        """Run one command on the host's open connection (connecting if needed)."""
        hs = self.hosts[name]
        transport = hs.transport
        if transport is None or not transport.is_active():
            problems = self.connect([name])
            if problems:
                return -1, problems[name]
            transport = hs.transport
        return run_command(transport, command, stdin, timeout)

    # -------------------------------------------------------------- preflight

    def preflight(self, plan: Plan) -> None:
        names = [h.name for h in plan.hosts]
        if not names:
            return
        if self.opts.sync or self.opts.setup:
            # Setup runs on every host at once (a ThreadingGroup): connect them all first.
            ssh_probe.unreachable_error(names, self.connect(names))
            ssh_sync.sync_and_setup(self, names)
        # Otherwise each host connects and starts its agent without waiting for the others.
        ssh_probe.probe(self, plan, names)

    # -------------------------------------------------------------- state dir (state.py)

    def prepare_attempt(self, number: int) -> None:
        self.state_sync.prepare_attempt(number)

    # -------------------------------------------------------------- hosts that come and go

    def _answers(self, name: str) -> bool:
        """The host's connection works now: alive and heard within the lease, or opened afresh."""
        hs = self.hosts[name]
        transport = hs.transport
        if transport is not None and transport.is_active() and self.heartbeat.silence(name) <= self.opts.lease:
            return True
        hs.forget_connection()
        self._drop_spare(hs)
        if self.connect_one(name) is None:
            self.heartbeat.heard(name)
            return True
        return False

    def host_preempted(self, name: str) -> None:
        """A task on ``name`` saw GCE's preemption notice (taskwrap's GCE_NOTICE line): the host
        is going away; it counts as lost at once, without waiting elastic.host_wait."""
        if name in self.preempted:
            return
        self.preempted[name] = time.time()
        if self._watch is None:
            self._watch = HostWatch(self._probe)
        self._watch.going(name)
        self.console.info(f"{name}: GCE preemption notice; its tasks save and stop now")
        if self.record is not None:
            self.record.event(Event.HOST_PREEMPTED, host=name)

    def lost_hosts(self, hosts: Sequence[str], wait: float, stop=None) -> dict[str, str]:
        """Hosts that announced their preemption are lost at once. Every other host that does not
        answer now is tried again each second for ``wait`` s, all in parallel; those still
        silent then are lost."""
        lost = {n: f"preempted: GCE notice at {time.strftime('%H:%M:%S', time.localtime(self.preempted.pop(n)))}"
                for n in hosts if n in self.preempted}
        hosts = [n for n in hosts if n not in lost]
        started = time.monotonic()
        silent = [n for n in hosts if not self._answers(n)]
        while silent and time.monotonic() - started < wait:
            if stop is not None and stop.wait(1.0):
                break
            if stop is None:
                time.sleep(1.0)
            with self.pool(len(silent)) as pool:
                answers = dict(zip(silent, pool.map(self._answers, silent)))
            silent = [n for n in silent if not answers[n]]
        took = time.monotonic() - started
        return {**lost, **{n: f"unreachable for {took:.0f} s" for n in silent}}

    def _probe(self, name: str) -> bool:
        """One probe of a lost host (watch.py): a connection (reused while it lasts) that runs
        ``true`` within a second."""
        if self.connect_one(name) is not None:
            return False
        hs = self.hosts[name]
        # A short answer time: a link that drops for a moment must break the run of answers
        # (TCP would otherwise just deliver late), so a flapping host never looks settled.
        code, _ = run_command(hs.transport, "true", None, min(1.0, self.opts.connect_timeout))
        if code != 0:
            hs.forget_connection()
            return False
        return True

    def hosts_back(self, hosts: Sequence[str], settle: float) -> list[str]:
        if self._watch is None:
            self._watch = HostWatch(self._probe)
        for name in set(self._watching) - set(hosts):
            self._watch.forget(name)
        self._watching = set(hosts)
        self._watch.watch(list(hosts))
        return [h for h in self._watch.settled(settle) if h in self._watching]

    def add_hosts(self, hosts) -> None:
        model = next(iter(self.hosts.values()), None)
        for host in hosts:
            if host.name in self.hosts:
                continue
            hs = HostState(host, self.opts)
            if model is not None:
                hs.run_dir, hs.state_dir, hs.workdir = model.run_dir, model.state_dir, model.workdir
            else:
                run_dir, state, workdir = remote_paths(self.opts, self.spec.name, self.run_id)
                hs.run_dir, hs.state_dir, hs.workdir = run_dir, self.state_sync.state_dir(state), workdir
            self.hosts[host.name] = hs

    def use_plan(self, plan: Plan) -> None:
        self.state_sync.plan = plan
        if self._watch is not None:  # a host the plan uses is no longer watched for its return
            for name in {t.host for t in plan.tasks} & self._watching:
                self._watch.forget(name)
                self._watching.discard(name)

    def collect_results(self) -> None:
        self.state_sync.collect()

    # -------------------------------------------------------------- tasks

    def task_env(self, task: PlannedTask, hs: HostState, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(task.env)
        env.update({envnames.RUN_DIR: hs.run_dir, envnames.STATE_DIR: hs.state_dir})
        env.update(extra)
        return env

    def _ensure_ready(self, hs: HostState) -> None:
        if self.heartbeat.silence(hs.name) > self.opts.lease and hs.conn is not None:
            # Lost (a partition, a reboot): TCP may still look open; connect afresh and probe again.
            hs.forget_connection()
        if hs.ready and hs.transport is not None and hs.transport.is_active():
            return
        problems = self.connect([hs.name])
        if not problems:
            self.heartbeat.heard(hs.name)
        if problems:
            raise LaunchError(problems[hs.name])
        if not hs.ready:
            plan = Plan(name=self.spec.name, strategy=self.spec.strategy, backend=self.name, tasks=(), hosts=(hs.spec,))
            ssh_probe.probe(self, plan, [hs.name])

    def _drop_spare(self, hs: HostState) -> None:
        spare, hs.spare = hs.spare, None
        if spare is not None:
            close_channel(spare[1])

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        hs = self.hosts[task.host]
        n = self.starts.get(task.key, 0)
        spare = hs.spare
        if spare is not None and spare[0] == task.key and n == 0 and not spare[1].closed \
                and not spare[1].exit_status_ready():
            hs.spare = None
            self.starts[task.key] = 1
            return self._go(task, hs, spare[1], env, on_line)
        # Not the task it waits for (or it is gone): release its ports, start plainly.
        self._drop_spare(hs)
        self._ensure_ready(hs)
        self.starts[task.key] = n + 1
        pidfile = hs.pidfile(task, n)
        command = task_command(hs.python, hs.workdir, hs.run_dir, pidfile, self.opts.lease, self.stop_grace,
                               task.command, self.opts.gce_metadata)
        try:
            chan = hs.transport.open_session(timeout=self.opts.connect_timeout)
            chan.set_combine_stderr(True)
            chan.exec_command(command)
            chan.sendall(env_block(self.task_env(task, hs, env)))
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"host {hs.name}: cannot start {task.key} "
                              f"({describe_channel_error(exc, self.opts.connect_timeout)}); "
                              "check the host and sshd's MaxSessions") from None
        return self._track(SSHTask(task, self, hs, chan, pidfile, on_line))

    def _go(self, task: PlannedTask, hs: HostState, chan, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        """Turn the host agent waiting on ``chan`` into ``task``'s wrapper: no new shell.
        (The pid file's path is absolute now; its tail is the one the agent was started with.)"""
        pidfile = hs.pidfile(task, 0)
        args = wrap_args(hs.workdir, pidfile, self.opts.lease, self.stop_grace, task.command, self.opts.gce_metadata)
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
        self.lease.track(handle)
        hs = handle.host
        self.heartbeat.watch(hs.name, lambda: hs.transport)
        return handle

    def signal_tasks(self, handles: Sequence[SSHTask], sig: int) -> None:
        """Signal tasks, one command per host, hosts in parallel. Tasks whose wrapper has
        already exited are skipped: it took its task group down itself."""
        todo: dict[str, list[SSHTask]] = {}
        for h in handles:
            if h.exit_code is None:
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
        with self.pool(len(names)) as pool:
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
        code, _ = self.run_on(hs.name, port_check_command(hs.python, task.address, task.port), None, 5.0)
        return code == 0

    def close(self) -> None:
        tasks = self.lease.close()
        self.heartbeat.close()
        if self._watch is not None:
            self._watch.close()
        for t in tasks:
            close_channel(t.channel)
        for hs in self.hosts.values():
            self._drop_spare(hs)
            conn, hs.conn = hs.conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass

    # -------------------------------------------------------------- down

    def down(self, run: RecordedRun, console: Console) -> bool:
        """Stop a run's remote tasks from its record (down.py). True if any ran."""
        return ssh_down.down(self, run, console)
