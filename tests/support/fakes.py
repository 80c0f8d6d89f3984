"""A fake backend to run the real ``Supervisor`` against (like torchelastic's TestAgent), its two
seams two objects as a real backend's (``scripted`` makes the run's ``Backend`` of them): tasks
follow a script (which start of which task exits with which code after how many polls, when its
port opens, what it prints), and ``prepare_attempt``/``collect_results`` fail when told to. No
TensorFlow, no processes; with ``Counter`` as the supervisor's clock, no wall-clock waits."""

from __future__ import annotations

import io
import signal
import textwrap
import threading
from dataclasses import dataclass
from typing import Mapping, Optional, Union

from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, StartRequest, TaskHandle, Tasks
from launcher.plan.hostloss import HostLoss, LossKind
from launcher.errors import exit_code_for
from launcher.ui.console import Console
from launcher.app.up import plan_for
from launcher.record.writer import RunRecord
from launcher.loader.load import parse_spec
from launcher.supervise.loop import Supervisor
from launcher.supervise.membership import HostsGiven
from tests.support.records import read_records


@dataclass(frozen=True)
class Script:
    """What one start of a task does: exit with ``code`` after ``polls`` polls (None: run until
    signalled), open its port after ``port_after`` polls (None: never), print a line on every
    poll unless ``silent``, and ``say``'s lines at their polls ((poll, line), ...)."""

    code: Optional[int] = 0
    polls: int = 3
    port_after: Optional[int] = 0
    silent: bool = False
    say: tuple[tuple[int, str], ...] = ()
    lost: bool = False  # its exit is a lost session (TaskHandle.session_lost), not its own
    going: bool = False  # its host announced it is going away before its exit (TaskHandle.host_going)
    # As a warm standby: say "tfcluster-standby ready" at its first poll (``standby_mark``), and
    # "tfcluster-standby promoted" on SIGUSR1 (``standby_ack``; False: it never answers its promotion).
    standby_mark: bool = True
    standby_ack: bool = True
    # On SIGTERM: "exit" (143 at once), "ignore" (as a worker blocked in a collective with a
    # vanished peer), or "save" (the reference worker's agreed save: "tfcluster-saving" at the
    # next poll, 143 ``save_polls`` polls later).
    term: str = "exit"
    save_polls: int = 2
    save_gate: Optional[threading.Event] = None  # set: the save may end (e.g. once a look began)
    exit_after_save: bool = True  # False: says it saved, then hangs (TensorFlow's shutdown waiting on a peer)
    exit_lag: int = 0  # polls between its saved line and its exit (TensorFlow's shutdown, quick)
    # Its wrapper's word that its process is stopped by a signal (TaskHandle.wrapper_word), at
    # this poll; running again at ``cont_at`` (None: never). A stopped task prints nothing.
    stop_at: Optional[int] = None
    cont_at: Optional[int] = None


RUN_FOREVER = Script(code=None)
EXIT_0 = Script(code=0, polls=1, silent=True)  # done at the first poll, saying nothing


