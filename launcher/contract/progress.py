"""The progress-record format: the one place the launcher reads what tasks say about training.

A task (``python -m worker`` or a user's own script) writes records of the form::

    tfcluster-<kind> key=value key=value ...

one a line, for example ``tfcluster-epoch epoch=2 epochs=3 loss=0.4123 accuracy=0.8810``, on its
control channel: the descriptor TFCLUSTER_CONTROL_FD names (``report``; a script without tfcluster
installed: ``os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), b"tfcluster-step ...\\n")``). Values
carry no spaces. What a task prints is its output, never a record (unless the spec trusts it:
watchdog.printed_progress). The supervisor keeps each task's records in its progress file
(launcher/record/layout.py); the live view, the final report, ``tfcluster compare`` and
``tfcluster status`` all read them through ``parse``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional

PREFIX = "tfcluster-"
# Kinds only ever read from a task's control channel, also where the spec trusts printed progress
# (watchdog.printed_progress): the beats (its liveness) and a standby's protocol.
CHANNEL_ONLY = frozenset({"beat", "standby"})
# The reference worker's line when a preemption's agreed save starts (worker/preemption.py): the
# supervisor lets the task finish it instead of killing it with a lost host's group.
SAVING_LINE = PREFIX + "saving "
SAVED_LINE = PREFIX + "preempted "  # ... and the save is written: the task may be killed now


@dataclass(frozen=True)
class Progress:
    """A progress line: its ``kind`` and its fields as the task printed them (``fields``, text).
    ``parse`` gives a kind this module knows as its own class (``StepLine``, ``EpochLine``, ...: readers
    dispatch on the class, ``isinstance(p, StepLine)``), each field it declares typed (a whole number,
    a finite number or text; None where the line has none, or none that reads as one); a kind it
    does not know (a newer worker's, a user's own) as a plain ``Progress``."""

    kind: str  # "start", "step", "epoch", "result", "eval", ...
    fields: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.fields.get(name, default)

    def number(self, name: str) -> Optional[float]:
        """The field as a finite float, or None when absent or not a number."""
        raw = self.fields.get(name)
        if raw is None:
            return None
        try:
            value = float(raw.rstrip("s"))
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def integer(self, name: str) -> Optional[int]:
        value = self.number(name)
        return int(value) if value is not None else None


    @classmethod
    def of(cls, fields: Mapping[str, str]) -> "Progress":
        """The line of this class's kind with ``fields`` (text), each declared field read from them."""
        raw = cls(KIND_OF[cls], dict(fields))
        typed = {}
        for f in dataclasses.fields(cls)[2:]:
            read = _READ[f.type]
            typed[f.name] = raw.get(f.name) if read is None else read(raw, f.name)
        return dataclasses.replace(raw, **typed) if typed else raw


# The typed kinds: each declares the fields readers use, as ``Optional[int]``, ``Optional[float]``
# or ``Optional[str]``; ``fields`` keeps every field as printed (what a reader shows as it came).
_READ = {"Optional[int]": Progress.integer, "Optional[float]": Progress.number, "Optional[str]": None}


@dataclass(frozen=True)
class StartLine(Progress):
    """Training (re)starts: where (``epoch`` 0-based, ``step`` done in it, ``global_step``), the run's
    shape and the strategy the task built."""

    kind: str = "start"
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    time: Optional[float] = None
    epochs: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    global_batch: Optional[int] = None
    strategy: Optional[str] = None
    strategy_class: Optional[str] = None
    replicas: Optional[int] = None


@dataclass(frozen=True)
class FirstStepLine(Progress):
    """The attempt's first step ended: ``step`` is its index in the epoch (the others count steps done)."""

    kind: str = "first_step"
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class StepLine(Progress):
    """A heartbeat every N steps: ``epoch`` in progress (0-based), ``step`` done in it."""

    kind: str = "step"
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class EpochLine(Progress):
    """An epoch ended (``epoch``: how many are done), its metrics and examples/s."""

    kind: str = "epoch"
    epoch: Optional[int] = None
    global_step: Optional[int] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    examples_per_sec: Optional[float] = None
    test_loss: Optional[float] = None
    test_accuracy: Optional[float] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class ResultLine(Progress):
    """Training is over: the attempt's steps and examples/s, the test metrics."""

    kind: str = "result"
    task: Optional[str] = None
    epochs: Optional[int] = None
    steps_run: Optional[int] = None
    global_step: Optional[int] = None
    examples_per_sec: Optional[float] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    train_loss: Optional[float] = None
    train_accuracy: Optional[float] = None


