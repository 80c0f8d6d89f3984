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
dir), down.py (``tfcluster down``); the helpers take the pool, not the backend; this file ties
them into the Backend.
"""

from __future__ import annotations

import difflib
import json
import signal as _signal
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from launcher.plan import gpus
from launcher.contract import envnames
from launcher.ui.console import Console
from launcher.errors import LaunchError, SpecError, exc_text
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, build_plan
from launcher.remote.gpuplace import plural
from launcher.record.events import Event
from launcher.spec.model import TASK_TYPES, Host, LoadedSpec, Spec
from launcher.backends.ssh import down as ssh_down, probe as ssh_probe, sync as ssh_sync
from launcher.backends.base import Backend, Capabilities, LineSink, RecordedRun, TaskHandle
from launcher.backends.elsewhere import Elsewhere
from launcher.backends.ssh.commands import env_block, port_check_command, promote_command, remote_paths, task_command, wrap_args
from launcher.backends.ssh.host import HostState
from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.pool import HostPool
from launcher.backends.ssh.runner import Runner
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


def gpu_notes(plan: Plan, found: dict) -> list[str]:
    """What the preflight found of each host's GPUs, said once: the hosts whose GPU tasks run on
    CPU (no NVIDIA GPU there), and what the others have."""
    out = []
    for name, host_gpus in found.items():
        if host_gpus is None:
            continue
        mine = [t for t in plan.tasks if t.host == name and t.gpus.uses_gpu]
        if not mine:
            continue
        if not host_gpus:
            out.append(f"{name} has no NVIDIA GPU (nvidia-smi -L lists none): its {len(mine)} GPU task"
                       f"{'s run' if len(mine) > 1 else ' runs'} on CPU")
        else:
            out.append(f"{name}: {len(host_gpus)} GPU{'s' if len(host_gpus) > 1 else ''} "
                       f"({', '.join(sorted({g[1] for g in host_gpus}))}) "
                       f"for {', '.join(t.key for t in mine)}")
    return out


def round_robin(spec: Spec, gpu_room: Optional[Mapping[str, int]] = None) -> dict[str, Slot]:
    """Each task's host: a group's own ``hosts`` round-robin, else one cursor shared over all
    ``hosts:``, skipping the full hosts: ``hosts[].slots`` tasks, or, for a host without slots
    in ``gpu_room`` (host -> GPUs the run may use there), as many GPU-count tasks
    (``gpus_per_task: N``, ``tasks.<type>.gpus: N``) as its GPUs hold. Where every host is full,
    the task goes where the round-robin put it (the plan then refuses it in one line)."""
    slots = {}
    cursor = 0
    by_name = {h.name: h for h in reversed(spec.hosts)}  # the first of a name, as spec.host; O(1) a task
    limited = gpu_room is not None or any(h.slots is not None for h in spec.hosts)
    used: dict[str, int] = {}
    gpus_used: dict[str, int] = {}
    room = gpu_room or {}

    def free(host: Host, need: int) -> bool:
        if host.slots is not None:
            return used.get(host.name, 0) < host.slots
        return not need or host.name not in room or gpus_used.get(host.name, 0) + need <= room[host.name]

    for task_type in TASK_TYPES:
        group = spec.tasks.group(task_type)
        take = gpus.take_of(spec, task_type)[0] if gpu_room is not None else 0
        need = take if isinstance(take, int) else 0
        for index in range(group.count):
            if group.hosts:
                host = by_name[group.hosts[index % len(group.hosts)]]
                if limited and not free(host, need):  # the group's next host with room
                    host = next((by_name[n] for n in group.hosts if free(by_name[n], need)), host)
            else:
                host = spec.hosts[cursor % len(spec.hosts)]
                cursor += 1
                for _ in range(len(spec.hosts) if limited else 0):  # skip the full hosts (all full: back at the first)
                    if free(host, need):
                        break
                    host = spec.hosts[cursor % len(spec.hosts)]
                    cursor += 1
            used[host.name] = used.get(host.name, 0) + 1
            gpus_used[host.name] = gpus_used.get(host.name, 0) + need
            slots[f"{task_type}:{index}"] = Slot(host.name, host.dial_address)
    return slots


def gpu_replan(spec: Spec, plan: Plan, found: Mapping[str, Optional[tuple]]) -> Optional[tuple[Placement, str]]:
    """When the preflight found (``found``: host -> its GPUs, None where not asked) that the
    round-robin over-fills some hosts' GPUs with GPU-count tasks, the placement that bounds each
    host without ``slots`` by its GPUs instead, and the one line saying so; None when no host is
    over-filled, a host's GPUs are unknown, or the GPUs cannot hold the tasks either way."""
    if gpus.placement_off(spec) or any(v is None for v in found.values()) or plan.placeholder:
        return None
    over = [h for h, g in found.items() if gpus.host_problems(plan, h, g)]
    if not over:
        return None
    room = gpus.gpu_room(spec, found)
    if any(h not in room for h in over):  # a host with slots, or one whose trouble is not its count
        return None
    placement = Placement(round_robin(spec, room))
    try:
        replanned = build_plan(spec, placement)
    except SpecError:
        return None
    if any(gpus.host_problems(replanned, h, g) for h, g in found.items()):
        return None
    counts: dict[str, int] = {}
    for t in replanned.tasks:
        if t.gpus.required:
            counts[t.host] = counts.get(t.host, 0) + 1
    before = {h: sum(1 for t in plan.tasks if t.host == h and t.gpus.required) for h in over}
    said = ", ".join(f"{h} {plural(len(found[h]))} for {before[h]}" for h in over)
    now = ", ".join(f"{h} {n}" for h, n in counts.items())
    return placement, (f"gpus: round-robin would over-fill {said} GPU-count tasks; placed by each host's GPUs instead "
                       f"(GPU tasks: {now}); set hosts[].slots to place them yourself")


