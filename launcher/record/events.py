"""The events of a run record: one frozen dataclass per kind, each a line of ``events.jsonl``.

Written as values (``record.write(HostLost(host=..., how=..., suspect=True, ...))``, the supervisor
and the backends; ``writer.append_event(run_dir, RunOutcome(...))`` for ``tfcluster down`` of a run
whose supervisor is gone), never as keyword bags (tests/unit/record/test_record_vocabulary.py checks
every write). Read back once, by ``parse_event`` (record/reader.py calls it for every line): each
field of the wrong type or range (a string where a number goes, NaN or Infinity, a negative offset
or pid, a bool for a count) makes the record damaged, ``RunRecordDamaged``, one line
(``run record damaged: ...``), never a traceback. A kind this version does not know is kept as
``OtherEvent`` (its ``time`` checked, its fields as they are): readers skip kinds they do not know.

On disk a line is ``{"time": ..., "event": KIND, <the fields>}``; a field that is None is left
out (it reads back as None). ``Start`` and ``StandbyPromoted`` carry the backend's ``process``
facts (``TaskHandle.info()``: pid, pgid, start_time, container, slurm_job, ...) flattened into the
line, as they always were. Readers dispatch on the classes (``isinstance(e, Start)``, ``e.task``),
never on the line's ``"event"`` key: only this module and record/reader.py read it
(tests/unit/record/test_record_vocabulary.py). Each event is also a read-only Mapping of its line
(``e["task"]``, ``e.get("code")``), holding the validated values.

Attempts are numbered one way everywhere: ``attempt`` is the 0-based index of the attempt the event
belongs to (the first is 0, the value of TFCLUSTER_RESTART_COUNT); ``restart`` and ``replan`` name
the attempt they begin. ``attempts`` (outcome) is a count. Readers that show a number to a person
add 1 where they say "attempt N" (the live panel, the ``status`` table).

A run's events come in this order:

    run_start
    per attempt: start (each task; a warm standby: standby_start, standby_promoted) -> ready
        (each task's TF port open) -> attempt_ready; exit (each task), sidecar_failed (an
        evaluator), task_restart (a parameter_server worker restarted alone), failure (the
        attempt's root cause), stopped / stop_unconfirmed (tasks stopped at the attempt's end)
    restart (the next attempt, after a failure of the training)
        [elastic, instead of a restart: host_lost (a host whose session was lost or that does not
        answer: ``suspect`` until it answers for ``settle`` s), then replan (tasks moved or left
        out), or host_added with spare false (the group waited for the host and restarts on it)]
    host_wait (fewer than tasks.worker.min workers can run: the run waits up to elastic.host_wait
        for hosts, at the preflight (written before run_start, once the record exists) or after a
        host loss; it ends with the next start, replan or outcome)
    host_preempted (ssh: a task's wrapper saw GCE's preemption notice; its host is lost at once)
    zygote_ended (a host's fork server ended: started again at the next start, or its tasks cold)
    discovery (elastic: discovery.command's answer changed the hosts, or failed: ok, added, gone,
        problem)
    host_added (elastic: a lost or newly found host answered for elastic.settle s: a spare again, or
        grow: replan to a bigger group after the attempt stopped gracefully)
    outcome (last; written once, also by ``tfcluster down`` for a lost supervisor)

and in between: gpu_usage (where nvidia-smi answers, a sample of each GPU task's memory and
utilisation that changed: launcher/supervise/gpuwatch.py, or the ssh task wrapper), task_gpus (the
GPUs a task got where it started, as that machine numbers them, where the backend learns them only
there: a Slurm step, the ssh task wrapper, with the MIG device or UUIDs and the collective the
wrapper set); backends' own: state_sync, state_copy, state_fetch (ssh's
state dir), slurm_submitted, slurm_running, slurm_cancelled (Slurm's allocation), standby_stopped;
the supervisor's own steps and verdicts (record/supervisorevents.py): attempt_ended (after each
attempt's failure, before its tasks' stopped), stop_requested, tasks_stopping, gave_up,
results_not_collected, group_stalled, restart_failed, output_lost, gpu_watch_ended, standby_failed,
standby_no_room, small_start, reconciled, hosts_awaited, hosts_answer, regroup.
A new kind goes here first: its ``Event`` word (record/eventbase.py, with the base class and the
field checks) and its class, here or, for a host's or a backend's own, in record/hostevents.py
(the supervisor's own steps in record/supervisorevents.py); ``KINDS`` maps one to the other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from launcher.bounded import shown
from launcher.record.eventbase import (  # noqa: F401 (Event, RecordEvent, RunRecordDamaged: named here too)
    JSON, BadValue, Count, Event, RecordEvent, RunRecordDamaged, Seconds, check_value, field_hints)
# The host and backend kinds, named here too: readers and writers import every event from this
# module (``import launcher.record.events as ev``; ``ev.HostLost``).
from launcher.record.hostevents import (  # noqa: F401
    DiscoveryAnswer, GpuUsage, HostAdded, HostLost, HostPreempted, HostWait, Replan, SlurmCancelled, SlurmRunning,
    SlurmSubmitted, StateCopy, StateFetch, StateSyncMode, TaskGpus, ZygoteEnded, ZygoteWarm)
# The supervisor's own steps and verdicts, named here too.
from launcher.record.supervisorevents import (  # noqa: F401
    SUPERVISOR_KINDS, AttemptEnded, GaveUp, GpuWatchEnded, GroupStalled, HostsAnswer, HostsAwaited, OutputFault,
    ProcessStopped, Reconciled, Regroup, RestartFailed, ResultsNotCollected, SmallStart, StandbyFailed, StandbyNoRoom, StopRequested,
    TasksStopping)


# ------------------------------------------------------------------ the kinds


@dataclass(frozen=True, kw_only=True)
class RunStart(RecordEvent):
    KIND: ClassVar[str] = Event.RUN_START
    run_id: str = ""
    name: str = ""
    strategy: str = ""
    backend: str = ""
    tasks: list[str] = field(default_factory=list)
    run_dir: str = ""
    max_restarts: Optional[Count] = None
    warm_standby: JSON = None  # why a warm standby is (not) used
    spares: Optional[list[str]] = None  # elastic: the spec's hosts the plan does not use
    group: Optional[dict[str, JSON]] = None  # a worker group with a min: its size, of, why (plan/elastic.py)
    hosts: Optional[list[str]] = None  # the hosts the first plan uses, sorted


@dataclass(frozen=True, kw_only=True)
class Start(RecordEvent):
    KIND: ClassVar[str] = Event.START
    FLAT: ClassVar[Optional[str]] = "process"
    task: str
    attempt: Count = 0
    host: Optional[str] = None
    endpoint: Optional[str] = None
    log_offset: Optional[Count] = None  # the task's log size when it started (record/feed.py)
    output_offset: Optional[Count] = None
    progress_offset: Optional[Count] = None  # the size of its progress file (layout.progress_path) then
    process: dict[str, JSON] = field(default_factory=dict)  # TaskHandle.info(): pid, pgid, start_time, ...

    @property
    def pid(self) -> Optional[int]:
        return _count_or_none(self.process.get("pid"))

    @property
    def pgid(self) -> Optional[int]:
        return _count_or_none(self.process.get("pgid"))


@dataclass(frozen=True, kw_only=True)
class Ready(RecordEvent):
    KIND: ClassVar[str] = Event.READY
    task: str
    attempt: Optional[Count] = None
    after: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class AttemptReady(RecordEvent):
    KIND: ClassVar[str] = Event.ATTEMPT_READY
    attempt: Optional[Count] = None
    after: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class Exit(RecordEvent):
    KIND: ClassVar[str] = Event.EXIT
    task: str
    code: Optional[int] = None
    attempt: Optional[Count] = None
    how: str = ""


@dataclass(frozen=True, kw_only=True)
class SidecarFailed(RecordEvent):
    KIND: ClassVar[str] = Event.SIDECAR_FAILED
    task: str
    code: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class Failure(RecordEvent):
    KIND: ClassVar[str] = Event.FAILURE
    task: str
    reason: str = ""
    attempt: Optional[Count] = None
    code: Optional[int] = None
    last_lines: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    consequences: dict[str, JSON] = field(default_factory=dict)  # task -> its exit code (or why it ended)
    errors: list[str] = field(default_factory=list)
    hint: Optional[str] = None
    # The hang watchdog's (launcher/supervise/hangwatch.py): when the group last progressed (time
    # since the epoch; goodput counts from there to the stop as `hung`), and the culprit's stacks.
    hung_since: Optional[float] = None
    stack: list[str] = field(default_factory=list)
    max_restarts: Optional[Count] = None  # restart.max_restarts (the attempt is ``attempt`` + 1 of it + 1)
    # The hosts' sessions were lost in the attempt: the failure is the infrastructure's, and the
    # membership's line says it (the failure is recorded, not said).
    host_loss: bool = False
    # What the failure's report shows of each task it names (``task`` and its consequences): its
    # last lines, back to the TAIL-th that is not TensorFlow's known noise (the report shows the
    # last TAIL, the noise too with -v), and for the consequences their exception lines and hint.
    tails: dict[str, list[str]] = field(default_factory=dict)
    peer_errors: dict[str, list[str]] = field(default_factory=dict)
    peer_hints: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class GroupRestart(RecordEvent):
    KIND: ClassVar[str] = Event.RESTART
    attempt: Optional[Count] = None  # the attempt it begins
    delay: Seconds = 0.0
    after: Optional[str] = None  # the task whose failure it follows
    reason: str = ""
    ports: Optional[dict[str, Optional[Count]]] = None  # a restart on fresh ports: each task's new port
    restart: Optional[Count] = None  # the restarts counted against restart.max_restarts, this one included
    max_restarts: Optional[Count] = None
    # After the tasks saved for a preemption (restart.preemption_exit_codes): the preemptions so far,
    # this one included, and the exit code that asked for it; not counted against max_restarts.
    preemption: Optional[Count] = None
    code: Optional[int] = None


@dataclass(frozen=True, kw_only=True)
class TaskRestart(RecordEvent):
    """``task`` exited (``code``) and is restarted alone while training goes on: a sidecar (the
    evaluator) or a parameter_server worker; ``restart`` of ``max_restarts`` such restarts."""

    KIND: ClassVar[str] = Event.TASK_RESTART
    task: str
    code: Optional[int] = None
    restart: Optional[Count] = None
    max_restarts: Optional[Count] = None
    sidecar: bool = False


@dataclass(frozen=True, kw_only=True)
class Stopped(RecordEvent):
    KIND: ClassVar[str] = Event.STOPPED
    task: str
    code: Optional[int] = None  # None: it did not say how it ended


@dataclass(frozen=True, kw_only=True)
class StopUnconfirmed(RecordEvent):
    KIND: ClassVar[str] = Event.STOP_UNCONFIRMED
    tasks: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class StandbyStart(RecordEvent):
    KIND: ClassVar[str] = Event.STANDBY_START
    attempt: Optional[Count] = None
    pids: dict[str, Optional[Count]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    available_mb: Optional[dict[str, Count]] = None
    spares: Optional[list[str]] = None


@dataclass(frozen=True, kw_only=True)
class StandbyPromoted(RecordEvent):
    KIND: ClassVar[str] = Event.STANDBY_PROMOTED
    FLAT: ClassVar[Optional[str]] = "process"
    task: str
    process: dict[str, JSON] = field(default_factory=dict)
    # When its promotion (the backend's: the promotion file, SIGUSR1) began and ended, epoch
    # seconds: a restart promotes every host's standbys at once, so these overlap across hosts.
    began: Optional[float] = None
    ended: Optional[float] = None


@dataclass(frozen=True, kw_only=True)
class StandbyStopped(RecordEvent):
    KIND: ClassVar[str] = Event.STANDBY_STOPPED
    tasks: list[str] = field(default_factory=list)
    reason: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class RunOutcome(RecordEvent):
    """The run's end. ``ended``: when the run ended, where that is not ``time`` (``down`` of a
    lost run writes it later)."""

    KIND: ClassVar[str] = Event.OUTCOME
    outcome: str = ""  # record/states.py's Outcome
    exit_code: Optional[int] = None  # written by older versions only: the CLI maps the outcome to one
    attempts: Optional[Count] = None
    reason: str = ""
    tasks: Optional[dict[str, dict[str, JSON]]] = None  # per task, how it ended
    locations: JSON = None
    ended: Optional[float] = None


@dataclass(frozen=True, kw_only=True)
class Straggler(RecordEvent):
    """``task`` is behind the others, consistently (launcher/supervise/straggler.py): ``why`` in
    words; "" once it caught up."""

    KIND: ClassVar[str] = Event.STRAGGLER
    task: str
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class OtherEvent(RecordEvent):
    """A kind this version does not know (a newer tfcluster's): kept, not read."""

    other_kind: str = ""
    fields: dict[str, JSON] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.other_kind

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "event": self.other_kind, **{k: v for k, v in self.fields.items()
                                                                  if k not in ("time", "event")}}


