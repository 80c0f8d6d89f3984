"""Local backend: every task is a child process of this launcher, on this machine.

Each task runs under ``taskwrap.py`` as the leader of its own session and process group, so
stopping it is ``killpg`` on a PID we started (never a name pattern), and the wrapper's stdin
pipe is a lifeline: if this launcher dies, even by SIGKILL, the pipe closes and the wrapper
takes its task group down.
"""

from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from launcher.contract import envnames
from launcher.errors import LaunchError
from launcher.plan.gpus import local_gpus_checked, placement_off, take_of
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, task_keys
from launcher.contract.portcheck import port_bind_problem, port_holders
from launcher.system.procinfo import (cmdline, group_alive, is_same, kill_group, not_own, start_time,
                                      state as process_state)
from launcher.record.layout import name_dir, runs_dir, state_dir
from launcher.remote import wrapper_argv
from launcher.plan.threads import local_cores
from launcher.backends import pyspy
from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, OutputSink, RecordedRun, Tasks, accepts
from launcher.backends.process import LocalProcess, StartRequest, from_record
from launcher.backends.childtask import ChildTask
from launcher.backends.standbyfile import mem_available, write_promotion
from launcher.backends.zygotes import LocalZygote

if TYPE_CHECKING:  # pragma: no cover
    from launcher.notices import Notices
    from launcher.spec.model import LoadedSpec, Spec

LOCAL_HOST = "localhost"
_UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT)


class LocalTask(ChildTask):
    def __init__(self, task: PlannedTask, proc: subprocess.Popen, on_line: OutputSink,
                 pidfile: Optional[str] = None) -> None:
        self.pgid = proc.pid  # start_new_session: the wrapper leads its own group
        self.pidfile = pidfile  # where the wrapper says its task's pid (a task the zygote forked)
        super().__init__(task, proc, on_line)

    def signal(self, sig: int) -> None:
        if self.reaped_long_ago():
            return
        # A task the zygote forked leads a group of its own, and its wrapper passes on what it can
        # catch: SIGKILL, SIGSTOP and SIGCONT go to the task's group here, first (any other twice
        # would be taken twice: a second SIGUSR1 kills a promoted standby).
        task = self._task_pid() if self.pidfile and sig in _UNCATCHABLE else self.pgid
        for group in dict.fromkeys((task, self.pgid)):
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def signal_process(self, sig: int) -> None:
        if self.reaped_long_ago():
            return
        pid = self._task_pid()
        if pid == self.proc.pid:
            return  # the wrapper's child is gone (or not yet there): nothing of the task's to ask
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def native_stacks(self, timeout: float) -> str:
        pid = self._task_pid()
        if pid == self.proc.pid or self.reaped_long_ago():
            return ""
        argv = cmdline(pid) or [""]
        # A task the zygote forked shows its argv as one title, its words joined by spaces
        # (launcher/remote/zygotechild.py show_argv): its interpreter is the first of them.
        argv0 = argv[0].split(" ", 1)[0] if len(argv) == 1 and self.pidfile else argv[0]
        return pyspy.dump_local(pid, argv0, timeout)

    def info(self) -> LocalProcess:
        return LocalProcess(pid=self.proc.pid, pgid=self.pgid, start_time=start_time(self.proc.pid))

    def state_note(self) -> str:
        state = process_state(self._task_pid())
        if state in ("T", "t"):
            return "process is stopped (SIGSTOP?)"
        if state == "Z":
            return "process is a zombie (exited, not yet reaped)"
        return ""

    def _task_pid(self) -> int:
        """The wrapped task's pid: the wrapper's only child, or the one its pid file names (a task
        the zygote forked is not the wrapper's child); the wrapper's own pid where neither is."""
        if self.pidfile:
            try:
                with open(self.pidfile) as fh:
                    return int(fh.read().split()[1])
            except (OSError, ValueError, IndexError):
                return self.proc.pid
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as fh:
                kids = fh.read().split()
            return int(kids[0]) if kids else self.proc.pid
        except (OSError, ValueError):
            return self.proc.pid


