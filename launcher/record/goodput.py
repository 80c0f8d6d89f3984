"""Goodput: how much of a run's wall time trained, and where the rest went. Pure: no IO, no clock.

The input is narrow on purpose (``Marks``): it is fed the run's events, as record/reader.py
parses them into their classes, with the run fold (record/run.py: which attempt an event belongs
to when it names none), and each task's progress lines (``launcher.contract.progress.Progress``),
and keeps only what the figures need, a few numbers per attempt of each task (so the live view's
snapshot stays small however long the run trains). Of the events it reads ``time`` and:

* ``run_start`` (elapsed starts), ``outcome`` (elapsed ends; without one, at ``now``);
* ``start`` (``task``, ``attempt``): a task's new process; ``attempt_ready`` (``attempt``): every
  task's port open, the first sign of training for a script that prints no steps;
* faults, the first of which ends an attempt's useful work (a hang's ``failure``: at its ``hung_since``): ``exit`` with a non-zero ``code``,
  ``failure``, ``host_lost`` (not a spare's: ``spare`` true, only its warm standbys were lost),
  ``host_preempted``, ``restart``; a ``replan`` without one (a grow) ends it too, as a planned stop;
* waiting: from a ``host_lost`` to the ``host_added`` (``spare`` false) the group waited for,
  with no ``replan`` or ``start`` between; and from a ``host_wait`` (fewer than tasks.worker.min
  workers can run) to the next ``start``, ``replan``, ``restart`` or ``outcome``. The preflight's
  wait at ``up`` is written before ``run_start``: elapsed then starts at that wait.

Of a task's lines, their own ``time=`` (the record's log lines carry no other time): ``start``
(``global_step``: the step the attempt resumed at), ``first_step``, ``step`` and ``epoch``
(``global_step``), ``backup`` (``seconds``: one backup's save), ``saving`` ... ``preempted``
(``global_step``: an agreed save before a stop).

``measure(marks, now)`` partitions ``[run_start, end]`` along the progress task's attempts
(chief:0, else worker:0, else the first task that printed a step):

* ``startup``: before an attempt's first step, unless a fault came before it (the first attempt;
  an attempt after a planned stop, such as a grow);
* ``recovery``: from a fault to the next attempt's first step (detection, stopping the group,
  the restart, that attempt's start), less any waiting;
* ``waiting``: the group below ``min`` or waiting for its hosts to come back;
* ``checkpoint``: backups written while training, and agreed saves (``saving`` to ``preempted``);
* ``redone``: steps trained again: per attempt, its last step reached minus the step the next
  attempt restored, at the run's step time (its steps' seconds over their number), plus the time
  from its last step line to the fault (trained, never saved) for at most the longest time
  between two of its step lines (beyond, it was not training: a hang is recovery);
* ``productive``: the attempts' time from first step to last step line, less backups and redone;
* ``hung``: from an attempt's last progress to its tasks stopped, when the hang watchdog failed it
  (the ``failure`` event's ``hung_since``; the ``stopped`` events after it);
* ``other``: the rest (evaluation and the final save after the last step, teardown).

A run whose progress task printed no step lines still gets startup, recovery and waiting: its
training is taken to run from each attempt's ``attempt_ready`` (once ended without one: its last
task's ``start``) to its end, so ``productive`` is an upper bound (``exact`` false).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.contract import progress
from launcher.contract.progress import Progress
import launcher.record.events as ev
from launcher.record.events import RecordEvent
from launcher.record.run import RunFacts

CATEGORIES = ("startup", "recovery", "redone", "checkpoint", "waiting", "hung", "other")
_FAULTS = (ev.Failure, ev.HostLost, ev.HostPreempted, ev.GroupRestart)
_STEP_KINDS = (progress.StepLine, progress.EpochLine)


@dataclass
class Span:
    """One process of a task, as its progress lines tell it (times in seconds since the epoch)."""

    attempt: int
    restored: Optional[int] = None  # global step it resumed at (its start line)
    first: Optional[float] = None  # its first step's end
    first_step: Optional[int] = None  # the global step after its first step
    last: Optional[float] = None  # its last step or epoch line
    last_step: Optional[int] = None
    backup_s: float = 0.0  # backups written while training (between first and last)
    backup_tail: float = 0.0  # backups written since its last step line
    gap: float = 0.0  # the longest time between two of its step lines
    saving_at: Optional[float] = None  # an agreed save's start...
    saved_at: Optional[float] = None  # ...and end
    saved_step: Optional[int] = None


@dataclass
class Marks:
    """What ``measure`` needs of a run, fed its events and lines in order (``event``, ``line``)."""

    started: Optional[float] = None
    ended: Optional[float] = None
    spans: dict[str, list[Span]] = field(default_factory=dict)
    ready: dict[int, float] = field(default_factory=dict)  # attempt -> attempt_ready time
    launched: dict[int, float] = field(default_factory=dict)  # attempt -> its last task's start
    faults: dict[int, float] = field(default_factory=dict)  # attempt -> its first fault's time
    planned: dict[int, float] = field(default_factory=dict)  # attempt -> a planned stop (replan, no fault)
    waits: list[list[float]] = field(default_factory=list)  # [from, to] the group waited for hosts
    restarts: list[float] = field(default_factory=list)  # restart and replan events' times
    hung: dict[int, list[float]] = field(default_factory=dict)  # attempt -> [last progress, its tasks stopped]
    _waiting_since: Optional[float] = None
    _held_since: Optional[float] = None  # a host_wait (below tasks.worker.min) not yet ended

    def event(self, event: RecordEvent, run: RunFacts) -> None:
        """Apply one event (record/events.py's class). ``run``: the run fold (record/run.py) with
        this event applied: an event that names no attempt belongs to its ``attempt``, the last
        one begun."""
        at = event.time
        if at is None:
            return
        own = getattr(event, "attempt", None)
        attempt = own if own is not None else (run.attempt or 0)
        if isinstance(event, (ev.Start, ev.Replan, ev.GroupRestart, ev.RunOutcome)):
            self._end_hold(at)
        if isinstance(event, ev.RunStart):
            # The preflight's wait below min came first (its host_wait events lead the record):
            # the user waited from there, so elapsed does too.
            self.started = at if self._held_since is None else min(at, self._held_since)
            self._end_hold(at)
        elif isinstance(event, ev.HostWait):
            self._held_since = at if self._held_since is None else self._held_since
        elif isinstance(event, ev.RunOutcome):
            self.ended = at
            self._end_wait(at, waited=False)
        elif isinstance(event, ev.Start):
            self.spans.setdefault(event.task, []).append(Span(attempt))
            self.launched[attempt] = max(at, self.launched.get(attempt, at))
            self._end_wait(at, waited=False)
        elif isinstance(event, ev.AttemptReady):
            self.ready.setdefault(attempt, at)
        elif isinstance(event, ev.Failure) and event.hung_since is not None:
            since = min(event.hung_since, at)
            self.faults[attempt] = min(self.faults.get(attempt, since), since)
            self.hung[attempt] = [since, at]
        elif isinstance(event, ev.Stopped) and attempt in self.hung:
            self.hung[attempt][1] = max(self.hung[attempt][1], at)
        elif isinstance(event, ev.HostLost) and event.spare:
            pass  # a hot spare's standbys lost: no task of the group was there, training went on
        elif isinstance(event, _FAULTS) or (isinstance(event, ev.Exit) and event.code not in (0, None)):
            self.faults.setdefault(attempt if not isinstance(event, ev.GroupRestart) else attempt - 1, at)
            if isinstance(event, ev.GroupRestart):
                self.restarts.append(at)
            if isinstance(event, ev.HostLost):
                self._waiting_since = at if self._waiting_since is None else self._waiting_since
        elif isinstance(event, ev.Replan):
            self.restarts.append(at)
            before = attempt - 1  # (its attempt is the one it plans)
            if before not in self.faults:
                self.planned.setdefault(before, at)
            self._end_wait(at, waited=False)
        elif isinstance(event, ev.HostAdded) and not event.spare:
            self._end_wait(at, waited=True)

    def line(self, key: str, p: Progress) -> None:
        spans = self.spans.get(key)
        at = getattr(p, "time", None)  # (the kinds that carry one: progress.py)
        if not spans:
            return
        s = spans[-1]
        if isinstance(p, progress.StartLine):
            s.restored = p.global_step
        elif at is None:
            return
        elif isinstance(p, progress.FirstStepLine):
            if s.first is None:
                s.first, s.first_step = at, p.global_step
                s.last, s.last_step = at, s.first_step
        elif isinstance(p, _STEP_KINDS):
            self._step(s, p.global_step, at)
        elif isinstance(p, progress.BackupLine) and s.first is not None and s.saving_at is None:
            s.backup_tail += max(0.0, p.seconds or 0.0)
        elif isinstance(p, progress.SavingLine) and s.saving_at is None:
            s.saving_at = at
        elif isinstance(p, progress.PreemptedLine):
            s.saved_at = at
            s.saved_step = p.global_step

    def step(self, key: str, global_step: Optional[int], at: float) -> None:
        """A step line of ``key``'s (``line`` of a ``step`` line, without parsing it again)."""
        spans = self.spans.get(key)
        if spans:
            self._step(spans[-1], global_step, at)

    @staticmethod
    def _step(s: Span, global_step: Optional[int], at: float) -> None:
        if s.saving_at is not None:
            return
        if s.first is None:  # (a script that prints no first_step line)
            s.first, s.first_step = at, global_step
            s.last, s.last_step = at, global_step
            return
        s.gap = max(s.gap, at - (s.last or at))
        s.last = max(at, s.last or at)
        s.backup_s, s.backup_tail = s.backup_s + s.backup_tail, 0.0
        if global_step is not None:
            s.last_step = global_step

    def copy(self) -> "Marks":
        return copy.deepcopy(self)

    def to_json(self) -> dict[str, Any]:
        return {"started": self.started, "ended": self.ended,
                "spans": {k: [vars(s) for s in v] for k, v in self.spans.items()},
                "ready": [[k, v] for k, v in self.ready.items()],
                "launched": [[k, v] for k, v in self.launched.items()], "faults": [[k, v] for k, v in self.faults.items()],
                "planned": [[k, v] for k, v in self.planned.items()], "waits": [list(w) for w in self.waits],
                "restarts": list(self.restarts), "hung": [[k, list(v)] for k, v in self.hung.items()],
                "waiting_since": self._waiting_since, "held_since": self._held_since}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Marks":
        out = cls(started=data.get("started"), ended=data.get("ended"),
                  spans={k: [Span(**s) for s in v] for k, v in (data.get("spans") or {}).items()},
                  ready={int(k): float(v) for k, v in data.get("ready") or ()},
                  launched={int(k): float(v) for k, v in data.get("launched") or ()},
                  faults={int(k): float(v) for k, v in data.get("faults") or ()},
                  planned={int(k): float(v) for k, v in data.get("planned") or ()},
                  waits=[[float(a), float(b)] for a, b in data.get("waits") or ()],
                  restarts=[float(t) for t in data.get("restarts") or ()],
                  hung={int(k): [float(a), float(b)] for k, (a, b) in data.get("hung") or ()})
        out._waiting_since = data.get("waiting_since")
        out._held_since = data.get("held_since")
        return out

    def _end_hold(self, at: float) -> None:
        if self._held_since is not None:
            self.waits.append([self._held_since, max(at, self._held_since)])
            self._held_since = None

    def _end_wait(self, at: float, waited: bool) -> None:
        if self._waiting_since is not None and waited:
            self.waits.append([self._waiting_since, at])
        if waited or self._waiting_since is not None:
            self._waiting_since = None


@dataclass(frozen=True)
class Goodput:
    """``elapsed`` = ``productive`` + the sum of ``badput`` (seconds, every category of CATEGORIES)."""

    elapsed: float
    productive: float
    badput: Mapping[str, float]
    exact: bool = True  # False: no step lines; productive is an upper bound

    @property
    def fraction(self) -> float:
        return self.productive / self.elapsed if self.elapsed > 0 else 0.0

    def line(self) -> str:
        """``goodput 91.4 %: startup 4.1 %, recovery 2.2 %, ...`` (the categories above 0.05 %)."""
        def pct(s: float) -> str:
            return f"{100 * s / self.elapsed:.1f} %" if self.elapsed > 0 else "0.0 %"
        head = f"goodput {'at most ' if not self.exact else ''}{pct(self.productive)}"
        parts = [f"{c} {pct(s)}" for c, s in self.badput.items() if self.elapsed > 0 and s / self.elapsed >= 0.0005]
        tail = "" if self.exact else " (no step lines: an upper bound)"
        return head + (": " + ", ".join(parts) if parts else "") + tail

    def short(self) -> str:
        """The fraction alone, as the ``runs`` table shows it: ``91.4 %`` (``<=91.4 %``: an upper bound)."""
        return ("" if self.exact else "<=") + f"{100 * self.fraction:.1f} %"

    def to_json(self) -> dict[str, Any]:
        return {"elapsed": round(self.elapsed, 3), "productive": round(self.productive, 3),
                "fraction": round(self.fraction, 4), "exact": self.exact,
                "badput": {c: round(s, 3) for c, s in self.badput.items()}}


def progress_task(marks: Marks) -> Optional[str]:
    """The task whose steps are the run's: chief:0, else worker:0, else the first that printed one."""
    stepped = [k for k, spans in marks.spans.items() if any(s.first is not None for s in spans)]
    for key in ("chief:0", "worker:0"):
        if key in stepped:
            return key
    return stepped[0] if stepped else None


def measure(marks: Marks, now: float) -> Optional[Goodput]:
    """The run's goodput at ``now`` (its end, once it has an outcome); None before it started."""
    if marks.started is None:
        return None
    t0 = marks.started
    end = max(t0, marks.ended if marks.ended is not None else now)
    out = {c: 0.0 for c in CATEGORIES}
    out["productive"] = 0.0
    key = progress_task(marks)
    exact = key is not None
    spans = [s for s in marks.spans[key] if s.first is not None] if key else _ready_spans(marks, end)
    rate = _step_time(spans)
    cursor = t0

    def put(cat: str, upto: float) -> None:
        nonlocal cursor
        upto = min(max(upto, cursor), end)
        if cat in ("startup", "recovery"):
            waited = _overlap(marks.waits, cursor, upto)
            out["waiting"] += waited
            out[cat] += upto - cursor - waited
        else:
            out[cat] += upto - cursor
        cursor = upto

    if not spans:  # nothing trained (yet): starting, and restarting after each fault
        faults = sorted(marks.faults.values())
        put("startup", faults[0] if faults else end)
        put("recovery", end)
    for i, s in enumerate(spans):
        nxt = spans[i + 1] if i + 1 < len(spans) else None
        put("startup", s.first)  # (after a fault the cursor is there already: recovery)
        trained_to = s.saving_at if s.saving_at is not None else s.last
        before = cursor
        put("productive", trained_to)
        backups = min(s.backup_s, cursor - before)
        out["productive"] -= backups
        out["checkpoint"] += backups
        reached = s.saved_step if s.saved_at is not None and s.saved_step is not None else s.last_step
        if nxt is not None and reached is not None and nxt.restored is not None and reached > nxt.restored:
            lost = min((reached - nxt.restored) * rate, out["productive"])
            out["productive"] -= lost
            out["redone"] += lost
        if s.saving_at is not None:
            put("checkpoint", s.saved_at if s.saved_at is not None else end)
        else:
            put("checkpoint", cursor + s.backup_tail)  # backups after its last step line (an epoch's end)
        fault = marks.faults.get(s.attempt)
        if nxt is None and fault is not None and marks.ended is not None \
                and not any(t >= fault for t in marks.restarts):
            fault = None  # it ended there (a stop, the last failure): what follows is teardown
        if fault is not None and (nxt is not None or fault >= cursor):
            if s.saving_at is None:
                # Trained after its last line until the fault (lost, unless a backup kept it), for
                # at most as long as its lines ever took to come: longer, it was not training (a
                # hang until the watchdog, a partition): recovery.
                kept = 0.0
                if nxt is not None and reached is not None and nxt.restored is not None and nxt.restored > reached:
                    kept = (nxt.restored - reached) * rate
                tail_end = min(fault, nxt.first if nxt is not None else end, cursor + s.gap)
                put("productive", min(tail_end, cursor + kept))
                put("redone", tail_end)
            if s.attempt in marks.hung:
                put("hung", marks.hung[s.attempt][1])
            put("recovery", nxt.first if nxt is not None else end)
        elif s.attempt in marks.hung:
            put("hung", marks.hung[s.attempt][1])
        elif nxt is not None:
            put("other", marks.planned.get(s.attempt, cursor))  # a planned stop; the next attempt's start is startup
    put("other", end)
    total = end - t0
    badput = {c: max(0.0, out[c]) for c in CATEGORIES}
    productive = max(0.0, out["productive"])
    badput["other"] = max(0.0, total - productive - sum(v for c, v in badput.items() if c != "other"))
    return Goodput(total, productive, badput, exact=exact)


def _ready_spans(marks: Marks, end: float) -> list[Span]:
    """Without step lines: each attempt trains (at most) from its attempt_ready to its fault or the end.

    An attempt that ended without an attempt_ready and without a fault (its tasks never opened
    their ports: a script that computes without a cluster server) trained at most from its last
    task's start: an upper bound must not be below what the run may have trained. One that failed
    first never showed a sign of training (a usage error at start-up): none. The attempt still
    running without one is starting (its ports are not open yet)."""
    out = []
    ended = marks.ended is not None
    attempts = sorted(set(marks.ready) | set(marks.launched))
    for i, a in enumerate(attempts):
        last = marks.faults.get(a, marks.planned.get(a))
        later = attempts[i + 1] if i + 1 < len(attempts) else None
        first = marks.ready.get(a)
        if first is None and a not in marks.faults and (last is not None or later is not None or ended):
            first = marks.launched[a]
        if first is None:
            continue
        if last is None:
            last = marks.ready.get(later, marks.launched.get(later, end)) if later is not None else end
        out.append(Span(a, first=first, last=max(last, first)))
    return out


def _step_time(spans: list[Span]) -> float:
    """The run's seconds per step: its attempts' time between their first and last step lines
    over the steps between them (0 with none measured)."""
    seconds = sum((s.last - s.first) for s in spans if s.last is not None and s.first is not None
                  and s.last_step is not None and s.first_step is not None and s.last_step > s.first_step)
    count = sum(s.last_step - s.first_step for s in spans if s.last is not None and s.first is not None
                and s.last_step is not None and s.first_step is not None and s.last_step > s.first_step)
    return seconds / count if count else 0.0


def _overlap(waits: list[list[float]], a: float, b: float) -> float:
    """The time in [a, b] inside any of ``waits`` (overlapping waits count once: a host lost and
    the group below min at once)."""
    total, reach = 0.0, a
    for w0, w1 in sorted(waits):
        lo, hi = max(reach, w0), min(b, w1)
        if hi > lo:
            total += hi - lo
            reach = hi
    return total