KINDS: dict[str, type[RecordEvent]] = {cls.KIND: cls for cls in (
    RunStart, Start, Ready, AttemptReady, Exit, SidecarFailed, Failure, GroupRestart, TaskRestart, Stopped,
    StopUnconfirmed, StandbyStart, StandbyPromoted, StandbyStopped, HostLost, Replan, HostAdded, HostWait, HostPreempted,
    DiscoveryAnswer, RunOutcome, StateSyncMode, StateCopy, StateFetch, SlurmSubmitted, SlurmRunning, SlurmCancelled,
    GpuUsage, TaskGpus, Straggler, ZygoteEnded, ZygoteWarm, *SUPERVISOR_KINDS)}


# ------------------------------------------------------------------ reading


def parse_event(line: Any, where: str = "an event") -> RecordEvent:
    """The event a decoded line of events.jsonl holds (a dict), checked field by field against
    its kind's class; ``RunRecordDamaged`` (one line naming ``where`` and the field) for anything
    else. A field the class does not declare is ignored (a newer tfcluster's), except in a
    ``FLAT`` kind, where it is one of the process facts."""
    if not isinstance(line, dict) or not isinstance(line.get("event"), str):
        raise RunRecordDamaged(f"run record damaged: {where} is not an event ({shown(line)})")
    kind = line["event"]
    try:
        try:
            at = check_value(line.get("time"), Optional[float])
        except BadValue as exc:
            raise BadValue(f"time: {exc}") from None
        cls = KINDS.get(kind)
        if cls is None:
            return OtherEvent(time=at, other_kind=kind, fields=check_value(line, dict[str, JSON]))
        hints = field_hints(cls)
        values: dict[str, Any] = {}
        flat: dict[str, Any] = {}
        for name, value in line.items():
            if name in ("time", "event"):
                continue
            if name in hints and name != cls.FLAT:
                if value is None:
                    continue  # (a field left out reads the same)
                try:
                    values[name] = check_value(value, hints[name])
                except BadValue as exc:
                    raise BadValue(f"{name}: {exc}") from None
            elif cls.FLAT:
                flat[name] = check_value(value, JSON)
        if cls.FLAT:
            values[cls.FLAT] = flat
        if cls is HostLost and "suspect" not in line:
            # (records written before the field: the host's ``how`` said it, "... suspect until ...")
            values["suspect"] = "suspect until" in values.get("how", "")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in values and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if missing:
            raise BadValue(f"{missing[0]}: missing")
        return cls(time=at, **values)
    except BadValue as exc:
        raise RunRecordDamaged(f"run record damaged: {where} ({shown(kind, 40)}): {exc}; "
                               "tfcluster never writes that") from None
    except RecursionError:
        raise RunRecordDamaged(f"run record damaged: {where} is nested past Python's limit") from None


def _count_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
