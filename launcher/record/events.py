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
never on the line's ``"event"`` key (tests/unit/record/test_record_vocabulary.py lists the few
left: record/fold.py, record/goodput.py). Each event is also a read-only Mapping of its line
(``e["task"]``, ``e.get("code")``) for those, which read the validated values.

Attempts are numbered one way everywhere: ``attempt`` is the 0-based index of the attempt the event
belongs to (the first is 0, the value of TFCLUSTER_RESTART_COUNT); ``restart`` and ``replan`` name
the attempt they begin. ``attempts`` (outcome) is a count. Readers that show a number to a person
add 1 where they say "attempt N" (record/run.py's ``RunModel``, the ``status`` table).

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
state dir), slurm_submitted, slurm_running, slurm_cancelled (Slurm's allocation), standby_stopped.
A new kind goes here first: its ``Event`` word and its class (``KINDS`` maps one to the other).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Iterator, Optional, Union

from launcher.bounded import shown
from launcher.errors import LaunchError
from launcher.record._vocabulary import Word


class Event(Word):
    RUN_START = "run_start"
    START = "start"
    READY = "ready"
    ATTEMPT_READY = "attempt_ready"
    EXIT = "exit"
    SIDECAR_FAILED = "sidecar_failed"
    FAILURE = "failure"
    RESTART = "restart"
    TASK_RESTART = "task_restart"
    STOPPED = "stopped"
    STOP_UNCONFIRMED = "stop_unconfirmed"
    STANDBY_START = "standby_start"
    STANDBY_PROMOTED = "standby_promoted"
    STANDBY_STOPPED = "standby_stopped"
    HOST_LOST = "host_lost"
    REPLAN = "replan"
    HOST_ADDED = "host_added"
    HOST_WAIT = "host_wait"
    HOST_PREEMPTED = "host_preempted"
    DISCOVERY = "discovery"
    OUTCOME = "outcome"
    STATE_SYNC = "state_sync"
    STATE_COPY = "state_copy"
    STATE_FETCH = "state_fetch"
    SLURM_SUBMITTED = "slurm_submitted"
    SLURM_RUNNING = "slurm_running"
    SLURM_CANCELLED = "slurm_cancelled"
    GPU_USAGE = "gpu_usage"
    TASK_GPUS = "task_gpus"
    STRAGGLER = "straggler"


class RunRecordDamaged(LaunchError):
    """A file of the run record cannot be read as what it should be: one line, ``run record
    damaged: ...`` naming the file, the line and the field (exit 1)."""


# ------------------------------------------------------------------ field types

NONNEG = "non-negative"  # an Annotated mark: the number is >= 0
Count = Annotated[int, NONNEG]  # attempts, pids, offsets, bytes
Seconds = Annotated[float, NONNEG]  # durations
JSON = Any  # any JSON value (finite numbers only); its shape is the writer's


class _Bad(Exception):
    """A field's value is not what its type says (caught and worded by ``parse_event``)."""


# ------------------------------------------------------------------ the base


@dataclass(frozen=True, kw_only=True)
class RecordEvent(Mapping):
    """One line of events.jsonl. ``time``: when it was written (seconds since the epoch; None
    until ``RunRecord.write`` stamps it)."""

    KIND: ClassVar[str] = ""
    FLAT: ClassVar[Optional[str]] = None  # a dict field whose keys are written into the line itself
    time: Optional[float] = None

    @property
    def kind(self) -> str:
        return self.KIND

    def to_json(self) -> dict[str, Any]:
        """The line as written: time, event, then every field that is not None."""
        out: dict[str, Any] = {"time": self.time, "event": _plain(self.kind)}
        for f in dataclasses.fields(self):
            if f.name == "time":
                continue
            value = getattr(self, f.name)
            if f.name == self.FLAT:
                out.update({k: v for k, v in (value or {}).items() if k not in out})
            elif value is not None:
                out[f.name] = _plain(value)
        return out

    # Mapping: the line's keys (readers written against the plain lines read the checked values).
    def __getitem__(self, key: str) -> Any:
        return self._line[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._line)

    def __len__(self) -> int:
        return len(self._line)

    @property
    def _line(self) -> dict[str, Any]:
        line = self.__dict__.get("_line_cache")
        if line is None:
            line = self.to_json()
            object.__setattr__(self, "_line_cache", line)
        return line

    def stamped(self, at: float) -> "RecordEvent":
        return dataclasses.replace(self, time=at)


def _plain(value: Any) -> Any:
    """A value as JSON holds it (tuples as lists, words as their strings)."""
    if isinstance(value, Word):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


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


@dataclass(frozen=True, kw_only=True)
class Restart(RecordEvent):
    KIND: ClassVar[str] = Event.RESTART
    attempt: Optional[Count] = None  # the attempt it begins
    delay: Seconds = 0.0
    after: Optional[str] = None  # the task whose failure it follows
    reason: str = ""
    ports: Optional[dict[str, Optional[Count]]] = None  # a restart on fresh ports: each task's new port


@dataclass(frozen=True, kw_only=True)
class TaskRestart(RecordEvent):
    KIND: ClassVar[str] = Event.TASK_RESTART
    task: str
    code: Optional[int] = None
    restart: Optional[Count] = None


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
class HostLost(RecordEvent):
    """``suspect``: the host's session was lost or it does not answer; it is used again once it
    answers for ``settle`` s without a break. False: gone for good (dropped from discovery's list)."""

    KIND: ClassVar[str] = Event.HOST_LOST
    host: str
    how: str = ""
    suspect: bool = False
    attempt: Optional[Count] = None
    settle: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class Replan(RecordEvent):
    KIND: ClassVar[str] = Event.REPLAN
    plan: Optional[Count] = None  # 2, 3, ...: plan-N.json
    attempt: Optional[Count] = None  # the attempt it begins
    file: str = ""
    lost: list[str] = field(default_factory=list)
    old_hosts: list[str] = field(default_factory=list)
    new_hosts: list[str] = field(default_factory=list)
    moved: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> {"from": host, "to": host}
    dropped: list[str] = field(default_factory=list)
    added: dict[str, str] = field(default_factory=dict)  # grow: key -> host
    tasks: Optional[list[str]] = None  # the group after it


@dataclass(frozen=True, kw_only=True)
class HostAdded(RecordEvent):
    KIND: ClassVar[str] = Event.HOST_ADDED
    host: str
    attempt: Optional[Count] = None
    settle: Optional[Seconds] = None
    spare: bool = True


@dataclass(frozen=True, kw_only=True)
class HostWait(RecordEvent):
    """Fewer than ``tasks.worker.min`` workers can run: the run waits for ``hosts`` until ``until``
    (the time, elastic.host_wait = ``wait`` s after the wait began); ``have`` workers could run,
    ``need`` (the min) must. ``attempt``: the attempt that waits (None: before the first, at the
    preflight). The wait ends with the next attempt's start (or a replan, or the outcome)."""
    KIND: ClassVar[str] = Event.HOST_WAIT
    hosts: list[str] = field(default_factory=list)
    have: Count = 0
    need: Count = 0
    until: Seconds = 0.0
    wait: Seconds = 0.0
    attempt: Optional[Count] = None


@dataclass(frozen=True, kw_only=True)
class HostPreempted(RecordEvent):
    KIND: ClassVar[str] = Event.HOST_PREEMPTED
    host: str


@dataclass(frozen=True, kw_only=True)
class Discovery(RecordEvent):
    KIND: ClassVar[str] = Event.DISCOVERY
    ok: bool = True
    problem: Optional[str] = None  # (a failed answer: no added, no gone)
    added: Optional[list[str]] = None
    gone: Optional[list[str]] = None


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
class StateSync(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_SYNC
    mode: str = ""
    why: str = ""
    fetch: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class StateCopy(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_COPY
    source: str = ""
    to: list[str] = field(default_factory=list)
    attempt: Optional[Count] = None
    bytes: Optional[Count] = None
    seconds: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class StateFetch(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_FETCH
    source: str = ""
    areas: list[str] = field(default_factory=list)
    bytes: Optional[Count] = None
    seconds: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class SlurmSubmitted(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_SUBMITTED
    job: str = ""
    nodes: Optional[Count] = None
    tasks_per_node: Optional[Count] = None


@dataclass(frozen=True, kw_only=True)
class SlurmRunning(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_RUNNING
    job: str = ""
    nodes: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    waited: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class SlurmCancelled(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_CANCELLED
    job: str = ""


@dataclass(frozen=True, kw_only=True)
class GpuUsage(RecordEvent):
    """Per task, ``[MiB used, utilisation %]`` (either None where nvidia-smi did not say)."""

    KIND: ClassVar[str] = Event.GPU_USAGE
    tasks: dict[str, list[Optional[Union[int, float]]]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TaskGpus(RecordEvent):
    """The GPUs a task got where it started: ``gpus`` as that machine numbers them; ``visible`` its
    CUDA_VISIBLE_DEVICES where that names UUIDs (a MIG device, a host's UUID limit), "" otherwise;
    ``collective`` the all-reduce set there for it (the ssh wrapper decides collective auto on the
    host: ``nccl``), "" where none was set (TensorFlow's AUTO: RING)."""

    KIND: ClassVar[str] = Event.TASK_GPUS
    task: str
    gpus: list[Union[int, str]] = field(default_factory=list)
    visible: str = ""
    collective: str = ""


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


@dataclass(frozen=True, kw_only=True)
class Straggler(RecordEvent):
    """``task`` is behind the others, consistently (launcher/supervise/straggler.py): ``why`` in
    words; "" once it caught up."""

    KIND: ClassVar[str] = Event.STRAGGLER
    task: str
    why: str = ""


KINDS: dict[str, type[RecordEvent]] = {cls.KIND: cls for cls in (
    RunStart, Start, Ready, AttemptReady, Exit, SidecarFailed, Failure, Restart, TaskRestart, Stopped,
    StopUnconfirmed, StandbyStart, StandbyPromoted, StandbyStopped, HostLost, Replan, HostAdded, HostWait, HostPreempted,
    Discovery, RunOutcome, StateSync, StateCopy, StateFetch, SlurmSubmitted, SlurmRunning, SlurmCancelled,
    GpuUsage, TaskGpus, Straggler)}


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
            at = _check(line.get("time"), Optional[float])
        except _Bad as exc:
            raise _Bad(f"time: {exc}") from None
        cls = KINDS.get(kind)
        if cls is None:
            return OtherEvent(time=at, other_kind=kind, fields=_check(line, dict[str, JSON]))
        hints = _hints(cls)
        values: dict[str, Any] = {}
        flat: dict[str, Any] = {}
        for name, value in line.items():
            if name in ("time", "event"):
                continue
            if name in hints and name != cls.FLAT:
                if value is None:
                    continue  # (a field left out reads the same)
                try:
                    values[name] = _check(value, hints[name])
                except _Bad as exc:
                    raise _Bad(f"{name}: {exc}") from None
            elif cls.FLAT:
                flat[name] = _check(value, JSON)
        if cls.FLAT:
            values[cls.FLAT] = flat
        if cls is HostLost and "suspect" not in line:
            # (records written before the field: the host's ``how`` said it, "... suspect until ...")
            values["suspect"] = "suspect until" in values.get("how", "")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in values and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
        if missing:
            raise _Bad(f"{missing[0]}: missing")
        return cls(time=at, **values)
    except _Bad as exc:
        raise RunRecordDamaged(f"run record damaged: {where} ({shown(kind, 40)}): {exc}; "
                               "tfcluster never writes that") from None
    except RecursionError:
        raise RunRecordDamaged(f"run record damaged: {where} is nested past Python's limit") from None


def check_fields(data: dict[str, Any], hints: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a record file's object: launcher.json) with each field ``hints`` names checked as
    an event's are (None and absent alike pass); RunRecordDamaged naming ``where`` and the field."""
    for name, hint in hints.items():
        value = data.get(name)
        if value is None:
            continue
        try:
            data[name] = _check(value, hint)
        except _Bad as exc:
            raise RunRecordDamaged(f"run record damaged: {where}: {name}: {exc}; tfcluster never writes that") from None
        except RecursionError:
            raise RunRecordDamaged(f"run record damaged: {where}: {name} is nested past Python's limit") from None
    return data


def fields_conform(obj: Any) -> Optional[str]:
    """The first field of dataclass ``obj`` whose value is not what its annotation says (checked
    as an event's are, where the annotation is one ``parse_event`` knows: numbers, text, flags,
    lists and dicts of them), as ``name: problem``; None when all conform. For values read back
    from a record's own JSON (a snapshot's view) that are not events."""
    for name, hint in typing.get_type_hints(type(obj), include_extras=True).items():
        if typing.get_origin(hint) is ClassVar or name.startswith("_"):
            continue
        try:
            _check(getattr(obj, name, None), hint)
        except _Bad as exc:
            return f"{name}: {exc}"
        except (TypeError, RecursionError):
            continue  # (an annotation this does not check: a class of its own)
    return None


_HINTS: dict[type, dict[str, Any]] = {}
# Hints whose value of exactly that type passes as it is (a float: when finite).
_SIMPLE: dict[Any, type] = {str: str, int: int, float: float, bool: bool, Optional[str]: str, Optional[int]: int,
                            Optional[float]: float}  # (not Count, Seconds: their range is checked too)


def _hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        got = _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
        got.pop("KIND", None)
        got.pop("FLAT", None)
    return got


def _check(value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` says (an int where a float goes becomes a float); _Bad otherwise."""
    # (the common cases first, without typing's introspection: a record has many events)
    kind = _SIMPLE.get(hint)
    if kind is not None and type(value) is kind:
        if kind is float and not math.isfinite(value):
            raise _Bad(f"{value!r} where a finite number goes")
        return value
    return _check_hint(value, hint)


def _check_hint(value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        inner, *marks = typing.get_args(hint)
        got = _check(value, inner)
        if NONNEG in marks and got < 0:
            raise _Bad(f"{got!r} is negative")
        return got
    if hint is Any:
        return _json(value)
    if origin is Union:
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        some = [a for a in args if a is not type(None)]
        if len(some) == 1:
            return _check(value, some[0])
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check(value, arg)
            except _Bad:
                continue
        raise _Bad(f"{_what(value)} where {' or '.join(_name(a) for a in some)} goes")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Bad(f"{_what(value)} where true or false goes")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Bad(f"{_what(value)} where a whole number goes")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Bad(f"{value!r} where a finite number goes")
            return float(value)
        raise _Bad(f"{_what(value)} where a number goes")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Bad(f"{_what(value)} where text goes")
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise _Bad(f"{_what(value)} where a list goes")
        return [_check(v, item) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint)
        if not isinstance(value, dict):
            raise _Bad(f"{_what(value)} where an object goes")
        return {k: _check(v, item) for k, v in value.items()}
    raise TypeError(f"no check for {hint!r}")  # (a field type this module forgot: a bug, not damage)


def _json(value: Any) -> Any:
    """Any JSON value, its numbers finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise _Bad(f"{value!r} where a finite number goes")
    if isinstance(value, list):
        for v in value:
            _json(v)
    elif isinstance(value, dict):
        for v in value.values():
            _json(v)
    return value


def _what(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"text {shown(value, 40)}"
    if isinstance(value, (int, float)):
        return repr(value)
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def _name(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return {int: "a whole number", float: "a number", str: "text", bool: "true or false"}.get(hint, "a value of its kind")


def _count_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
