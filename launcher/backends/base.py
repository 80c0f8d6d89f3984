"""The contract every backend implements: a kind and two narrow seams (like Ray's NodeProvider
beside its CommandRunner, torchelastic's PContext for the tasks).

A backend only executes: it never decides what to run (that is the plan) nor what a
failure means (that is the supervisor and its policy). ``BackendKind`` is the registered class
(its name, options block, ``Capabilities``, and what it answers from the spec alone);
``from_spec`` makes one run's ``Backend``: its ``Hosts`` (which hosts exist and answer, what
they hold, lost/back/added, ``down``) and its ``Tasks`` (start, promote, signal, stop, port
probe, the attempt hooks). Its life in ``tfcluster up``::

    spec --Kind.place(spec)--> placement --build_plan--> plan         (validate, plan, --dry-run)
    backend = Kind.from_spec(loaded, record)                          Backend(kind, hosts, tasks)
    report = backend.hosts.probe(plan)       checks, before anything is allocated or started;
                                             what it found of the hosts (HostReport, or None)
    preflight.step(spec, seen, plan, report) pure (launcher/plan/preflight.py): start with this
                                             plan, probe another one (then probe again), wait
                                             for hosts, or the error: until the plan is stable
    record.create()                          launcher.json: `tfcluster down` can find the run
    placement = backend.hosts.allocate(spec) the real hosts (at once for local/ssh/docker)
    plan = build_plan(spec, placement)       pure (unless the report gave the start plan); the
                                             supervisor executes this plan
    per attempt: tasks.prepare_attempt(n); tasks.start(StartRequest(task, env, standby, fork),
                 on_line) -> TaskHandle for every task (process.py: the request, and the typed
                 ProcessInfo its handle's info() gives); handle.poll() / tasks.port_open(task) /
                 handle.signal(sig) while supervising; tasks.stop(handles, grace) to end the attempt
    tasks.collect_results() after success; backend.close() always, last (tasks, then hosts)

and in ``tfcluster down``: ``Kind.from_spec(loaded, None).hosts.down(RecordedRun, console)``.

To add a backend: subclass BackendKind, Hosts and Tasks (and TaskHandle), list the kind in
``launcher/backends/__init__.py`` (REGISTRY), and pass tests/integration/test_backend_contract.py
(docs/contributing.md: "Adding a backend"). Importing a backend's module must stay cheap (no SDK
import at module level): validating a spec imports every registered backend to learn its options block.
"""

from __future__ import annotations

import abc
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional, Sequence

from launcher.backends.channel import OutputSink
from launcher.backends.elsewhere import Elsewhere
from launcher.backends.process import ProcessInfo, RecordedRun, StartRequest
from launcher.backends.stopping import still_running
from launcher.plan.build import Placement, Plan, PlannedTask
from launcher.remote.taskstream import RUNNING_WORD, STOPPED_WORD

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from pydantic import BaseModel

    from launcher.notices import Notices
    from launcher.plan.hostloss import HostLoss
    from launcher.plan.hostreport import HostReport
    from launcher.spec.model import LoadedSpec, Spec


def normalize_exit(returncode: int) -> int:
    """Popen's -N for "killed by signal N" becomes 128+N, as shells, SSH and Docker report it."""
    return 128 - returncode if returncode < 0 else returncode


