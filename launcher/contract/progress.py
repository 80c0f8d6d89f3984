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

import math
import re
import statistics
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


def parse(line: str) -> Optional[Progress]:
    """The progress record in ``line``, or None if it is not a progress line."""
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
    return Progress(kind, fields)


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
    so the rate between consecutive marks (and their median, which an evaluation between two
    marks does not move) can be read too."""

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

    def interval_rates(self) -> list[float]:
        """examples/s between each pair of consecutive marks (needs ``keep_intervals``)."""
        return [rate for _, _, rate in self.intervals()]

    def median_rate(self) -> float:
        """The median of ``interval_rates`` (0.0 with fewer than two marks)."""
        rates = self.interval_rates()
        return statistics.median(rates) if rates else 0.0

    def lap(self) -> float:
        """examples/s since the previous lap (the first lap: since the first mark, so the
        first step is left out as in ``rate``), and start the next lap at the last mark: an
        epoch's own rate when called at every epoch's end."""
        if self.first_time is None:
            return 0.0
        steps, elapsed = self.last_step - self._lap_step, self.last_time - self._lap_time
        self._lap_time, self._lap_step = self.last_time, self.last_step
        return steps * self.batch / elapsed if steps > 0 and elapsed > 0 else 0.0
