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
pool.py (the hosts: connections, per-host state, starts, lease, heartbeat, hosts that come and go),
sync.py (ssh.sync/ssh.setup), probe.py (the preflight probe), task.py (a running task),
lease.py (the lease thread), heartbeat.py (is the host still there), state.py (the state
dir), down.py (``tfcluster down``), preflight.py (the preflight of a plan: connect, sync and setup,
the probe; what it found, reported), starts.py (starting tasks, promoting
standbys); the helpers take the pool, not the backend; this file ties them into the two seams,
``SSHHosts`` and ``SSHTasks``, which share one ``SSHRun`` (the pool and what is built on it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from launcher.notices import Notices, PlainNotices
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot
from launcher.plan.hostloss import HostLoss
from launcher.plan.roundrobin import round_robin
from launcher.plan.elastic import spare_hosts
from launcher.plan.gputext import gpu_notes
from launcher.plan.hostreport import HostReport
from launcher.record import events as ev
from launcher.spec.model import TASK_TYPES, LoadedSpec, Spec
from launcher.backends.ssh import down as ssh_down
from launcher.backends.base import (Backend, BackendKind, Capabilities, Hosts, OutputSink, RecordedRun, StartRequest,
                                    TaskHandle, Tasks)
from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.elsewhere import Elsewhere
from launcher.backends.ssh.commands import port_check_command, remote_paths
from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.preflight import Preflight
from launcher.backends.ssh.pool import HostPool
from launcher.backends.ssh.runner import Runner
from launcher.backends.ssh.starts import Starts
from launcher.backends.ssh.state import StateSync, state_dir
from launcher.backends.ssh.task import SSHTask, signal_tasks


def require_ssh_libraries() -> None:
    """Fabric (and paramiko under it) are the [ssh] extra, not installed with the launcher: a spec
    with backend: ssh validates and plans without them, and fails here, before connecting, in one
    line naming the extra."""
    try:
        import fabric  # noqa: F401
        import paramiko  # noqa: F401
    except ImportError as exc:
        raise LaunchError(f"backend ssh needs the Python package '{exc.name or 'fabric'}' (not installed); "
                          "install it with: pip install 'tfcluster[ssh]'") from None


@dataclass(frozen=True)
class SSHRun:
    """What both seams of an ssh run share: the spec, the record, and the pool of hosts with the
    state dir's copy and the task starts built on it (pool.py, state.py, starts.py)."""

    loaded: LoadedSpec
    record: Any
    console: Notices
    pool: HostPool
    state_sync: StateSync
    starts: Starts

    @property
    def spec(self) -> Spec:
        return self.loaded.spec


def open_run(loaded: LoadedSpec, record=None, console: Optional[Notices] = None,
             runner: Optional[Runner] = None) -> SSHRun:
    """The pool of the spec's hosts (nothing connected yet), its state copy and starts; the
    record's events for what the hosts say (a preemption notice, a task's GPUs and their use)."""
    if runner is None:
        require_ssh_libraries()
    spec, opts = loaded.spec, loaded.spec.ssh
    console = console or PlainNotices()
    run_id = record.run_id if record is not None else "down"
    if opts.config:
        from launcher.backends.ssh.connect import resolve_local

        if not resolve_local(opts.config, loaded.base_dir).is_file():
            raise LaunchError(f"ssh.config: {opts.config} does not exist; fix the path or remove the key")
    write = record.write if record is not None else (lambda event: None)

    def early(event) -> None:
        """An event a preflight writes (maybe before the record exists: then its first lines), said
        on the console here where nothing listens to the record yet (once the console does, it says it)."""
        if record is None:
            return
        heard = bool(record.listeners)
        record.write_early(event)
        if not heard and getattr(event, "said", ""):
            console.info(event.said)

    def preempted(name: str) -> None:
        """A task on ``name`` saw GCE's preemption notice (taskwrap's GCE_NOTICE line); the pool
        counts the host as lost at once, without waiting elastic.host_wait."""
        console.info(f"{name}: GCE preemption notice; its tasks save and stop now")
        write(ev.HostPreempted(host=name))

    def gpu_figures(key: str, mib: int, util: Optional[int]) -> None:
        """A task's GPU memory and utilisation from its wrapper on the host (taskwrap --gpu-watch):
        the same ``gpu_usage`` event the local backend's watch writes (panel, status, report)."""
        write(ev.GpuUsage(tasks={key: [mib, util]}))

    def gpus_given(key: str, given: tuple) -> None:
        """The host's GPUs a task's wrapper gave it (taskwrap --gpus: its indices, its
        CUDA_VISIBLE_DEVICES where that names a MIG device or UUIDs, the collective it set there):
        a task_gpus event (status)."""
        ids, visible, collective = given
        write(ev.TaskGpus(task=key, gpus=ids, visible=visible, collective=collective))

    run_dir, state, workdir = remote_paths(opts, spec.name, run_id)
    pool = HostPool(spec.hosts, opts, loaded.base_dir, (run_dir, state_dir(spec.state, state), workdir),
                    runner=runner, on_preempted=preempted)
    pool.share = spec.share
    pool.write = write
    pool.write_early = early
    if SSHBackend.capabilities.forks(spec.restart):  # each host's fork server, started by its preflight agent
        pool.zygote_cwd = ssh_zygote.cwd_of(loaded.base_dir, spec.workdir)
    pool.stop_grace = spec.watchdog.stop_grace
    pool.keep_warm = opts.keep_warm
    state_sync = StateSync(pool, spec.state, console, record, run_id)
    starts = Starts(pool, state_sync, spec.name, spec.strategy, spec.watchdog.stop_grace, gpu_figures, gpus_given)
    return SSHRun(loaded, record, console, pool, state_sync, starts)


class SSHBackend(BackendKind):
    name = "ssh"
    options_key = "ssh"
    Options = SSHOptions
    capabilities = Capabilities(warm_standby=True, fork=True, port_preflight=True, port_probe=True, elastic=True, stacks=True,
                                native_stacks=True)
    # Printed by `up --detach` (without ssh.supervisor the supervisor holds the hosts' leases).
    detach_note = ("the supervisor runs on this machine and holds the hosts' leases: keep it on and online "
                   "(or set ssh.supervisor: HOST to run it on a cluster host)")

    @classmethod
    def from_spec(cls, loaded: LoadedSpec, record=None, console: Optional[Notices] = None,
                  runner: Optional[Runner] = None) -> Backend:
        """The run's seams over one pool of hosts (``runner``: how commands reach them, for tests)."""
        run = open_run(loaded, record, console, runner)
        return Backend(cls, SSHHosts(run), SSHTasks(run))

    @classmethod
    def task_dirs(cls, loaded: LoadedSpec) -> list[Path]:
        """The spec's workdir where ``ssh.sync`` uploads all of it and no ``ssh.workdir`` is set (the
        hosts' copy is then its files); else none of this machine's."""
        opts = loaded.spec.ssh
        if not opts.workdir and "." in [p.rstrip("/") for p in opts.sync]:
            return [(loaded.base_dir / loaded.spec.workdir).resolve()]
        return []

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A group's own ``hosts`` round-robin, else one cursor shared over all ``hosts:``, each
        host's tasks of a group numbered consecutively (launcher/plan/roundrobin.py: ranks in blocks). With no
        hosts yet (``discovery:`` finds them at ``up``, or ``plan --discover``), placeholders."""
        if not spec.hosts and spec.discovery is not None:
            slots = {f"{t}:{i}": Slot(f"host{n + 1}", f"host{n + 1}")
                     for n, (t, i) in enumerate((t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t)))}
            return Placement(slots, placeholder=True, note="hosts come from discovery.command at `up` (tfcluster plan --discover runs it now)")
        return Placement(round_robin(spec))

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
    def run_elsewhere(cls, loaded: LoadedSpec, request: Elsewhere, console) -> Optional[int]:
        if not loaded.spec.ssh.supervisor:
            return None
        from launcher.backends.ssh.supervisor import delegate

        # (the command line names the spec as "{spec}": delegate puts in its path on that host)
        return delegate(loaded, request.argv("{spec}"), "{spec}", request.command, console,
                        open_run(loaded, None, console).pool)


class SSHHosts(Hosts):
    """The hosts: probed before the run (agents started, ports held, GPUs read), watched while
    it runs (lost, back, added), and cleared by ``down``."""

    def __init__(self, run: SSHRun) -> None:
        self.run = run
        self.pool = run.pool
        self.preflight = Preflight(run.pool, run.state_sync, run.loaded)

    def probe(self, plan: Plan) -> Optional[HostReport]:
        """What the hosts of ``plan`` say (preflight.py): connected (a worker group that starts
        small: the spares too), ssh.sync/ssh.setup, the agents' probe; its GPUs said once it
        passed. Reports only: the plans its findings give are launcher/plan/preflight.py's."""
        if not plan.hosts:
            return None
        run = self.run
        spares = spare_hosts(run.spec, [h.name for h in plan.hosts]) if self._starts_small() else []
        report = self.preflight.report(plan, spares, countdown=run.console.countdown)
        if not report.problems and not any(plan.host(a.host) for a in report.absent):
            for line in gpu_notes(plan, dict(report.gpus)):
                run.console.info(line)
        return report

    def _starts_small(self) -> bool:
        from launcher.backends import placed_hosts
        from launcher.plan.elastic import elastic_enabled, starts_small

        return starts_small(self.run.spec, elastic_enabled(self.run.spec, placed_hosts(self.run.spec)))

    def allocate(self, spec: Spec) -> Placement:
        return SSHBackend.place(spec)

    def free_memory(self, hosts: Sequence[str]) -> dict[str, int]:
        """MemAvailable of each host (one short command per host, in parallel); a host that does
        not answer is left out."""
        names = [h for h in hosts if h in self.pool.hosts]

        def one(name: str):
            code, out = self.pool.run_on(name, "grep MemAvailable: /proc/meminfo", None, 5.0)
            try:
                return name, int(out.split()[1]) * 1024 if code == 0 else None
            except (IndexError, ValueError):
                return name, None

        if not names:
            return {}
        with self.pool.executor(len(names)) as ex:
            return {n: v for n, v in ex.map(one, names) if v is not None}

    def lost(self, hosts: Sequence[str], wait: float, stop=None, look: Mapping[str, float] = {}) -> dict[str, HostLoss]:
        return self.pool.lost_hosts(hosts, wait, stop, look)

    def back(self, hosts: Sequence[str], settle: float) -> list[str]:
        return self.pool.hosts_back(hosts, settle)

    def answering(self, hosts: Sequence[str], seconds: float) -> list[str]:
        return self.pool.hosts_answering(hosts, seconds)

    def add(self, hosts) -> None:
        self.pool.add_hosts(hosts)

    def down(self, run: RecordedRun, console: Notices) -> bool:
        """Stop a run's remote tasks from its record (down.py). True if any ran."""
        spec = self.run.spec
        return ssh_down.down(self.pool, run, console, spec.watchdog.stop_grace, spec.name)

    def close(self) -> None:
        self.pool.close()


class SSHTasks(Tasks):
    """The tasks on the pool's hosts: started (the agent the probe left waiting, else cold),
    promoted, signalled a host at a time, probed; the state dir between attempts (state.py)."""

    def __init__(self, run: SSHRun) -> None:
        self.run = run
        self.pool = run.pool

    def start(self, request: StartRequest, on_line: OutputSink) -> SSHTask:
        """The agent the preflight left waiting becomes the task, else a cold start (starts.py)."""
        return self.run.starts.start(request, on_line)

    def promote(self, handle: TaskHandle, request: StartRequest) -> None:
        """A warm standby: its environment into its promotion file, then SIGUSR1 (starts.py)."""
        promotion = getattr(handle, "promotion", None)
        if not isinstance(handle, SSHTask) or promotion is None:
            return super().promote(handle, request)
        self.run.starts.promote(handle, promotion, request)

    def signal_tasks(self, handles: Sequence[SSHTask], sig: int) -> None:
        """Signal tasks, one command per host, hosts in parallel (task.py)."""
        signal_tasks(self.pool, handles, sig)

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0, saved=None) -> list[str]:
        """Tasks.stop over this backend's tasks, signalled a host at a time (``signal_tasks``)."""
        return super().stop([h for h in handles if isinstance(h, SSHTask)], grace, deadline, saved)

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        hs = self.pool.hosts[task.host]
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
        code, _ = self.pool.run_on(hs.name, port_check_command(hs.python, task.address, task.port), None, 5.0)
        return code == 0

    def use_plan(self, plan: Plan) -> None:
        self.run.state_sync.use(plan)
        self.pool.unwatch({t.host for t in plan.tasks})  # a host the plan uses is no longer watched

    def prepare_attempt(self, number: int) -> None:
        self.run.state_sync.prepare_attempt(number)

    def collect_results(self) -> None:
        self.run.state_sync.collect()
