"""One task running on a host: its channel (output, exit status, and stdin as the lifeline),
its pid file, and what the host pool tells about it when the host falls silent."""

from __future__ import annotations

import signal as _signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from launcher.plan.build import PlannedTask
from launcher.remote.gpuplace import parse_figures_line, parse_given_line
from launcher.remote.taskwrap import GCE_NOTICE, LEASE_EXPIRED
from launcher.backends.base import OutputSink, TaskHandle
from launcher.backends.channel import Decoder
from launcher.backends.process import ProcessInfo
from launcher.backends.pyspy import from_remote
from launcher.backends.ssh.commands import (native_stacks_command, process_signal_command, signal_command,
                                           state_command)
from launcher.backends.ssh.host import HostState


@dataclass(frozen=True)
class SSHProcess(ProcessInfo):
    """A task on a host over ssh, as the record keeps it: the host, its wrapper's pid file there
    (whose run-unique tail ``down`` checks the process against), and the run's dir there. No
    pid: a pid is a process of this machine to the record's readers."""

    ssh_host: str
    remote_pidfile: str
    remote_run_dir: str


class TaskHosts(Protocol):
    """What a running task needs of the host pool (pool.HostPool is one; task.py does not import
    it, so that the pool may import this module): run a command on a host, the heartbeat and the
    options, a thread pool, and to be told of a preemption notice."""

    opts: Any
    heartbeat: Any

    def run_on(self, name: str, command: str, stdin: Optional[bytes] = None,
               timeout: float = 30.0) -> tuple[int, str]: ...

    def executor(self, n: int) -> Any: ...

    def host_preempted(self, name: str) -> None: ...

EXIT_CONNECTION_LOST = 255  # what ssh(1) reports when the connection drops


class SSHTask(TaskHandle):
    def __init__(self, task: PlannedTask, pool: TaskHosts, host: HostState, channel, pidfile: str,
                 on_line: OutputSink, on_gpu: Optional[Callable[[str, int, Optional[int]], None]] = None,
                 on_gpus: Optional[Callable[[str, tuple], None]] = None) -> None:
        super().__init__(task)
        # Its wrapper's GPU lines, handed here, not logged: its figures (--gpu-watch), the GPUs it got (--gpus).
        self._on_gpu, self._on_gpus = on_gpu, on_gpus
        self.pool = pool
        self.host = host
        self.channel = channel
        self.pidfile = pidfile
        self._code: Optional[int] = None
        self._note = ""
        self._lease_expired = False  # its wrapper said the launcher went silent
        self._lost_at: Optional[float] = None  # when its session was lost (the exit code is made up)
        self._notice_at: Optional[float] = None  # when its wrapper saw GCE's preemption notice
        self._reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"ssh-out-{task.key}")
        self._reader.start()

    def _pump(self, on_line: OutputSink) -> None:
        decoder = Decoder(self.key, on_line, wrapper=self._wrapper_line)
        try:
            while True:
                data = self.channel.recv(65536)
                if not data:
                    break
                decoder.feed(data)
        except Exception:  # noqa: BLE001 - a dropped connection ends the stream
            pass
        decoder.end()

    def _wrapper_line(self, line: str) -> bool:
        """Its wrapper's own line (a wrapper frame: nothing the task prints is one): the lease run
        out and GCE's notice noted (and shown), its GPU lines taken (not logged), its word on the
        task stopped (``wrapper_word``)."""
        if self.wrapper_word(line):
            return True
        if line.startswith("taskwrap: " + LEASE_EXPIRED):
            self._lease_expired = True
        elif line.startswith("taskwrap: " + GCE_NOTICE):
            self._notice_at = time.time()
            self.pool.host_preempted(self.host.name)
        elif line.startswith("taskwrap: GPU"):
            figures = parse_figures_line(line) if self._on_gpu is not None else None
            if figures is not None:
                self._on_gpu(self.key, *figures)
                return True
            given = parse_given_line(line) if self._on_gpus is not None else None
            if given is not None:
                self._on_gpus(self.key, given)
                return True
        return False

    @property
    def exit_code(self) -> Optional[int]:
        """The task's exit code once poll() has seen it, else None (asks no host)."""
        return self._code

    def poll(self) -> Optional[int]:
        if self._code is not None:
            return self._code
        silent = self.pool.heartbeat.silence(self.host.name)
        if silent > self.pool.opts.lease and not self.channel.exit_status_ready():
            # Its wrapper has heard nothing for as long and stops the task (the lease).
            self._note = f"{self.host.name}: no word for {silent:.0f} s (network partition or host down)"
            self._lost_at = time.time() - silent
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
            self._lost_at = time.time()
            self._note = f"SSH connection to {self.host.name} lost; the wrapper stops the task within ssh.lease"
        elif self._lease_expired:
            # The wrapper heard nothing from us for ssh.lease and stopped the task (exit 143); its
            # exit status can still reach us over a one-way partition before our own heartbeat
            # check fires: the cause is the same silent host, not a SIGTERM.
            silent = max(self.pool.heartbeat.silence(self.host.name), float(self.pool.opts.lease))
            self._note = f"{self.host.name}: no word for {silent:.0f} s (network partition or host down)"
            self._lost_at = time.time() - silent
        self._code = code
        try:
            self.channel.close()
        except Exception:  # noqa: BLE001
            pass
        return code

    @property
    def session_lost(self) -> Optional[float]:
        return self._lost_at

    @property
    def host_going(self) -> Optional[float]:
        return self._notice_at

    def signal(self, sig: int) -> None:
        signal_tasks(self.pool, [self], sig)

    def signal_process(self, sig: int) -> None:
        if self.exit_code is None:
            self.pool.run_on(self.host.name, process_signal_command(sig, [self.pidfile]), None, 10.0)

    def native_stacks(self, timeout: float) -> str:
        if self.exit_code is not None:
            return ""
        code, out = self.pool.run_on(self.host.name, native_stacks_command(self.pidfile), None,
                                     timeout)
        return from_remote(code, out)

    def info(self) -> SSHProcess:
        return SSHProcess(ssh_host=self.host.name, remote_pidfile=self.pidfile, remote_run_dir=self.host.run_dir)

    def state_note(self) -> str:
        if self._note or self._code is not None:
            return self._note
        silent = self.pool.heartbeat.silence(self.host.name)
        if silent > min(self.pool.opts.lease, 5.0):
            return f"{self.host.name}: no word for {silent:.0f} s (network partition or host down?)"
        code, out = self.pool.run_on(self.host.name, state_command(self.pidfile), None, 5.0)
        return "process is stopped (SIGSTOP?)" if code == 0 and out.strip() in ("T", "t") else ""

    def lifeline_cut(self) -> None:
        """Close our end of stdin: the wrapper sees EOF and stops its task group itself."""
        try:
            self.channel.shutdown_write()
        except Exception:  # noqa: BLE001
            pass


def signal_tasks(pool: TaskHosts, handles: Sequence[SSHTask], sig: int) -> None:
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
        code, out = pool.run_on(name, signal_command(sig, [h.pidfile for h in hs_tasks]), None, 10.0)
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
    with pool.executor(len(names)) as ex:
        list(ex.map(one, names))