class ScriptedTask(TaskHandle):
    def __init__(self, task, script: Script, on_line, attempt: int) -> None:
        super().__init__(task)
        self.script, self.on_line, self.attempt = script, on_line, attempt
        self.standby = False
        self.polls = 0
        self.code: Optional[int] = None
        self.signals: list[int] = []
        self.saving_at: Optional[int] = None  # the poll that says tfcluster-saving (term "save")

    def poll(self) -> Optional[int]:
        if self.code is None:
            self.polls += 1
            if self.polls == self.script.stop_at:
                self.wrapper_word("taskwrap: stopped: the task's process (pid 1) has been stopped by a signal")
            elif self.polls == self.script.cont_at:
                self.wrapper_word("taskwrap: running again: (pid 1)")
            if self.stopped:
                return self.code
            if not self.script.silent:
                self.speak(f"tfcluster-step attempt={self.attempt} poll={self.polls}")
            if self.polls == 1 and self.standby and self.script.standby_mark:
                self.speak("tfcluster-standby ready")
            for at, line in self.script.say:
                if at == self.polls:
                    self.speak(line)
            if self.saving_at is not None:
                if self.polls == self.saving_at:
                    self.speak(f"tfcluster-saving epoch=0 step={self.polls} global_step={self.polls}")
                gate = self.script.save_gate
                if self.polls == self.saving_at + self.script.save_polls and (gate is None or gate.is_set()):
                    self.speak(f"tfcluster-preempted epoch=0 step={self.saving_at} "
                               f"global_step={self.saving_at} saved=backup")
                    if self.script.exit_after_save and not self.script.exit_lag:
                        self.code = 128 + signal.SIGTERM
                        return self.code
                elif self.polls >= self.saving_at + self.script.save_polls + self.script.exit_lag \
                        and self.script.exit_after_save \
                        and (gate is None or gate.is_set()):
                    self.code = 128 + signal.SIGTERM
                    return self.code
            if self.script.code is not None and self.polls >= self.script.polls:
                self.code = self.script.code
                if self.script.lost:
                    self.lost_at = 1700000000.0 + self.polls  # a fixed wall time: 22:13:xx UTC
                if self.script.going:
                    self.going_at = 1700000000.0 + self.polls
        return self.code

    def speak(self, line: str) -> None:
        """A line of the task's: its protocol (``tfcluster-...``) on its control channel, as a real
        task under the wrapper says it; any other line printed."""
        (self.on_line.control if line.startswith("tfcluster-") else self.on_line.line)(self.key, line)

    lost_at: Optional[float] = None
    going_at: Optional[float] = None

    @property
    def session_lost(self) -> Optional[float]:
        return self.lost_at

    @property
    def host_going(self) -> Optional[float]:
        return self.going_at

    def signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGUSR1 and self.script.standby_ack and self.code is None:
            self.speak("tfcluster-standby promoted")
        if self.code is None and sig == signal.SIGTERM and self.script.term != "exit":
            if self.script.term == "save" and self.saving_at is None:
                self.saving_at = self.polls + 1
        elif self.code is None and sig in (signal.SIGTERM, signal.SIGKILL):
            self.code = 128 + sig

    @property
    def port_open(self) -> bool:
        return self.script.port_after is not None and self.polls >= self.script.port_after


class ScriptedTasks(Tasks):
    """The tasks' seam of a fake backend: ``scripts[(task key, n)]``: what the task's n-th start
    (0-based) does, else ``default``. ``prepare_errors[attempt]`` is raised by
    ``prepare_attempt(attempt)``, ``collect_error`` by ``collect_results``. ``calls`` lists what the
    supervisor asked, in order: ``prepare N``, ``start KEY RESTART_COUNT``, ``collect``; ``started``
    each start as (task key, TFCLUSTER_RESTART_COUNT), ``hosts_started`` as (task key, host),
    ``requests`` each start's ``StartRequest``, and ``plans`` each plan the supervisor moved the
    tasks to (``use_plan``)."""

    def __init__(self, scripts: Optional[Mapping[tuple[str, int], Script]] = None, default: Script = Script(), *,
                 prepare_errors: Optional[Mapping[int, Exception]] = None,
                 collect_error: Optional[Exception] = None) -> None:
        self.scripts, self.default = dict(scripts or {}), default
        self.prepare_errors, self.collect_error = dict(prepare_errors or {}), collect_error
        self.started: list[tuple[str, int]] = []  # (task key, TFCLUSTER_RESTART_COUNT)
        self.hosts_started: list[tuple[str, str]] = []  # (task key, host)
        self.handles: list[ScriptedTask] = []
        self.requests: list[StartRequest] = []
        self.calls: list[str] = []
        self.plans: list = []
        self.closed = False

    def prepare_attempt(self, number):
        self.calls.append(f"prepare {number}")
        if number in self.prepare_errors:
            raise self.prepare_errors[number]

    def start(self, request, on_line):
        task, env = request.task, request.env
        self.requests.append(request)
        attempt = int(env["TFCLUSTER_RESTART_COUNT"])
        self.calls.append(f"start {task.key} {attempt}")
        n = sum(1 for k, _ in self.started if k == task.key)  # the task's n-th start, 0-based
        self.started.append((task.key, attempt))
        self.hosts_started.append((task.key, task.host))
        script = self.scripts.get((task.key, n), self.default)
        handle = ScriptedTask(task, script, on_line, attempt)
        handle.standby = request.standby
        self.handles.append(handle)
        return handle

    def port_open(self, task) -> bool:
        live = [h for h in self.handles if h.key == task.key and h.code is None]
        return bool(live) and live[-1].port_open

    def use_plan(self, plan) -> None:
        self.plans.append(plan)

    def collect_results(self):
        self.calls.append("collect")
        if self.collect_error is not None:
            raise self.collect_error

    def close(self) -> None:
        self.closed = True

    def starts(self, key: str) -> list[int]:
        return [a for k, a in self.started if k == key]