@dataclass(frozen=True)
class LocalRun:
    """What both seams of a local run read: where tasks run and what they are told."""

    workdir: Path
    run_dir: Path
    state_dir: Path
    stop_grace: float = 5.0

    def path(self) -> str:
        # Local tasks find the launcher's own Python first, so `python -m worker` uses this venv.
        return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


class LocalBackend(BackendKind):
    name = "local"
    capabilities = Capabilities(warm_standby=True, fork=True, port_preflight=True, port_probe=True, stacks=True,
                                native_stacks=True, gpus_here=True)

    @classmethod
    def from_spec(cls, loaded: "LoadedSpec", record: Any = None, console: Optional["Notices"] = None) -> Backend:
        spec = loaded.spec
        run_dir = record.dir if record is not None else name_dir(loaded)
        state = record.state_dir if record is not None else state_dir(runs_dir(loaded), spec.name)
        run = LocalRun(workdir=(loaded.base_dir / spec.workdir).resolve(), run_dir=run_dir, state_dir=state,
                       stop_grace=spec.watchdog.stop_grace)
        return Backend(cls, LocalHosts(run), LocalTasks(run, record.write if record is not None else None))

    @classmethod
    def task_dirs(cls, loaded: "LoadedSpec") -> list[Path]:
        """The spec's workdir: every task runs there."""
        return [(loaded.base_dir / loaded.spec.workdir).resolve()]

    @classmethod
    def place(cls, spec: "Spec") -> Placement:
        """Every task on this machine; its cores and its GPUs (``nvidia-smi -L``, when any task uses
        one) are known now, so the plan holds the thread budgets and each task's GPUs."""
        keys = task_keys(spec)
        wants_gpu = any(gpu_take != 0 for gpu_take in {take_of(spec, t)[0] for t in {t for t, _ in keys}})
        found, failure = local_gpus_checked() if wants_gpu and not placement_off(spec) else ((), None)
        return Placement({f"{t}:{i}": Slot(LOCAL_HOST, LOCAL_HOST) for t, i in keys},
                         cores={LOCAL_HOST: local_cores()},
                         gpus={LOCAL_HOST: found} if wants_gpu and not placement_off(spec) else {},
                         gpu_failures={LOCAL_HOST: failure} if failure else {},
                         gpu_limits=({LOCAL_HOST: os.environ["CUDA_VISIBLE_DEVICES"]}
                                     if "CUDA_VISIBLE_DEVICES" in os.environ else {}))


class LocalHosts(Hosts):
    """This machine: the workdir, the entrypoint and the ports checked; its memory; leftovers."""

    def __init__(self, run: LocalRun) -> None:
        self.run = run

    def probe(self, plan: Plan) -> None:
        workdir = self.run.workdir
        if not workdir.is_dir():
            raise LaunchError(f"workdir: {workdir} is not a directory; create it or fix workdir in the spec")
        argv0 = plan.tasks[0].command[0] if plan.tasks else ""
        if argv0 and shutil.which(argv0, path=self.run.path()) is None and not (workdir / argv0).is_file():
            raise LaunchError(
                f"entrypoint: command '{argv0}' not found on PATH (task {plan.tasks[0].key}); "
                "install it or give its full path"
            )
        for task in plan.tasks:
            if task.port is None:
                continue
            problem = port_bind_problem(task.port)
            if problem:
                holders = port_holders(task.port) if problem == "in use" else []
                held = f" by {', '.join(holders)}" if holders else ""
                raise LaunchError(
                    f"port {task.port} on {task.host} is {problem}{held} (task {task.key}); "
                    "stop what holds it or change ports.base in the spec"
                )

    def allocate(self, spec: "Spec") -> Placement:
        return LocalBackend.place(spec)

    def free_memory(self, hosts) -> dict[str, int]:
        free = mem_available()
        return {LOCAL_HOST: free} if free is not None else {}

    def down(self, run: RecordedRun, console: "Notices") -> bool:
        """Kill the task groups the run left behind, by pgid and start time (never by name), each
        only once its leader is proven the run's own (procinfo.not_own: its start time and the
        run's id in its environment, as the supervisor started it); otherwise one line, no signal."""
        leftovers = []
        for key, task in run.tasks.items():
            proc = from_record(task)
            if proc is None or not (proc.pgid and is_same(proc.pgid, proc.start_time) and group_alive(proc.pgid)):
                continue
            pgid = proc.pgid
            why = not_own(pgid, proc.start_time, (envnames.RUN_ID, run.dir.name), owner=run.owner)
            if why is not None:
                run.refuse(console, f"{key}: not stopping process group {pgid}: {why}; the record names a process "
                                    "that is not this run's")
                continue
            leftovers.append(key)
            kill_group(pgid, self.run.stop_grace)
        if leftovers:
            console.info(f"stopped leftover tasks: {', '.join(leftovers)}")
        return bool(leftovers)