class SSHBackend(Backend):
    name = "ssh"
    options_key = "ssh"
    Options = SSHOptions
    capabilities = Capabilities(warm_standby=True, port_preflight=True, port_probe=True, elastic=True)

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A group's own ``hosts`` round-robin, else one cursor shared over all ``hosts:``. With no
        hosts yet (``discovery:`` finds them when tfcluster plans to run), placeholders."""
        if not spec.hosts and spec.discovery is not None:
            slots = {f"{t}:{i}": Slot(f"host{n + 1}", f"host{n + 1}")
                     for n, (t, i) in enumerate((t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t)))}
            return Placement(slots, placeholder=True, note="hosts come from discovery.command when tfcluster plans a run")
        return Placement(round_robin(spec))

    def allocate(self, spec: Spec) -> Placement:
        """The static placement, or the one the preflight made from the hosts' GPU counts."""
        return self._gpu_placement if self._gpu_placement is not None else self.place(spec)

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
                        cls(loaded, record=None, console=console).pool)

    # Printed by `up --detach` (without ssh.supervisor the supervisor holds the hosts' leases).
    detach_note = ("the supervisor runs on this machine and holds the hosts' leases: keep it on and online "
                   "(or set ssh.supervisor: HOST to run it on a cluster host)")

    def __init__(self, loaded: LoadedSpec, record=None, console: Optional[Console] = None,
                 runner: Optional[Runner] = None) -> None:
        if runner is None:
            require_ssh_libraries()
        self.loaded = loaded
        self.spec = loaded.spec
        self.opts: SSHOptions = loaded.spec.ssh
        self.record = record
        self.console = console or Console()
        self.run_id = record.run_id if record is not None else "down"
        self.stop_grace = self.spec.watchdog.stop_grace
        if self.opts.config and not self._local(self.opts.config).is_file():
            raise LaunchError(f"ssh.config: {self.opts.config} does not exist; fix the path or remove the key")
        run_dir, state, workdir = remote_paths(self.opts, self.spec.name, self.run_id)
        # The hosts: connections, per-host state, starts, lease, heartbeat, membership (pool.py).
        self.pool = HostPool(self.spec.hosts, self.opts, loaded.base_dir,
                             (run_dir, state_dir(self.spec.state, state), workdir),
                             runner=runner, on_preempted=self._preempted)
        self.state_sync = StateSync(self.pool, self.spec.state, self.console, record, self.run_id)  # (state.py)
        self._gpu_placement: Optional[Placement] = None  # the preflight's, by the hosts' GPUs (gpu_replan)

    def _local(self, path: str) -> Path:
        from launcher.backends.ssh.connect import resolve_local

        return resolve_local(path, self.loaded.base_dir)

    # -------------------------------------------------------------- preflight

    def preflight(self, plan: Plan) -> None:
        names = [h.name for h in plan.hosts]
        if not names:
            return
        if self.opts.sync or self.opts.setup:
            # Setup runs on every host at once (a ThreadingGroup): connect them all first.
            ssh_probe.unreachable_error(names, self.pool.connect(names))
            ssh_sync.sync_and_setup(self.pool, self.loaded, names)
        # Otherwise each host connects and starts its agent without waiting for the others.
        try:
            ssh_probe.probe(self.pool, self.state_sync, plan, names)
        except LaunchError as exc:
            plan = self._replan_by_gpus(plan, names, exc)
            self._probe_again(plan, names)
        for line in gpu_notes(plan, {n: self.pool.hosts[n].gpus for n in names}):
            self.console.info(line)

    def _replan_by_gpus(self, plan: Plan, names: list[str], exc: LaunchError) -> Plan:
        """The preflight refused only hosts whose GPUs the round-robin over-fills, and placing by
        each host's GPUs fits: that plan (said in one line; ``allocate`` gives it to the run),
        to be probed once more. Else ``exc`` stands."""
        found = {n: self.pool.hosts[n].gpus for n in names}
        refused = [p for n, g in found.items() if g is not None for p in gpus.host_problems(plan, n, g)]
        others = [line for line in exc.lines if line not in refused and line != "no task was started"]
        got = None if others or not refused else gpu_replan(self.spec, plan, found)
        if got is None:
            raise exc
        self._gpu_placement, line = got
        self.console.info(line)  # (the run record, made after the preflight, holds the plan it gives)
        self.preflight_plan = build_plan(self.spec, self._gpu_placement)
        return self.preflight_plan

    def _probe_again(self, plan: Plan, names: list[str]) -> None:
        """The preflight once more, for the plan placed by GPUs. The first probe's agents exit when
        their channels close, releasing the task ports they held; one not gone yet makes a port
        look in use (the first probe found no port in use, or there would be no replan): waited
        for, a few times."""
        for left in (3, 2, 1, 0):
            try:
                ssh_probe.probe(self.pool, self.state_sync, plan, names)
                return
            except LaunchError as exc:
                ours = all(" is in use (" in line or line == "no task was started" for line in exc.lines)
                if not left or not ours:
                    raise
                time.sleep(0.5)

    # -------------------------------------------------------------- state dir (state.py)

    def prepare_attempt(self, number: int) -> None:
        self.state_sync.prepare_attempt(number)

    # -------------------------------------------------------------- hosts that come and go (pool.py)

    def _preempted(self, name: str) -> None:
        """A task on ``name`` saw GCE's preemption notice (taskwrap's GCE_NOTICE line); the pool
        counts the host as lost at once, without waiting elastic.host_wait."""
        self.console.info(f"{name}: GCE preemption notice; its tasks save and stop now")
        if self.record is not None:
            self.record.event(Event.HOST_PREEMPTED, host=name)

    def lost_hosts(self, hosts: Sequence[str], wait: float, stop=None, look: Mapping[str, float] = {}) -> dict[str, str]:
        return self.pool.lost_hosts(hosts, wait, stop, look)

    def hosts_back(self, hosts: Sequence[str], settle: float) -> list[str]:
        return self.pool.hosts_back(hosts, settle)

    def add_hosts(self, hosts) -> None:
        self.pool.add_hosts(hosts)

    def use_plan(self, plan: Plan) -> None:
        self.state_sync.use(plan)
        self.pool.unwatch({t.host for t in plan.tasks})  # a host the plan uses is no longer watched

    def collect_results(self) -> None:
        self.state_sync.collect()

    # -------------------------------------------------------------- tasks

    def task_env(self, task: PlannedTask, hs: HostState, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(task.env)
        env.update({envnames.RUN_DIR: hs.run_dir, envnames.STATE_DIR: hs.state_dir})
        if self.state_sync.mode == "copy":
            env[envnames.STATE_PRIVATE] = "1"
        env.update(extra)
        return env

    def _ensure_ready(self, hs: HostState) -> None:
        pool = self.pool
        if pool.heartbeat.silence(hs.name) > self.opts.lease and hs.conn is not None:
            # Lost (a partition, a reboot): TCP may still look open; connect afresh and probe again.
            hs.forget_connection()
        if hs.ready and hs.transport is not None and hs.transport.is_active():
            return
        problems = pool.connect([hs.name])
        if not problems:
            pool.heartbeat.heard(hs.name)
        if problems:
            raise LaunchError(problems[hs.name])
        if not hs.ready:
            plan = Plan(name=self.spec.name, strategy=self.spec.strategy, backend=self.name, tasks=(), hosts=(hs.spec,))
            ssh_probe.probe(pool, self.state_sync, plan, [hs.name])

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> SSHTask:
        hs = self.pool.hosts[task.host]
        n = self.pool.starts.get(task.key, 0)
        spare = hs.spare
        if spare is not None and spare[0] == task.key and n == 0 and not spare[1].closed \
                and not spare[1].exit_status_ready():
            hs.spare = None
            self.pool.starts[task.key] = 1
            return self._go(task, hs, spare[1], env, on_line)
        # Not the task it waits for (or it is gone): release its ports, start plainly.
        self.pool.drop_spare(hs)
        self._ensure_ready(hs)
        self.pool.starts[task.key] = n + 1
        pidfile = hs.pidfile(task, n)
        promotion = None
        if env.get(envnames.STANDBY) == "1":  # a warm standby: its promotion file, beside its pid file
            promotion = pidfile + ".env.json"
            env = {**env, envnames.STANDBY_ENV: promotion}
        command = task_command(hs.python, hs.workdir, hs.run_dir, pidfile, self.opts.lease, self.stop_grace,
                               task.command, self.opts.gce_metadata)
        try:
            chan = hs.transport.open_session(timeout=self.opts.connect_timeout)
            chan.set_combine_stderr(True)
            chan.exec_command(command)
            chan.sendall(env_block(self.task_env(task, hs, env)))
        except Exception as exc:  # noqa: BLE001
            from launcher.backends.ssh.connect import describe_channel_error  # (late: paramiko is the [ssh] extra's)

            raise LaunchError(f"host {hs.name}: cannot start {task.key} "
                              f"({describe_channel_error(exc, self.opts.connect_timeout)}); "
                              "check the host and sshd's MaxSessions") from None
        handle = self.pool.track(SSHTask(task, self.pool, hs, chan, pidfile, on_line, self._gpu_figures,
                                         self._gpus_given))
        handle.promotion = promotion
        return handle

    def promote(self, handle: TaskHandle, task: PlannedTask, env: Mapping[str, str]) -> None:
        """One command on the standby's host: the environment a cold start would send over stdin
        into its promotion file, then SIGUSR1 to its group (commands.promote_command)."""
        promotion = getattr(handle, "promotion", None)
        if not isinstance(handle, SSHTask) or promotion is None:
            return super().promote(handle, task, env)
        hs = handle.host
        body = json.dumps(self.task_env(task, hs, env), separators=(",", ":")).encode()
        code, out = self.pool.run_on(hs.name, promote_command(promotion, handle.pidfile), body, 10.0)
        if code != 0 or f"sent {handle.pidfile}" not in out:
            raise LaunchError(f"host {hs.name}: cannot promote the standby of {task.key} "
                              f"({(out.strip().splitlines() or ['exit %d' % code])[-1][:200]})")

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
            raise LaunchError(f"host {hs.name}: cannot start {task.key} ({exc_text(exc)}); "
                              "check the host") from None
        return self.pool.track(SSHTask(task, self.pool, hs, chan, pidfile, on_line, self._gpu_figures,
                                       self._gpus_given))

    def _gpu_figures(self, key: str, mib: int, util: Optional[int]) -> None:
        """A task's GPU memory and utilisation from its wrapper on the host (taskwrap --gpu-watch):
        the same ``gpu_usage`` event the local backend's watch writes (panel, status, report)."""
        if self.record is not None:
            self.record.event(Event.GPU_USAGE, tasks={key: [mib, util]})

    def _gpus_given(self, key: str, ids: list) -> None:
        """The host's GPUs a task's wrapper gave it (taskwrap --gpus): a task_gpus event (status)."""
        if self.record is not None:
            self.record.event(Event.TASK_GPUS, task=key, gpus=ids)

    def signal_tasks(self, handles: Sequence[SSHTask], sig: int) -> None:
        """Signal tasks, one command per host, hosts in parallel (task.py)."""
        signal_tasks(self.pool, handles, sig)

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

    def close(self) -> None:
        self.pool.close()

    # -------------------------------------------------------------- down

    def down(self, run: RecordedRun, console: Console) -> bool:
        """Stop a run's remote tasks from its record (down.py). True if any ran."""
        return ssh_down.down(self.pool, run, console, self.stop_grace)
