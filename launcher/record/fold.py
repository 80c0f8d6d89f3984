"""A task's state machine, and the one fold of a run's events into it.

The live panel (``RunModel``, record/view.py), ``status`` (``load_run``, record/status.py) and the
final report (launcher/ui/report.py, from the supervisor's ``RunModel``) all read a task's state from
here: ``step`` applies one event, ``fold`` a whole record's, ``on_line`` what a task's output says.
Pure: no IO, no clock.

A task's ``state`` (record/states.py: ``TaskState``)::

    state        entered on                                          from
    -----------  --------------------------------------------------  ---------------------------------
    pending      (a task of the plan no event has named yet)          -
    starting     ``start`` (a process started for it)                 any
    running      ``ready`` (its TF port answers) for the task, or     starting
                 ``attempt_ready`` for its attempt, or a parameter-
                 server ``server`` line in its output
    restarting   ``restart`` (every task: the group's next attempt)   any
                 or ``task_restart`` (that task alone)
    succeeded    ``exit`` with code 0                                 any
    failed       ``exit`` with another code (``exit_code``), or       any (exit);
                 named by a ``failure`` (``reason``)                  not ended (failure)
    stopped      ``stopped`` (stopped at the attempt's end)           not ended
                 ``outcome`` (the run ended: what had not)            starting, running, restarting
    gone         ``lose``: the run's supervisor is lost and the       starting, running
                 task's process is gone too (only ``status`` can
                 tell: it looks at this machine's processes)

"Ended": succeeded, failed, stopped, gone (``ENDED``); "live": starting, running (``LIVE``: a
process that may be running). A ``start`` clears ``exit_code``, ``reason`` and ``phase``.

A live task's ``phase`` (``TaskPhase``) is what its output says it is doing, shown by the live
panel instead of the state: importing (a first line while starting), training (a progress line
of the training: start, step, epoch, ...), evaluating (an evaluator's eval line). "" until a
line says; entering running ends importing. The record alone (``status``) has no phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, MutableMapping, Optional, TypeVar

from launcher.contract import progress
import launcher.record.events as ev
from launcher.record.events import RecordEvent
from launcher.record.states import TaskPhase, TaskState

PENDING, STARTING, RUNNING, RESTARTING = TaskState.PENDING, TaskState.STARTING, TaskState.RUNNING, TaskState.RESTARTING
SUCCEEDED, FAILED, STOPPED, GONE = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.GONE
LIVE = (STARTING, RUNNING)
ENDED = (SUCCEEDED, FAILED, STOPPED, GONE)
# Progress lines (launcher/contract/progress.py kinds) that mean the task is running training steps.
# The progress lines that say a task trains (launcher/contract/progress.py's kinds).
TRAINING = (progress.StartLine, progress.FirstStepLine, progress.StepLine, progress.EpochLine, progress.CheckpointLine, progress.SavingLine,
            progress.PreemptedLine, progress.SavedLine, progress.ResultLine)


@dataclass
class TaskLife:
    """What the machine keeps of one task (``TaskView`` adds the figures its output gives)."""

    key: str
    host: str = ""
    state: str = PENDING
    phase: str = ""  # TaskPhase, or "" (see the module docstring)
    attempt: Optional[int] = None  # the 0-based attempt of its last start, as the record numbers it; None: not started
    starts: int = 0  # processes started for it (group attempts and restarts on its own)
    exit_code: Optional[int] = None  # of its last exit (or of the process a ``stopped`` found ended)
    reason: str = ""  # why it failed, when a ``failure`` named it

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def shown(self) -> str:
        """The word the live panel shows: a live task's phase, else its state."""
        return self.phase if self.phase and self.state in LIVE else self.state


T = TypeVar("T", bound=TaskLife)


def step(tasks: MutableMapping[str, T], event: RecordEvent, new: Callable[[str], T]) -> Optional[T]:
    """Apply one event (record/events.py's class, as record/reader.py parses each line) to
    ``tasks`` (key -> task; ``new(key)`` adds one the event names that is not there yet). Returns
    the task a ``start`` started (its caller resets what belongs to the previous process), else
    None. Other kinds change no task state."""
    if isinstance(event, ev.GroupRestart):
        for t in tasks.values():
            t.state = RESTARTING
        return None
    if isinstance(event, ev.AttemptReady):
        for t in tasks.values():
            if t.state == STARTING and event.attempt is not None and t.attempt == event.attempt:
                _enter_running(t)
        return None
    if isinstance(event, ev.RunOutcome):
        for t in tasks.values():
            if t.state in LIVE or t.state == RESTARTING:
                t.state = STOPPED
        return None
    if not isinstance(event, _TASK_CLASSES) or not event.task:
        return None
    t = tasks.get(event.task)
    if t is None:
        t = tasks[event.task] = new(event.task)
    if isinstance(event, ev.Start):
        t.host = event.host or t.host
        t.attempt = event.attempt
        t.starts += 1
        t.state, t.phase, t.exit_code, t.reason = STARTING, "", None, ""
        return t
    if isinstance(event, ev.Ready):
        if t.state == STARTING:
            _enter_running(t)
    elif isinstance(event, ev.Exit):
        t.exit_code = event.code
        t.state = SUCCEEDED if t.exit_code == 0 else FAILED
    elif isinstance(event, ev.Stopped):
        if t.state not in ENDED:
            t.state = STOPPED
            t.exit_code = event.code
    elif isinstance(event, ev.Failure):
        t.reason = event.reason
        if t.state not in ENDED:
            t.state = FAILED
    elif isinstance(event, ev.TaskRestart):
        t.state = RESTARTING
    return None


_TASK_CLASSES = (ev.Start, ev.Ready, ev.Exit, ev.Stopped, ev.Failure, ev.TaskRestart)
# Every class ``step`` acts on: a new kind that moves a task's state is added to ``step`` and here,
# and nowhere else (RunModel feeds exactly these to ``step``).
STATE_CLASSES = (*_TASK_CLASSES, ev.GroupRestart, ev.AttemptReady, ev.RunOutcome)
STATE_KINDS = tuple(cls.KIND for cls in STATE_CLASSES)


def on_line(t: TaskLife, p: Optional[progress.Progress]) -> None:
    """A line of ``t``'s output arrived; ``p``: its progress record (launcher/contract/progress.py), None
    for any other line."""
    if t.state == STARTING and not t.phase:
        t.phase = TaskPhase.IMPORTING
    if p is None or t.state in ENDED:
        return
    if isinstance(p, TRAINING):
        t.phase = TaskPhase.TRAINING
    elif isinstance(p, progress.EvalLine):
        t.phase = TaskPhase.EVALUATING
    elif isinstance(p, progress.ServerLine) and t.state == STARTING:
        _enter_running(t)


def lose(t: TaskLife, alive: bool) -> None:
    """The run's supervisor is lost: a live task whose process is gone (``alive`` false) is GONE."""
    if t.state in LIVE and not alive:
        t.state = GONE


def fold(events: Iterable[RecordEvent], keys: Iterable[str] = ()) -> dict[str, TaskLife]:
    """Each task's state after ``events`` (in order): the plan's tasks ``keys`` first (pending
    until an event names them), then any other task an event names."""
    tasks: dict[str, TaskLife] = {key: TaskLife(key) for key in keys}
    for event in events:
        step(tasks, event, TaskLife)
    return tasks


def _enter_running(t: TaskLife) -> None:
    t.state = RUNNING
    if t.phase == TaskPhase.IMPORTING:
        t.phase = ""
