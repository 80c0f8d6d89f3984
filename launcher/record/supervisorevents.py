"""The run record's events about the supervisor's own steps and verdicts (record/events.py holds
those of the run, its attempts and its tasks; record/hostevents.py the hosts' and the backends'):
what it does to the group (stops it, gives up, restarts a task alone and fails to), what it found
(a stall, an attempt's end, a task's output it can no longer log), the warm standbys it could not
use, and the elastic membership's waits, answers and regroupings. Each is a fact the supervisor
writes as it acts; what a person reads of it is launcher/ui/eventlines.py's to say (the console
is a listener on the record, and ``attach`` renders the same events from events.jsonl).
Readers reach them as ``launcher.record.events``' names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from launcher.record.eventbase import Count, Event, RecordEvent, Seconds


@dataclass(frozen=True, kw_only=True)
class AttemptEnded(RecordEvent):
    """Attempt ``attempt`` ended (its watch over; its tasks are stopped next): when it ``began``
    and ``ended`` (seconds since the epoch), its ``state`` (record/states.py's AttemptState) and,
    when it failed, the ``task`` blamed and the ``reason`` (the final report's row per attempt)."""

    KIND: ClassVar[str] = Event.ATTEMPT_ENDED
    attempt: Count = 0
    began: Optional[float] = None
    ended: Optional[float] = None
    state: str = ""
    task: Optional[str] = None
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class StopRequested(RecordEvent):
    """A stop was asked for (Ctrl-C, SIGTERM, ``tfcluster down``, a closed terminal): every task
    is stopped, gracefully until a second one. ``reason``: why, when not a Ctrl-C."""

    KIND: ClassVar[str] = Event.STOP_REQUESTED
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class TasksStopping(RecordEvent):
    """``tasks`` are being stopped: SIGTERM then SIGKILL after ``grace`` s (0: SIGKILL at once).
    ``save_look``: a failed attempt's survivors, whose save is awaited when they start one within
    that many seconds (up to ``grace``, watchdog.stop_grace)."""

    KIND: ClassVar[str] = Event.TASKS_STOPPING
    tasks: list[str] = field(default_factory=list)
    grace: Seconds = 0.0
    save_look: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class GaveUp(RecordEvent):
    """The restart policy ends the run: ``task``'s failure is not one a restart fixes (``reason``
    says why), or (``task`` None) restart.max_restarts is spent. ``final``: the failure's own line
    said it all (an attempt that cannot be made again)."""

    KIND: ClassVar[str] = Event.GAVE_UP
    task: Optional[str] = None
    reason: str = ""
    final: bool = False


@dataclass(frozen=True, kw_only=True)
class ResultsNotCollected(RecordEvent):
    """The run succeeded but its results could not be brought back here (``problems``, one line
    each): the run fails."""

    KIND: ClassVar[str] = Event.RESULTS_NOT_COLLECTED
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ProcessStopped(RecordEvent):
    """``task``'s process was stopped by a signal for ``seconds`` (its wrapper's word), past
    watchdog.stopped_timeout (``limit``): ``killed``, to be restarted alone (a parameter_server
    worker, the evaluator), or not (its death fails the group: the failure follows)."""

    KIND: ClassVar[str] = Event.PROCESS_STOPPED
    task: str
    seconds: Seconds = 0.0
    limit: Seconds = 0.0
    killed: bool = False


@dataclass(frozen=True, kw_only=True)
class GroupStalled(RecordEvent):
    """The hang watchdog saw the group stop progressing: ``tasks`` made no progress for ``idle``
    s, past ``limit`` s (``what``: which limit, in words); every task's stacks are taken next.
    ``counts``: each task's count of TensorFlow calls then, as its last beat said (the evidence
    the verdict weighs beside the stacks, launcher/supervise/stuck.py)."""

    KIND: ClassVar[str] = Event.GROUP_STALLED
    tasks: list[str] = field(default_factory=list)
    idle: Seconds = 0.0
    limit: Seconds = 0.0
    what: str = ""
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RestartFailed(RecordEvent):
    """Restarting ``task`` alone (a sidecar) failed: ``problem``, the start's first line."""

    KIND: ClassVar[str] = Event.RESTART_FAILED
    task: str
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class OutputFault(RecordEvent):
    """Handling a line of ``task``'s (its output, ``what`` "output", or its control channel,
    "control") failed with ``error`` (a full disk, a closed terminal): that line is lost, the task
    is still read and the run goes on (launcher/supervise/output.py). At most a few per task are
    written; ``first`` is the first (the one the console says)."""

    KIND: ClassVar[str] = Event.OUTPUT_FAULT
    task: str
    what: str = "output"
    error: str = ""
    first: bool = True


@dataclass(frozen=True, kw_only=True)
class GpuWatchEnded(RecordEvent):
    """nvidia-smi did not answer ``misses`` times in a row (each within ``timeout`` s): no more
    gpu_usage events this run."""

    KIND: ClassVar[str] = Event.GPU_WATCH_ENDED
    misses: Count = 0
    timeout: Seconds = 0.0


@dataclass(frozen=True, kw_only=True)
class StandbyFailed(RecordEvent):
    """``task`` gets no warm standby this time, and starts cold: at ``stage`` ``start`` (its
    standby could not be started: ``why``), ``promote`` (its promotion failed: ``why``) or
    ``answer`` (promoted, it did not say so within ``within`` s)."""

    KIND: ClassVar[str] = Event.STANDBY_FAILED
    START: ClassVar[str] = "start"
    PROMOTE: ClassVar[str] = "promote"
    ANSWER: ClassVar[str] = "answer"
    task: str
    stage: str = ""
    why: str = ""
    within: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class StandbyNoRoom(RecordEvent):
    """Hosts short of memory for their warm standbys get none: per host, the bytes ``free`` and
    the standby ``processes`` it would have held; each needs ``each`` bytes, and a host keeps
    ``reserve`` bytes besides."""

    KIND: ClassVar[str] = Event.STANDBY_NO_ROOM
    free: dict[str, Count] = field(default_factory=dict)
    processes: dict[str, Count] = field(default_factory=dict)
    each: Count = 0
    reserve: Count = 0


@dataclass(frozen=True, kw_only=True)
class SmallStart(RecordEvent):
    """A worker group with a min starts with ``size`` of ``of`` workers (``why``); it grows as hosts
    answer for ``settle`` s (elastic.settle), or as discovery.command finds them (``discovery``)."""

    KIND: ClassVar[str] = Event.SMALL_START
    size: Count = 0
    of: Count = 0
    why: str = ""
    settle: Seconds = 0.0
    discovery: bool = False


@dataclass(frozen=True, kw_only=True)
class Reconciled(RecordEvent):
    """What the membership's reconciliation (launcher/plan/reconcile.py) decided, where it has
    words of its own (``line``): ``act`` ``end`` (the run ends: the outcome's reason), ``go_on``
    (hosts back that the group cannot grow onto) or ``keep`` (a note on the plan in use)."""

    KIND: ClassVar[str] = Event.RECONCILED
    END: ClassVar[str] = "end"
    GO_ON: ClassVar[str] = "go_on"
    KEEP: ClassVar[str] = "keep"
    act: str = ""
    line: str = ""


@dataclass(frozen=True, kw_only=True)
class HostsAwaited(RecordEvent):
    """No spare host for ``tasks``: the run waits up to ``wait`` s (elastic.host_wait) for the lost
    ``hosts`` (``said``: their losses in words) to settle, then restarts the group on them."""

    KIND: ClassVar[str] = Event.HOSTS_AWAITED
    hosts: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    said: str = ""
    wait: Seconds = 0.0


@dataclass(frozen=True, kw_only=True)
class HostsAnswer(RecordEvent):
    """Lost ``hosts`` answered for ``settle`` s without a break: usable again, or (``restart``)
    the group awaiting them restarts on them from the last backup."""

    KIND: ClassVar[str] = Event.HOSTS_ANSWER
    hosts: list[str] = field(default_factory=list)
    settle: Seconds = 0.0
    restart: bool = False


@dataclass(frozen=True, kw_only=True)
class Regroup(RecordEvent):
    """The running group stops gracefully (its workers save the step they agree on) for a
    membership change: to move ``moving`` (their hosts gone from discovery's list), or, with none
    to move, to grow onto hosts back."""

    KIND: ClassVar[str] = Event.REGROUP
    moving: list[str] = field(default_factory=list)


SUPERVISOR_KINDS: tuple[type[RecordEvent], ...] = (
    AttemptEnded, StopRequested, TasksStopping, GaveUp, ResultsNotCollected, GroupStalled, ProcessStopped, RestartFailed, OutputFault,
    GpuWatchEnded, StandbyFailed, StandbyNoRoom, SmallStart, Reconciled, HostsAwaited, HostsAnswer, Regroup)