class ScriptedHosts(Hosts):
    """The hosts' seam of a fake backend: after a failed attempt (an elastic run), ``losses[n]``
    are the lost hosts its n-th look reports, host -> its ``HostLoss`` or, for short, the words of
    an unreachable one (each look recorded in ``checked`` as (hosts, wait) and ``looks``, its
    ``look`` argument); hosts found by discovery are recorded in ``added``. It allocates nothing:
    ``supervise`` gives the plan."""

    def __init__(self, losses: Optional[Mapping[int, Mapping[str, Union[str, HostLoss]]]] = None) -> None:
        self.losses = dict(losses or {})
        self.checked: list[tuple[list[str], float]] = []
        self.looks: list[dict] = []
        self.added: list[str] = []
        self.closed = False

    def allocate(self, spec):
        raise AssertionError("the scripted backend allocates nothing: supervise() gives the plan")

    def lost(self, hosts, wait, stop=None, look={}):
        self.checked.append((list(hosts), wait))
        self.looks.append(dict(look))
        found = self.losses.get(len(self.checked) - 1, {})
        return {h: loss if isinstance(loss, HostLoss) else HostLoss(LossKind.UNREACHABLE, h, None, loss)
                for h, loss in found.items()}

    def add(self, hosts) -> None:
        self.added += [h.name for h in hosts]

    def close(self) -> None:
        self.closed = True


def scripted(tasks: Optional[ScriptedTasks] = None, hosts: Optional[ScriptedHosts] = None,
             **capabilities: bool) -> Backend:
    """A fake run's ``Backend``, made as a real backend's ``from_spec`` makes one: its two seams
    (``tasks``, ``hosts``: a ScriptedTasks and a ScriptedHosts unless given) and its kind, named
    ``scripted`` and capable as ``capabilities`` (``Capabilities``' fields) say. The two seams
    share nothing: each records what the supervisor asked of it."""
    kind = type("ScriptedKind", (BackendKind,), {"name": "scripted", "capabilities": Capabilities(**capabilities)})
    return Backend(kind, hosts if hosts is not None else ScriptedHosts(),
                   tasks if tasks is not None else ScriptedTasks())


class Counter:
    """A clock that advances one second per reading."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@dataclass
class Supervised:
    code: int  # the exit code the CLI gives the outcome
    err: str
    out: str
    events: list  # the record's events, typed (tests/support/records.py)
    outcome: str = ""  # what Supervisor.run returned

    @property
    def console(self) -> str:
        return self.err + self.out


def supervise(tmp_path, spec_yaml: str, backend, *, poll_interval: float = 0.0, clock=None,
              stop_after: Optional[int] = None, stop=None, standby_after_ready: float = 0.0,
              plan=None, absent: Optional[dict] = None, short_why: str = "") -> Supervised:
    """Run ``Supervisor`` on the (dedented) spec with ``backend`` (a ``Backend``), its record under
    ``tmp_path/runs``; ``clock`` is the supervisor's (None: its own, the real one; a ``Counter``
    for no wall-clock waits). ``stop_after``: interrupt once this many tasks have been started
    (``backend.tasks`` a ScriptedTasks), or call ``stop(supervisor)`` instead if given.
    ``standby_after_ready``: how long after every task is up the next attempt's standbys wait
    for a first step (0: they start then, as the scripted tasks print no real steps). ``plan``:
    the plan to start with (a function of the spec: a group that starts smaller), else the spec's;
    ``absent`` (host -> why) and ``short_why``: why it is smaller, as the preflight's findings say."""
    spec = parse_spec(textwrap.dedent(spec_yaml))
    plan = plan_for(spec) if plan is None else plan(spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    out, err = io.StringIO(), io.StringIO()
    extra = {} if clock is None else {"clock": clock}
    sup = Supervisor(plan, backend, record, spec.restart, spec.watchdog, poll_interval=poll_interval,
                     given=HostsGiven(spec=spec, absent=absent or {}, short_why=short_why), **extra)
    console = Console(out=out, err=err, color=False)
    console.verbose = True  # (the tasks' records in ``out`` as they came, ``[worker:0] tfcluster-step ...``)
    console.listen(record, sup.view)  # as app/up.py wires it
    sup.prewarm.after_ready = standby_after_ready
    if stop_after is not None:
        tasks = backend.tasks
        start = tasks.start

        def start_then_maybe_stop(request, on_line):
            handle = start(request, on_line)
            if len(tasks.started) >= stop_after:
                (stop or Supervisor.interrupt)(sup)
            return handle

        tasks.start = start_then_maybe_stop
    outcome = sup.run()
    record.close()
    events = read_records(record.dir)
    return Supervised(exit_code_for(outcome), err.getvalue(), out.getvalue(), events, outcome)