class TaskHandle(abc.ABC):
    """One running task (its whole process group, container or remote session)."""

    stopped: bool = False  # its wrapper's last word: its process stopped by a signal (``wrapper_word``)

    def __init__(self, task: PlannedTask) -> None:
        self.task = task
        self.key = task.key
        self.started = time.monotonic()

    def wrapper_word(self, text: str) -> bool:
        """Its wrapper's line ``text`` (a wrapper frame: nothing the task prints is one), read for its word on
        the task stopped by a signal or running again (taskstream.py ``watch_stop``; phases.py ``stopped``)."""
        if text.startswith(STOPPED_WORD):
            self.stopped = True
        elif text.startswith(RUNNING_WORD):
            self.stopped = False
        return False

    @abc.abstractmethod
    def poll(self) -> Optional[int]:
        """The exit code (128+N for signal N) once the task has ended, else None."""

    @abc.abstractmethod
    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the task and everything it started; no error if already gone."""

    def signal_process(self, sig: int) -> None:
        """Deliver ``sig`` (the stacks' signal, launcher/contract/liveness.py) to the task's own
        process, not to what it started, where the backend can reach it alone (a child of the
        task's that does not handle it would end); else to its group, whose wrapper survives it.
        No error if already gone. Backends whose ``Capabilities.stacks`` is True implement it."""
        raise NotImplementedError("this backend cannot signal a task's own process")

    def native_stacks(self, timeout: float) -> str:
        """The task's own process's native frames, by py-spy where it is installed where the task
        runs (launcher/backends/pyspy.py): its text under a header, one line saying why there is
        none, or "" (a task gone; a backend whose ``Capabilities.native_stacks`` is False)."""
        return ""

    def info(self) -> ProcessInfo:
        """What the run record keeps about this task (pids, container ids) for ``down``: typed,
        its ``to_json`` the record's shape (process.py)."""
        return ProcessInfo()

    def state_note(self) -> str:
        """A short remark on the task's state for reports (e.g. 'stopped by SIGSTOP')."""
        return ""

    def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for what the task already printed to reach the line sink
        (its reader thread on a busy machine may still hold it). Default: nothing to wait for."""

    @property
    def session_lost(self) -> Optional[float]:
        """When (time.time()) the task's session with its host was lost (a dropped connection, a lease run
        out): the exit code was made up, the task did not exit on its own. Such an exit is the
        infrastructure's, not the training's (membership.py). None: it exited by itself, or still runs."""
        return None

    @property
    def host_going(self) -> Optional[float]:
        """When (time.time()) the task's host announced it is going away (GCE's preemption notice, seen by its
        wrapper, which SIGTERMed the task so that it saves before the OS shutdown). Its peers then get SIGTERM
        too, not SIGKILL (phases.py's let_survivors_save). None: no notice (most backends)."""
        return None


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so callers ask instead of testing its name."""

    # Can pre-start the next attempt's processes (``StartRequest.standby``) and promote them with
    # ``Tasks.promote`` (restart.warm_standby); without it, standby is off whatever the spec
    # says (``warm_standby: true`` is not refused) and ``plan`` says so in one line.
    warm_standby: bool = False
    # Keeps a warm parent per host (the fork server, launcher/remote/zygote.py) that forks the
    # tasks of a ``StartRequest.fork`` that use TensorFlow: the host imports it once, and a standby
    # is only its wrapper until promoted. Asked for unless restart.warm_standby is false.
    fork: bool = False
    # Hosts.probe() checks that every task's port is free / reachable where the task will run.
    port_preflight: bool = False
    # Tasks.port_open() really probes the port (else it always answers True and the startup watchdog
    # relies on the worker's ready marker alone).
    port_probe: bool = False
    # BackendKind.place() already knows the real hosts. False: place() gives placeholders and
    # only Hosts.allocate() (after submitting to a workload manager) knows the nodes; `tfcluster plan`
    # and `up --dry-run` then show the placeholders and say so.
    static_placement: bool = True
    # Hosts.lost() tells which hosts of a failed attempt are gone, so their tasks can move to a
    # spare host (launcher/plan/elastic.py); the spec refuses elastic: on backends without it.
    elastic: bool = False
    # A restart's tasks get ports no earlier attempt of the run used (launcher/plan/elastic.py's
    # on_fresh_ports): a stopped task leaves its host a while after the backend stopped it (slurm:
    # the step ends on its node about 2 s after its srun), and a promoted standby would wait for it.
    fresh_ports_per_restart: bool = False
    # TaskHandle.signal_process: the stacks' signal reaches the task's process (its own process
    # alone where the backend can: local, ssh), so a hang's report shows every task's stacks and
    # names the one in user code (launcher/supervise/stuck.py), and `tfcluster stacks` works.
    stacks: bool = False
    # TaskHandle.native_stacks: py-spy's dump of the task's process, run where it runs (local, ssh:
    # through the host's shell); the stacks file keeps it after faulthandler's Python stacks.
    native_stacks: bool = False
    # The tasks' GPUs are this machine's and each task is a process group here
    # (``ProcessInfo.local_group``): the supervisor samples their use with nvidia-smi
    # (launcher/supervise/gpuwatch.py). Elsewhere the backend reports it (ssh: the task wrapper).
    gpus_here: bool = False

    def forks(self, restart) -> bool:
        """Whether a run of ``restart`` (the spec's block) asks for the host's warm parent
        (``StartRequest.fork``): where the backend keeps one, unless restart.warm_standby is false,
        whether or not the run keeps standbys (one import of TensorFlow for the host's tasks costs
        less than one each). Decided once per run: the supervisor's starts and a backend that
        starts its hosts' warm parents ahead (ssh: in the preflight) read the same rule."""
        return self.fork and restart.warm_standby is not False


@dataclass(frozen=True)
class LaunchLines:
    """The commands a backend will run for a plan, as ``tfcluster plan`` shows them: the
    allocation's (``sbatch ...``; empty when there is none) and each task's (task key -> argv),
    with ``note`` saying what in them is a stand-in (the job id, placeholder nodes)."""

    allocation: tuple[str, ...] = ()
    tasks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict:
        return {"allocation": list(self.allocation), "tasks": {k: list(v) for k, v in self.tasks.items()},
                "note": self.note}


class BackendKind:
    """What a backend is before a run exists: the class registered for ``backend: <name>``. It
    is never instantiated; its class attributes declare, its classmethods answer from the spec
    alone, and ``from_spec`` makes one run's ``Backend`` (its two seams)."""

    name: ClassVar[str] = "abstract"
    # The spec's top-level block this backend owns (``ssh:``), validated by ``Options`` (a frozen
    # pydantic model, extra keys forbidden). spec.py keeps it opaque: it adds one field per
    # registered backend, ``spec.<options_key>``, an ``Options`` instance (default ``Options()``).
    options_key: ClassVar[Optional[str]] = None
    Options: ClassVar[Optional[type["BaseModel"]]] = None
    # Whether `tfcluster export` reads that block (docker: the image, its volumes and user) or refuses it
    # when set (the block configures what tfcluster itself does on the hosts: ssh, slurm).
    options_exported: ClassVar[bool] = False
    capabilities: ClassVar[Capabilities] = Capabilities()
    # What `up --detach` adds when it hands over (e.g. that this machine must stay up).
    detach_note: ClassVar[str] = ""
    # `tfcluster compose` writes this backend's plan (each task a container named like its
    # address; the options block's image, volumes and GPUs are the services').
    plans_compose: ClassVar[bool] = False

    @classmethod
    def check_spec(cls, spec: "Spec") -> list[tuple[tuple, str]]:
        """Cross-field rules that hold only for this backend (its Options model checks its own
        block). Returns ``(loc, message)`` pairs, loc a path into the YAML like ``("hosts",)``;
        spec.py prints each as one line ``FILE:LINE: hosts: message``."""
        return []

    @classmethod
    def standby_off(cls, spec: "Spec") -> Optional[str]:
        """Why this spec's run keeps no warm standby though the backend can keep them (a few words
        ``plan`` shows after "off: "), or None (the default: it may). A run asks its ``Hosts``."""
        return None

    @classmethod
    def task_dirs(cls, loaded: "LoadedSpec") -> list["Path"]:
        """The directories of this machine that are a task's working directory, as the run would
        start it (launcher/loader/shadow.py looks there for a file that shadows ``python -m
        worker``); none (the default) where tasks run in a copy or an image of their own."""
        return []

    @classmethod
    def place(cls, spec: "Spec") -> Placement:
        """Pure: the host and dial address of every task (``plan.task_keys(spec)``), from the spec
        alone. A backend whose nodes are known only after allocating returns placeholders with
        ``placeholder=True`` and a ``note`` (and sets ``capabilities.static_placement = False``).
        Every real backend implements it (the contract tests check)."""
        raise NotImplementedError(f"backend {cls.name} does not say where tasks run; implement {cls.__name__}.place")

    @classmethod
    def from_spec(cls, loaded: "LoadedSpec", record: Any = None, console: Optional["Notices"] = None) -> "Backend":
        """One run's seams for ``tfcluster up`` (``record`` is the RunRecord: run_id, dir,
        state_dir) or, with ``record=None``, for ``tfcluster down``. No network or engine access here."""
        raise NotImplementedError(f"backend {cls.name} makes no run; implement {cls.__name__}.from_spec")

    @classmethod
    def launch_lines(cls, loaded: "LoadedSpec", plan: Plan) -> Optional[LaunchLines]:
        """The command lines a run of ``plan`` would start (``tfcluster plan`` shows them), or
        None (the default: the plan's commands are what runs). May ask the workload manager
        (read only); raises LaunchError in one line when it cannot."""
        return None

    @classmethod
    def run_elsewhere(cls, loaded: "LoadedSpec", request: Elsewhere, console: "Notices") -> Optional[int]:
        """``up``/``status``/``logs``/``attach``/``down``/``runs`` for a spec whose supervisor
        and run record live on another machine: run ``request`` there (``request.argv``, naming
        the spec by its path there) and return its exit code. None (the default): they live here."""
        return None


class Hosts(abc.ABC):
    """The first seam: which hosts exist and answer, with their GPUs and slots; what they can
    hold; which are lost, back or added; and what a run left on them (``down``)."""

    def probe(self, plan: Plan) -> Optional["HostReport"]:
        """Check everything that can be checked before allocating or starting anything (hosts
        reachable, images present, ports free, the request satisfiable); raise LaunchError with
        one line per problem naming the host/task and the fix. ``plan`` may be a placeholder
        plan (see place). Returns what it found where that can change the plan (a HostReport:
        which hosts answered, their GPUs, which are absent and why, what it refused and why, the
        machine its containers share), else None (the default); the plans are made from it in
        launcher/plan/preflight.py, never here, and the probe runs again over the plan it gives."""
        return None

    @abc.abstractmethod
    def allocate(self, spec: "Spec") -> Placement:
        """Obtain the machines and answer where each task runs (the static placement, at once,
        where ``place`` already knows). May block (a queued job): Ctrl-C, SIGTERM and SIGHUP then
        raise KeyboardInterrupt in it, and close() follows. As soon as the allocation exists,
        record what releasing it needs with ``record.allocated(job=...)`` (launcher.json already
        exists), so ``tfcluster down`` finds it even if this launcher dies
        (``RecordedRun.allocation``). Must be undone by close()."""

    def free_memory(self, hosts: Sequence[str]) -> dict[str, int]:
        """Available memory in bytes per host (MemAvailable), for those it could tell; the warm
        standby is left off on a host short of it (launcher/supervise/standby.py). Default: none known."""
        return {}

    def standby_off(self, spec: "Spec") -> Optional[str]:
        """Why this run keeps no warm standby though the backend can keep them, once its hosts
        are known (``BackendKind.standby_off`` says it from the spec alone), or None (the default)."""
        return None

    def lost(self, hosts: Sequence[str], wait: float, stop: Any = None,
             look: Mapping[str, float] = {}) -> dict[str, "HostLoss"]:
        """After a failed attempt (``capabilities.elastic``): which of ``hosts`` are gone, each with its loss
        (launcher/plan/hostloss.py: preempted, unreachable; since when; a few words: "unreachable for 60 s").
        A host whose connection is healthy is not lost; one whose connection died may take up to ``wait``
        s to answer again (``stop``, a threading.Event, ends the wait early). ``look``: host -> the most
        seconds its first look may take (a host whose loss is known, looked at only to say whether it
        still answers). The default: none."""
        return {}

    def back(self, hosts: Sequence[str], settle: float) -> list[str]:
        """Elastic runs, polled while an attempt runs: which of ``hosts`` (lost earlier) have
        answered without a break for ``settle`` seconds. Must not block: probe elsewhere."""
        return []

    def answering(self, hosts: Sequence[str], seconds: float) -> list[str]:
        """Of ``hosts`` that ``back`` watches, those that have answered for ``seconds`` (less than their
        settle: standbys may start there meanwhile). Must not block. The default: none."""
        return []

    def add(self, hosts: Sequence[Any]) -> None:
        """Elastic runs: hosts found by ``discovery:`` during the run (spec ``Host`` entries),
        from now on usable like those of ``hosts:``."""

    def down(self, run: RecordedRun, console: "Notices") -> bool:
        """``tfcluster down``: stop and remove whatever the recorded run left behind on this
        backend (after its launcher, if alive, was asked to stop), by the ids the record holds,
        never by name. Report through ``console``; True if anything was still running."""
        return False

    def close(self) -> None:
        """Release connections, clients and allocations; called last (after ``Tasks.close``),
        after success, failure, Ctrl-C and a failed preflight alike. Must not raise."""


class Tasks(abc.ABC):
    """The second seam: start the plan's tasks on the hosts, promote standbys, signal and stop
    them, probe their ports; and the attempt hooks (the plan in use, before an attempt, after
    the run)."""

    @abc.abstractmethod
    def start(self, request: StartRequest, on_line: OutputSink) -> TaskHandle:
        """Start ``request.task`` with the plan's env plus ``request.told()`` (which wins), as a
        standby or forked where the request says so, under the task wrapper with its control
        channel where the backend can (launcher/remote/taskstream.py); from a reader thread, hand
        each line of its output (stdout and stderr) to ``on_line.line(task.key, line)`` and each
        line of its control channel to ``on_line.control(task.key, line)``, both decoded by
        launcher/backends/channel.py. Raise LaunchError if it cannot be started; once started,
        failures show as poll() codes."""

    def promote(self, handle: TaskHandle, request: StartRequest) -> None:
        """Promote a warm standby (started with ``request.standby``) to the next attempt's task:
        hand it the environment the cold start ``request`` would get, then SIGUSR1. Backends with
        ``capabilities.warm_standby`` start a standby with TFCLUSTER_STANDBY_ENV naming a file and
        write that environment there (JSON, mode 0600) just before the signal: the plan, so
        TF_CONFIG, may have changed since the standby started. Raise LaunchError if it cannot be
        promoted (then the task starts cold). Default: the signal alone."""
        handle.signal(signal.SIGUSR1)

    def port_open(self, task: PlannedTask) -> bool:
        """Whether the task's TF port accepts connections where it runs (startup watchdog).
        Must answer within a few seconds. Default True (no probe: capabilities.port_probe)."""
        return True

    def signal_tasks(self, handles: Sequence[TaskHandle], sig: int) -> None:
        """Send ``sig`` to each of ``handles`` (``stop``'s way to signal). Default: one
        ``TaskHandle.signal`` each; a backend that can signal many at once overrides it."""
        for h in handles:
            h.signal(sig)

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0,
             saved: Optional[Callable[[str], bool]] = None) -> list[str]:
        """SIGTERM every task, SIGKILL what is left after ``grace`` seconds (at once if 0);
        ``saved(key)``: whether that task said its agreed save is written (tfcluster-preempted):
        once every task still running has, what is left of ``grace`` is SAVED_LINGER.

        Returns the keys still not confirmed dead after ``deadline`` more seconds.
        """
        alive = [h for h in handles if h.poll() is None]
        if grace > 0 and alive:
            self.signal_tasks(alive, signal.SIGTERM)
            alive = still_running(alive, grace, 0.05, saved)
        # Also for tasks whose leader already exited: stragglers in their group die too.
        self.signal_tasks(handles, signal.SIGKILL)
        return [h.key for h in still_running(alive, deadline, 0.02)]

    def use_plan(self, plan: Plan) -> None:
        """The supervisor moved tasks to other hosts (launcher/plan/elastic.py): the plan the next
        attempts run. E.g. the ssh backend's state copy then targets the new hosts."""

    def prepare_attempt(self, number: int) -> None:
        """Called by the supervisor before it starts attempt ``number`` (0 = the first, also when
        ``up`` resumes an earlier run). E.g. the ssh backend copies the chief's latest backup to
        hosts that do not share its state dir. Raise LaunchError (one line per problem, naming
        the host) to fail the attempt; AttemptImpossible where no attempt can run any more."""

    def collect_results(self) -> None:
        """Called once after a successful run, every task stopped: bring results (the final
        model) back to this machine when they are elsewhere. Raise LaunchError on failure."""

    def close(self) -> None:
        """Let go of what the run's tasks hold (their processes, containers, streams); called
        once every task is stopped, before ``Hosts.close``. Must not raise."""


@dataclass(frozen=True)
class Backend:
    """One run's backend, as ``BackendKind.from_spec`` makes it: its two seams and its kind (the
    name and capabilities callers ask). The seams of one backend share what both need through a
    small object of the backend's own (the ssh pool, the slurm job), never through each other."""

    kind: type[BackendKind]
    hosts: Hosts
    tasks: Tasks

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def capabilities(self) -> Capabilities:
        return self.kind.capabilities

    @property
    def detach_note(self) -> str:
        return self.kind.detach_note

    def close(self) -> None:
        """The tasks' side, then the hosts' (connections, the allocation), each once."""
        try:
            self.tasks.close()
        finally:
            self.hosts.close()


def accepts(address: str, port: int, timeout: float = 0.5) -> bool:
    """Whether ``address:port`` takes a TCP connection within ``timeout`` seconds (``port_open``
    where the port is reachable from this machine)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False
