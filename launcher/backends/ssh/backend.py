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
dir), down.py (``tfcluster down``), placement.py (the preflight's lines on the hosts' GPUs),
preflight.py (the probe again), starts.py (starting tasks, promoting
standbys); the helpers take the pool, not the backend; this file ties them into the two seams,
``SSHHosts`` and ``SSHTasks``, which share one ``SSHRun`` (the pool and what is built on it).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

from launcher.notices import Notices, PlainNotices
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot
from launcher.plan.roundrobin import round_robin
from launcher.plan.startsmall import DROPPED, NOT_ANSWERING, HostReport, by_gpus, gpu_refusals_only, without_dropped
from launcher.record import events as ev
from launcher.spec.model import TASK_TYPES, LoadedSpec, Spec
from launcher.backends.ssh import down as ssh_down, preflight as ssh_preflight, probe as ssh_probe, sync as ssh_sync
from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, LineSink, RecordedRun, TaskHandle, Tasks
from launcher.backends.elsewhere import Elsewhere
from launcher.backends.ssh.commands import port_check_command, remote_paths
from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.placement import gpu_notes
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
    if spec.restart.warm_standby is not False:
        pool.zygote_cwd = ssh_zygote.cwd_of(loaded.base_dir, spec.workdir)
    pool.stop_grace = spec.watchdog.stop_grace
    state_sync = StateSync(pool, spec.state, console, record, run_id)
    starts = Starts(pool, state_sync, spec.name, spec.strategy, spec.watchdog.stop_grace, gpu_figures, gpus_given)
    return SSHRun(loaded, record, console, pool, state_sync, starts)


class SSHBackend(BackendKind):
    name = "ssh"
    options_key = "ssh"
    Options = SSHOptions
    capabilities = Capabilities(warm_standby=True, port_preflight=True, port_probe=True, elastic=True, stacks=True,
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

    def probe(self, plan: Plan) -> Optional[HostReport]:
        """The hosts found out (launcher/plan/startsmall.py makes the plans of what is found): a
        worker group with a min starts with the hosts that answer (startsmall.py), and where the
        probe refuses only the round-robin's GPU placement, the plan placed by each host's GPUs
        is probed again (preflight.py). Returns what was found, for the use case's plans."""
        names = [h.name for h in plan.hosts]
        if not names:
            return None
        run, spec, opts = self.run, self.run.spec, self.run.spec.ssh
        full = plan
        report = HostReport(small=self._starts_small())
        if report.small:  # a worker group with a min: the hosts that answer now (startsmall.py)
            from launcher.backends.ssh.startsmall import hosts_there

            plan, absent = hosts_there(self.pool, spec, plan, run.console.info, countdown=run.console.countdown,
                                       record=run.record.write_early if run.record is not None else None)
            report = replace(report, absent={h: NOT_ANSWERING for h in absent})
            names = [h.name for h in plan.hosts]
        if opts.sync or opts.setup:
            # Setup runs on every host at once (a ThreadingGroup): connect them all first.
            ssh_probe.unreachable_error(names, self.pool.connect(names))
            ssh_sync.sync_and_setup(self.pool, run.loaded, names)
        # Otherwise each host connects and starts its agent without waiting for the others.
        try:
            ssh_probe.probe(self.pool, run.state_sync, plan, names, countdown=run.console.countdown)
        except LaunchError as exc:
            smaller = self._without_dropped(full, plan, exc, report) if report.small else None
            if smaller is not None:  # worker hosts that dropped their sessions: started without them
                report, plan = smaller
                names = [h.name for h in plan.hosts]
                ssh_preflight.probe_again(self.pool, run.state_sync, plan, names)
            else:  # placed by the hosts' GPUs where that fits, else exc
                report = replace(report, answered=tuple(names), gpus=self._gpus(names))
                got = by_gpus(spec, plan, report) if gpu_refusals_only(plan, report.gpus, exc.lines) else None
                if got is None:
                    raise
                plan, line = got
                report = replace(report, by_gpus=True)
                run.console.info(line)  # (the run record, made after the preflight, holds the plan it gives)
                ssh_preflight.probe_again(self.pool, run.state_sync, plan, names)
        report = replace(report, answered=tuple(names), gpus=self._gpus(names))
        for line in gpu_notes(plan, dict(report.gpus)):
            run.console.info(line)
        return report

    def _gpus(self, names: Sequence[str]) -> dict:
        return {n: self.pool.hosts[n].gpus for n in names}

    def _without_dropped(self, full: Plan, plan: Plan, exc: LaunchError,
                         report: HostReport) -> Optional[tuple[HostReport, Plan]]:
        """The probe failed only because worker hosts dropped its sessions (a VM shutting down:
        its sshd still accepts connections for a while, its sessions die): the report with them
        absent and the plan without them, or None where the failure is another (the usual error).
        One line where fewer than tasks.worker.min workers would be left."""
        from launcher.backends.ssh.startsmall import dropped_hosts

        gone = dropped_hosts(exc.lines, plan)
        if not gone:
            return None
        report = replace(report, absent={**report.absent, **{h: DROPPED for h in gone}}, dropped=tuple(gone))
        smaller = without_dropped(self.run.spec, full, report)
        if smaller is None:
            return None
        for h in gone:
            self.pool.forget_connection(self.pool.hosts[h])
        self.run.console.info(f"{', '.join(gone)}: {'their' if len(gone) > 1 else 'its'} sessions dropped during the "
                              "preflight (a host shutting down?); starting without "
                              f"{'them' if len(gone) > 1 else 'it'}")
        return report, smaller

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

    def lost(self, hosts: Sequence[str], wait: float, stop=None, look: Mapping[str, float] = {}) -> dict[str, str]:
        return self.pool.lost_hosts(hosts, wait, stop, look)

    def back(self, hosts: Sequence[str], settle: float) -> list[str]:
        return self.pool.hosts_back(hosts, settle)

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

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        """The agent the preflight left waiting becomes the task, else a cold start (starts.py)."""
        return self.run.starts.start(task, env, on_line)

    def promote(self, handle: TaskHandle, task: PlannedTask, env: Mapping[str, str]) -> None:
        """A warm standby: its environment into its promotion file, then SIGUSR1 (starts.py)."""
        promotion = getattr(handle, "promotion", None)
        if not isinstance(handle, SSHTask) or promotion is None:
            return super().promote(handle, task, env)
        self.run.starts.promote(handle, promotion, task, env)

    def signal_tasks(self, handles: Sequence[SSHTask], sig: int) -> None:
        """Signal tasks, one command per host, hosts in parallel (task.py)."""
        signal_tasks(self.pool, handles, sig)

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0) -> list[str]:
        """Tasks.stop over this backend's tasks, signalled a host at a time (``signal_tasks``)."""
        return super().stop([h for h in handles if isinstance(h, SSHTask)], grace, deadline)

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
