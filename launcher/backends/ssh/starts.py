"""Starting tasks on the ssh hosts: a task's environment, a host made ready (connected, its agent
probed) before a start, a cold start through ``taskwrap.py`` on a new channel, the host agent
the preflight left waiting turned into the host's first task (no new shell), and a warm
standby promoted (its environment into its promotion file, then SIGUSR1). Works on the
HostPool; the backend hands its starts and promotions here."""

from __future__ import annotations

import json
from typing import Callable, Mapping, Optional

from launcher.contract import envnames
from launcher.errors import LaunchError, exc_text
from launcher.plan.build import Plan, PlannedTask
from launcher.backends.base import OutputSink, StartRequest
from launcher.backends.ssh import probe as ssh_probe
from launcher.backends.ssh.commands import env_block, promote_command, task_command, wrap_args
from launcher.backends.ssh.host import HostState
from launcher.backends.ssh.pool import HostPool
from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.ssh.state import StateSync
from launcher.backends.ssh.task import SSHTask


class Starts:
    """``gpu_figures(key, mib, util)`` and ``gpus_given(key, given)`` (gpuplace.parse_given_line's
    (ids, visible, collective)) take what a task's wrapper
    reports of its GPUs (the backend writes them into the run record)."""

    def __init__(self, pool: HostPool, state_sync: StateSync, spec_name: str, strategy: str, stop_grace: float,
                 gpu_figures: Callable[[str, int, Optional[int]], None],
                 gpus_given: Callable[[str, tuple], None]) -> None:
        self.pool = pool
        self.opts = pool.opts
        self.state_sync = state_sync
        self.spec_name, self.strategy = spec_name, strategy
        self.stop_grace = stop_grace
        self.gpu_figures, self.gpus_given = gpu_figures, gpus_given

    def task_env(self, task: PlannedTask, hs: HostState, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(task.env)
        env.update({envnames.RUN_DIR: hs.run_dir, envnames.STATE_DIR: hs.state_dir})
        if self.state_sync.mode == "copy":
            env[envnames.STATE_PRIVATE] = "1"
        env.update(extra)
        return env

    def ensure_ready(self, hs: HostState) -> None:
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
            self.probe_again(hs)

    def probe_again(self, hs: HostState) -> None:
        """The host's preflight once more, for no task: its agent, and its fork server's keeper
        where the run uses one (ssh/zygote.py order)."""
        plan = Plan(name=self.spec_name, strategy=self.strategy, backend="ssh", tasks=(), hosts=(hs.spec,))
        ssh_probe.probe_or_raise(self.pool, self.state_sync, plan, [hs.name])

    def start(self, request: StartRequest, on_line: OutputSink) -> SSHTask:
        task = request.task
        hs = self.pool.hosts[task.host]
        n = self.pool.starts.get(task.key, 0)
        spare = hs.spare
        if spare is not None and spare[0] == task.key and n == 0 and not spare[1].closed \
                and not spare[1].exit_status_ready():
            hs.spare = None
            self.pool.starts[task.key] = 1
            return self.go(task, hs, spare[1], request.told(), on_line)
        # Not the task it waits for (or it is gone): release its ports, start plainly.
        self.pool.drop_spare(hs)
        self.ensure_ready(hs)
        self.pool.starts[task.key] = n + 1
        pidfile = hs.pidfile(task, n)
        promotion = pidfile + ".env.json" if request.standby else None  # a standby's, beside its pid file
        env = request.told(promotion)
        if request.fork:  # a server that ended: started again, or the host's tasks cold from now on
            ssh_zygote.ensure(self.pool, hs, lambda: self.probe_again(hs))
        served = ssh_zygote.served(self.pool, hs, task.command, request.fork)  # forked by the host's fork server
        command = task_command(hs.python, hs.workdir, hs.run_dir, pidfile, self.opts.lease, self.stop_grace,
                               task.command, self.opts.gce_metadata, zygote=served,
                               defer=served is not None and promotion is not None)
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
        handle = self.pool.track(SSHTask(task, self.pool, hs, chan, pidfile, on_line, self.gpu_figures,
                                         self.gpus_given))
        handle.promotion = promotion
        handle.deferred = served is not None and promotion is not None
        return handle

    def go(self, task: PlannedTask, hs: HostState, chan, env: Mapping[str, str], on_line: OutputSink) -> SSHTask:
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
        return self.pool.track(SSHTask(task, self.pool, hs, chan, pidfile, on_line, self.gpu_figures,
                                       self.gpus_given))

    def promote(self, handle: SSHTask, promotion: str, request: StartRequest) -> None:
        """One command on the standby's host: the environment the cold start ``request`` would send
        over stdin into its promotion file, then SIGUSR1 to its group (commands.promote_command)."""
        hs, task = handle.host, request.task
        if getattr(handle, "deferred", False):  # its fork is asked for now: a server that ended is started again first
            ssh_zygote.ensure(self.pool, hs, lambda: self.probe_again(hs))
        body = json.dumps(self.task_env(task, hs, request.told()), separators=(",", ":")).encode()
        code, out = self.pool.run_on(hs.name, promote_command(promotion, handle.pidfile), body, 10.0)
        if code != 0 or f"sent {handle.pidfile}" not in out:
            raise LaunchError(f"host {hs.name}: cannot promote the standby of {task.key} "
                              f"({(out.strip().splitlines() or ['exit %d' % code])[-1][:200]})")