class LocalTasks(Tasks):
    """Each task a child process group of this launcher, under taskwrap."""

    def __init__(self, run: LocalRun, write=None) -> None:
        """``write``: the run record's (the zygote's events), or None."""
        self.run = run
        self._standbys = 0
        self.zygote = LocalZygote(run.run_dir, run.workdir, run.stop_grace, write, LOCAL_HOST)

    def _env(self, task: PlannedTask, extra: Mapping[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(task.env)
        env.update(
            {
                "PATH": self.run.path(),
                envnames.RUN_DIR: str(self.run.run_dir),
                envnames.STATE_DIR: str(self.run.state_dir),
            }
        )
        env.update(extra)
        return env

    def start(self, request: StartRequest, on_line: OutputSink) -> LocalTask:
        task, promotion = request.task, None
        if request.standby:  # a warm standby: its promotion file (see promote)
            self._standbys += 1
            promotion = self.run.run_dir / "standby" / f"{task.slug}.{self._standbys}.json"
        full = self._env(task, request.told(str(promotion) if promotion is not None else None))
        argv = [*wrapper_argv(), "--grace", str(self.run.stop_grace),
                "--control", envnames.CONTROL_FD]
        served, command = self.zygote.socket_for(task.command, full) if request.fork else (None, list(task.command))
        pidfile = self.zygote.pidfile() if served else None
        if served:
            argv += ["--zygote", served, "--pidfile", pidfile]
            if request.standby:  # its process is forked once promoted (taskwrap.py)
                argv += ["--standby-defer", f"{envnames.STANDBY},{envnames.STANDBY_ENV}"]
        proc = subprocess.Popen(
            [*argv, "--", *command],
            stdin=subprocess.PIPE,  # the lifeline: closes when this launcher dies
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.run.workdir,
            env=full,
            start_new_session=True,
            close_fds=True,
        )
        handle = LocalTask(task, proc, on_line, pidfile)
        handle.promotion = promotion
        return handle

    def promote(self, handle, request: StartRequest) -> None:
        """The environment the cold start ``request`` would add to this launcher's own (the plan's
        task env, the run/state dirs, ``request.told()``), written to the standby's promotion
        file, then SIGUSR1."""
        path = getattr(handle, "promotion", None)
        if path is not None:
            overlay = {**request.task.env_dict, envnames.RUN_DIR: str(self.run.run_dir),
                       envnames.STATE_DIR: str(self.run.state_dir), **request.told()}
            write_promotion(path, overlay)
            if handle.pidfile:  # its fork is asked for now: a zygote that ended is started again first
                self.zygote.ensure()
        handle.signal(signal.SIGUSR1)

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        return accepts("127.0.0.1", task.port)

    def close(self) -> None:
        self.zygote.close()
