"""The run fold: a run's own facts from its events, beside the task fold (record/fold.py).

One place folds what the events say about the run as a whole: when it started, the attempts it
began, the size of the group over time (elastic runs shrink and grow), how it ended and when.
``RunModel`` (the live panel, the final report, ``status`` through the replay) applies each event
to its ``RunFacts``; ``status`` without progress, ``down`` (a lost run's outcome) and ``compare``
(its measurements) fold a record's events with ``fold_run``. Pure: no IO, no clock.

Attempts, as record/events.py numbers them: ``attempt`` is the 0-based index of the last attempt
begun (a task's ``start``, a ``restart``, a ``replan``: the attempt it begins), ``attempts`` how
many were begun; an outcome's own count (``attempts``) is the supervisor's and wins.

The goodput figures (productive training time against the run's wall time, launcher/record/
goodput.py) are computed from the same event list; they go in ``RunFacts.goodput``, set by the
code that computes them (``None`` until then), so everything about the run as a whole is here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional

from launcher.record.events import Event, RecordEvent
from launcher.record.states import Outcome, RunState


@dataclass(frozen=True)
class GroupSize:
    """From ``at`` on (an event's time), the group had ``tasks`` tasks, in attempt ``attempt``."""

    at: Optional[float]
    tasks: int
    attempt: int


@dataclass
class RunFacts:
    started: Optional[float] = None  # the run_start event's time
    attempt: Optional[int] = None  # 0-based index of the last attempt begun (None: none yet)
    group: list[GroupSize] = field(default_factory=list)  # the group's size over time
    outcome: str = ""  # record/states.py's Outcome, "" while the run has none
    exit_code: Optional[int] = None
    reason: str = ""
    ended: Optional[float] = None  # when the run ended (an outcome written later says so: ``ended``)
    outcome_attempts: Optional[int] = None  # the outcome's own count
    last: Optional[float] = None  # the last event's time (status: a lost run's last sign of life)
    goodput: Optional[Any] = None  # launcher/record/goodput.py's figures (see the module docstring)
    # Below tasks.worker.min, the wait for hosts under way (a host_wait event's fields: hosts, have,
    # need, until, wait, attempt); None once the next attempt starts (or a replan, or the outcome).
    waiting: Optional[dict] = None

    @property
    def attempts(self) -> int:
        """Attempts begun (the outcome's count where it has one)."""
        if self.outcome_attempts is not None:
            return self.outcome_attempts
        return 0 if self.attempt is None else self.attempt + 1

    @property
    def state(self) -> Optional[str]:
        """The run's state as its outcome says (None: no outcome yet; ``status`` then looks at the
        supervisor)."""
        if not self.outcome:
            return None
        return {Outcome.SUCCEEDED: RunState.SUCCEEDED, Outcome.INTERRUPTED: RunState.STOPPED,
                Outcome.STOPPED: RunState.STOPPED}.get(self.outcome, RunState.FAILED)

    def apply(self, event: RecordEvent) -> None:
        kind, at = event.kind, event.time
        self.last = at if at is not None else self.last
        if kind == Event.HOST_WAIT:
            self.waiting = {k: event.get(k) for k in ("hosts", "have", "need", "until", "wait", "attempt")}
        elif kind in (Event.RUN_START, Event.START, Event.RESTART, Event.REPLAN, Event.OUTCOME):
            self.waiting = None
        if kind == Event.RUN_START:
            self.started = at
            self.group.append(GroupSize(at, len(event.get("tasks") or ()), 0))
        elif kind == Event.START:
            self._begin(event.get("attempt"))
        elif kind in (Event.RESTART, Event.REPLAN):
            self._begin(event.get("attempt"))
            tasks = event.get("tasks")
            if kind == Event.REPLAN and tasks is not None and (not self.group or self.group[-1].tasks != len(tasks)):
                self.group.append(GroupSize(at, len(tasks), self.attempt or 0))
        elif kind == Event.OUTCOME:
            self.outcome = str(event.get("outcome") or "")
            self.exit_code = event.get("exit_code")
            self.reason = str(event.get("reason") or "")
            self.ended = event.get("ended") if event.get("ended") is not None else at
            self.outcome_attempts = event.get("attempts")

    def _begin(self, attempt: Optional[int]) -> None:
        if attempt is not None and (self.attempt is None or attempt > self.attempt):
            self.attempt = attempt

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["goodput"] = self.goodput if not hasattr(self.goodput, "to_json") else self.goodput.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RunFacts":
        data = dict(data)
        group = [GroupSize(**g) for g in data.pop("group", [])]
        known = set(cls.__dataclass_fields__) - {"group"}
        return cls(**{k: v for k, v in data.items() if k in known}, group=group)


def fold_run(events: Iterable[RecordEvent]) -> RunFacts:
    """The run's facts after ``events`` (in order)."""
    facts = RunFacts()
    for event in events:
        facts.apply(event)
    return facts