@dataclass(frozen=True)
class EvalLine(Progress):
    """The evaluator evaluated ``checkpoint`` (at ``global_step``)."""

    kind: str = "eval"
    checkpoint: Optional[str] = None
    global_step: Optional[int] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None


@dataclass(frozen=True)
class EvalDoneLine(Progress):
    """The evaluator is done (``reason``: final, timeout) after ``evaluated`` checkpoints."""

    kind: str = "eval_done"
    reason: Optional[str] = None
    evaluated: Optional[int] = None


@dataclass(frozen=True)
class BackupLine(Progress):
    """A backup (or checkpoint) written at ``global_step`` in ``seconds`` (the run's goodput counts them)."""

    kind: str = "backup"
    global_step: Optional[int] = None
    seconds: Optional[float] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class CheckpointLine(Progress):
    """A PSS chief's checkpoint at ``global_step``."""

    kind: str = "checkpoint"
    global_step: Optional[int] = None
    path: Optional[str] = None


@dataclass(frozen=True)
class SavingLine(Progress):
    """A preemption's agreed save starts (SAVING_LINE): the task finishes it before it is killed."""

    kind: str = "saving"
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class PreemptedLine(Progress):
    """The agreed save is written (SAVED_LINE), at ``global_step``, to ``saved``."""

    kind: str = "preempted"
    epoch: Optional[int] = None
    step: Optional[int] = None
    global_step: Optional[int] = None
    saved: Optional[str] = None
    time: Optional[float] = None


@dataclass(frozen=True)
class SavedLine(Progress):
    """The model was saved at ``path``."""

    kind: str = "saved"
    path: Optional[str] = None


@dataclass(frozen=True)
class ServerLine(Progress):
    """A parameter_server strategy's server is up (a ps or worker task)."""

    kind: str = "server"
    task: Optional[str] = None


@dataclass(frozen=True)
class WorkerLostLine(Progress):
    """The PSS coordinator lost worker ``task``."""

    kind: str = "worker_lost"
    task: Optional[str] = None


@dataclass(frozen=True)
class WorkerRecoveredLine(Progress):
    """The PSS coordinator has worker ``task`` back."""

    kind: str = "worker_recovered"
    task: Optional[str] = None


@dataclass(frozen=True)
class PsLostLine(Progress):
    """The PSS coordinator lost parameter server ``task``."""

    kind: str = "ps_lost"
    task: Optional[str] = None


KINDS: dict[str, type[Progress]] = {cls.kind: cls for cls in (  # type: ignore[misc]
    StartLine, FirstStepLine, StepLine, EpochLine, ResultLine, EvalLine, EvalDoneLine, BackupLine, CheckpointLine,
    SavingLine, PreemptedLine, SavedLine, ServerLine, WorkerLostLine, WorkerRecoveredLine, PsLostLine)}
KIND_OF: dict[type[Progress], str] = {cls: kind for kind, cls in KINDS.items()}


def parse(line: str) -> Optional[Progress]:
    """The progress record in ``line`` (of its kind's class, where this module knows the kind),
    or None if it is not a progress line."""
    text = line.strip()
    if not text.startswith(PREFIX):
        return None
    head, _, rest = text.partition(" ")
    kind = head[len(PREFIX):]
    if not kind or not all(c.isalnum() or c == "_" for c in kind):
        return None
    fields: dict[str, str] = {}
    for token in rest.split():
        key, sep, value = token.partition("=")
        if sep and key:
            fields[key] = value
    cls = KINDS.get(kind)
    return cls.of(fields) if cls is not None else Progress(kind, fields)


def report(line: str) -> None:
    """``line`` (a record, ``format_line``'s) on this task's control channel; printed on stdout where
    it has none (run outside tfcluster, or in band: docs/concepts/trust.md)."""
    from launcher.contract import liveness

    if liveness.channel() is None:
        print(line, flush=True)
    else:
        liveness.say(line)


def format_line(kind: str, **fields) -> str:
    """The line ``parse`` reads back (used by the worker's ``emit`` and by tests)."""
    parts = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{PREFIX}{kind} {parts}".rstrip()


