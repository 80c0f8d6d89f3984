"""What every event of the run record is built on: the kinds' words (``Event``), the base class
``RecordEvent`` (a frozen dataclass written as one line of events.jsonl, and a read-only Mapping
of that line), the field types (``Count``, ``Seconds``, ``JSON``) and the check of a value read
back against its field's type (``check_value``): ``parse_event`` (record/events.py) checks every
line's fields with it, ``check_fields`` a record file's object (launcher.json), ``fields_conform``
a snapshot's view. A value tfcluster never writes is ``RunRecordDamaged``, one line. The kinds'
classes are in record/events.py (the run, its attempts and tasks), record/hostevents.py (hosts
and the backends' own) and record/supervisorevents.py (the supervisor's own steps and verdicts)."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
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
    ZYGOTE_ENDED = "zygote_ended"
    ZYGOTE_WARM = "zygote_warm"
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
    # The supervisor's own steps and verdicts (record/supervisorevents.py).
    ATTEMPT_ENDED = "attempt_ended"
    STOP_REQUESTED = "stop_requested"
    TASKS_STOPPING = "tasks_stopping"
    GAVE_UP = "gave_up"
    RESULTS_NOT_COLLECTED = "results_not_collected"
    GROUP_STALLED = "group_stalled"
    PROCESS_STOPPED = "process_stopped"
    RESTART_FAILED = "restart_failed"
    OUTPUT_FAULT = "output_fault"
    GPU_WATCH_ENDED = "gpu_watch_ended"
    STANDBY_FAILED = "standby_failed"
    STANDBY_NO_ROOM = "standby_no_room"
    SMALL_START = "small_start"
    RECONCILED = "reconciled"
    HOSTS_AWAITED = "hosts_awaited"
    HOSTS_ANSWER = "hosts_answer"
    REGROUP = "regroup"


class RunRecordDamaged(LaunchError):
    """A file of the run record cannot be read as what it should be: one line, ``run record
    damaged: ...`` naming the file, the line and the field (exit 1)."""


# ------------------------------------------------------------------ field types

NONNEG = "non-negative"  # an Annotated mark: the number is >= 0
Count = Annotated[int, NONNEG]  # attempts, pids, offsets, bytes
Seconds = Annotated[float, NONNEG]  # durations
JSON = Any  # any JSON value (finite numbers only); its shape is the writer's


class BadValue(Exception):
    """A field's value is not what its type says (caught and worded by ``parse_event`` and the
    checks below)."""


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


# ------------------------------------------------------------------ checking


def check_fields(data: dict[str, Any], hints: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``data`` (a record file's object: launcher.json) with each field ``hints`` names checked as
    an event's are (None and absent alike pass); RunRecordDamaged naming ``where`` and the field."""
    for name, hint in hints.items():
        value = data.get(name)
        if value is None:
            continue
        try:
            data[name] = check_value(value, hint)
        except BadValue as exc:
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
            check_value(getattr(obj, name, None), hint)
        except BadValue as exc:
            return f"{name}: {exc}"
        except (TypeError, RecursionError):
            continue  # (an annotation this does not check: a class of its own)
    return None


_HINTS: dict[type, dict[str, Any]] = {}
# Hints whose value of exactly that type passes as it is (a float: when finite).
_SIMPLE: dict[Any, type] = {str: str, int: int, float: float, bool: bool, Optional[str]: str, Optional[int]: int,
                            Optional[float]: float}  # (not Count, Seconds: their range is checked too)


def field_hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        got = _HINTS[cls] = {name: hint for name, hint in typing.get_type_hints(cls, include_extras=True).items()
                             if typing.get_origin(hint) is not ClassVar}  # (KIND, FLAT, a kind's own words)
    return got


def check_value(value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` says (an int where a float goes becomes a float); BadValue otherwise."""
    # (the common cases first, without typing's introspection: a record has many events)
    kind = _SIMPLE.get(hint)
    if kind is not None and type(value) is kind:
        if kind is float and not math.isfinite(value):
            raise BadValue(f"{value!r} where a finite number goes")
        return value
    return _check_hint(value, hint)


def _check_hint(value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        inner, *marks = typing.get_args(hint)
        got = check_value(value, inner)
        if NONNEG in marks and got < 0:
            raise BadValue(f"{got!r} is negative")
        return got
    if hint is Any:
        return _json(value)
    if origin is Union:
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        some = [a for a in args if a is not type(None)]
        if len(some) == 1:
            return check_value(value, some[0])
        for arg in args:
            if arg is type(None):
                continue
            try:
                return check_value(value, arg)
            except BadValue:
                continue
        raise BadValue(f"{_what(value)} where {' or '.join(_name(a) for a in some)} goes")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise BadValue(f"{_what(value)} where true or false goes")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise BadValue(f"{_what(value)} where a whole number goes")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise BadValue(f"{value!r} where a finite number goes")
            return float(value)
        raise BadValue(f"{_what(value)} where a number goes")
    if hint is str:
        if isinstance(value, str):
            return value
        raise BadValue(f"{_what(value)} where text goes")
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise BadValue(f"{_what(value)} where a list goes")
        return [check_value(v, item) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint)
        if not isinstance(value, dict):
            raise BadValue(f"{_what(value)} where an object goes")
        return {k: check_value(v, item) for k, v in value.items()}
    raise TypeError(f"no check for {hint!r}")  # (a field type this module forgot: a bug, not damage)


def _json(value: Any) -> Any:
    """Any JSON value, its numbers finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise BadValue(f"{value!r} where a finite number goes")
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