# A step line exactly as the worker prints it, every value well formed (accuracy within [0, 1]).
# Groups: global_step, the loss and accuracy (or none), time.
_STEP_PREFIX = PREFIX + "step "
_PLAIN_STEP = re.compile(r"tfcluster-step epoch=\d+ step=\d+ global_step=(\d+)"
                         r"( loss=\d+(?:\.\d+)? accuracy=(?:0(?:\.\d+)?|1(?:\.0+)?))? time=(\d+(?:\.\d+)?)")


def step_shape(line: str) -> Optional[tuple[bool, int, float]]:
    """(has loss and accuracy, global step, time) of a step line in the worker's own format, read
    without ``parse`` (about 2.5 µs a line: ``RunModel.lines`` skips the step lines the next one
    overwrites, bench/status_replay.py); None for any other line, a step line in another format
    included. ``parse`` reads the same values from a line this accepts."""
    if not line.startswith(_STEP_PREFIX):
        return None
    m = _PLAIN_STEP.fullmatch(line)
    return (m.group(2) is not None, int(m.group(1)), float(m.group(3))) if m else None


class Throughput:
    """Training examples/s, the one place it is computed (the worker while it trains, ``tfcluster
    compare`` from the progress lines): over the steps after the first (which includes tracing
    and warm-up), from the first step's end to the last step's end -- the evaluation and saving
    that follow training are not counted. ``batch`` is the number of examples one step consumes
    (the global batch; under PSS one worker's batch). With ``keep_intervals`` every mark is kept,
    so the rate between consecutive marks can be read too (``intervals``: ``tfcluster compare``
    takes their median, which an evaluation between two marks does not move)."""

    def __init__(self, batch: int, keep_intervals: bool = False) -> None:
        self.batch = batch
        self.first_time = None
        self.first_step = 0
        self.last_time = None
        self.last_step = 0
        self._marks: Optional[list[tuple[int, float]]] = [] if keep_intervals else None
        self._lap_time = None
        self._lap_step = 0

    def to_json(self) -> dict:
        """Its whole state as JSON values (a ``RunModel`` snapshot, launcher/record/feed.py)."""
        state = dict(vars(self))
        if self._marks is not None:
            state["_marks"] = [list(m) for m in self._marks]
        return state

    @classmethod
    def from_json(cls, state: Mapping) -> "Throughput":
        """The ``Throughput`` ``to_json`` gave ``state``."""
        out = cls(int(state["batch"]))
        for name in vars(out):
            if name in state:
                setattr(out, name, state[name])
        if out._marks is not None:
            out._marks = [tuple(m) for m in out._marks]
        return out

    def mark(self, step: int, now: Optional[float] = None) -> None:
        """``step`` steps are done at ``now`` (any monotone step count: a global step or a
        count of steps run)."""
        now = time.time() if now is None else now
        if self.first_time is None:
            self.first_time, self.first_step = now, step
            self._lap_time, self._lap_step = now, step
        self.last_time, self.last_step = now, step
        if self._marks is not None:
            self._marks.append((step, now))

    @property
    def steps(self) -> int:
        return self.last_step - self.first_step

    def rate(self) -> float:
        if self.first_time is None:
            return 0.0
        elapsed = self.last_time - self.first_time
        return self.steps * self.batch / elapsed if self.steps > 0 and elapsed > 0 else 0.0

    def intervals(self) -> list[tuple[int, float, float]]:
        """(step, time, examples/s) for each mark after the first: the rate since the mark
        before it (needs ``keep_intervals``)."""
        if self._marks is None:
            raise ValueError("Throughput(keep_intervals=True) keeps the marks intervals reads")
        out = []
        for (s0, t0), (s1, t1) in zip(self._marks, self._marks[1:]):
            if s1 > s0 and t1 > t0:
                out.append((s1, t1, (s1 - s0) * self.batch / (t1 - t0)))
        return out

    def lap(self) -> float:
        """examples/s since the previous lap (the first lap: since the first mark, so the
        first step is left out as in ``rate``), and start the next lap at the last mark: an
        epoch's own rate when called at every epoch's end."""
        if self.first_time is None:
            return 0.0
        steps, elapsed = self.last_step - self._lap_step, self.last_time - self._lap_time
        self._lap_time, self._lap_step = self.last_time, self.last_step
        return steps * self.batch / elapsed if steps > 0 and elapsed > 0 else 0.0
