"""The run view's host membership (elastic runs): the hosts lost and suspect, the spares, and
each membership change (a ``replan``) with where the group resumed after it.

``apply`` folds the membership events (``host_lost``, ``replan``, ``host_added``) into a
``RunModel``'s ``suspects``, ``spares``, ``host_changes`` and ``tasks``; ``resumed`` notes a task's
first start line after the last change."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from launcher.plan.hostloss import HostLoss, LossKind, lost_phrase
from launcher.record.events import HostAdded, HostLost, RecordEvent, Replan
from launcher.record.taskview import TaskView

KINDS = (HostLost, Replan, HostAdded)  # the event classes ``apply`` folds


def loss_of(event: HostLost) -> HostLoss:
    """The loss a host_lost event records. An event without a cause this version knows (an older
    tfcluster's record, a newer one's kind) is read by its ``suspect``: a loss inferred from
    silence, else one known (preempted, or dropped from discovery's list: the words say which)."""
    kinds = {k.value: k for k in LossKind}
    kind = kinds.get(event.cause or "") or (LossKind.UNREACHABLE if event.suspect else LossKind.DROPPED)
    return HostLoss(kind, event.host, event.since, event.how)


def suspect_lines(view: Any) -> list[str]:
    """``h2 (until it answers for 30 s without a break)`` for each suspect host of ``view`` (a RunModel)."""
    return [f"{h} (until it answers for {settle:g} s without a break)" for h, settle in view.suspects.items()]


@dataclass
class HostChange:
    """One membership change (a ``replan`` event, launcher/plan/elastic.py), and where the group
    resumed after it: the last global step any task reached before, the first one after."""

    at: Optional[float]
    lost: dict[str, str]  # host -> how it was lost (its host_lost event's words)
    moved: dict[str, str]  # task key -> its new host
    dropped: list[str] = field(default_factory=list)  # tasks left out (no spare: fewer workers)
    added: dict[str, str] = field(default_factory=dict)  # grow: task key -> the host it was added on
    before: Optional[int] = None
    resumed_at: Optional[int] = None  # the lowest step a task's first start line after it gave
    resumed_by: list[str] = field(default_factory=list)  # tasks whose start line after it was seen
    suspect: list[str] = field(default_factory=list)  # the hosts of ``lost`` whose loss was suspect

    @property
    def redone(self) -> Optional[int]:
        if self.before is None or self.resumed_at is None:
            return None
        return max(0, self.before - self.resumed_at)

    def describe(self) -> str:
        """``h2: session lost at 12:01:07, host still answering; suspect until it answers for 30 s;
        worker:1 moved to h3 (spare); resumed at step 412, 0 steps redone``"""
        when = f" at {time.strftime('%H:%M:%S', time.localtime(self.at))}" if self.at else ""
        parts = [lost_phrase(host, how, host in self.suspect, when) for host, how in self.lost.items()]
        parts += [f"{host} back{when}" for host in dict.fromkeys(self.added.values())]
        parts += [f"{key} added on {host}" for key, host in self.added.items()]
        parts += [f"{key} moved to {host} (spare)" for key, host in sorted(self.moved.items())]
        if self.dropped:
            parts.append(f"{', '.join(self.dropped)} left out (no spare host)")
        if self.resumed_at is not None:
            parts.append(f"resumed at step {self.resumed_at}, {self.redone} steps redone")
        return "; ".join(parts)


def apply(view: Any, record: RecordEvent, at: Optional[float]) -> None:
    """Fold one membership event (of a class in KINDS) into ``view`` (a RunModel; ``view._lost``:
    the host_lost events not yet replanned)."""
    if isinstance(record, HostLost):
        loss = loss_of(record)
        if record.spare:  # a hot spare: no task to move, a spare no more
            view.spares = [h for h in view.spares if h != record.host]
        else:
            view._lost[record.host] = loss.text
        if loss.suspect:
            view.suspects[record.host] = record.settle or 0.0
    elif isinstance(record, Replan):
        moved = {k: str((v or {}).get("to", "")) for k, v in record.moved.items()}
        steps = [t.global_step for t in view.tasks.values() if t.global_step is not None]
        lost = {h: view._lost.pop(h, "") for h in record.lost}
        view.host_changes.append(HostChange(at=at, lost=lost, moved=moved, dropped=list(record.dropped),
                                            added=dict(record.added), before=max(steps) if steps else None,
                                            suspect=[h for h in record.lost if h in view.suspects]))
        _resized(view, record, lost)
        if record.tasks is not None:  # a shrunk group: the rows of the tasks left out go
            view.tasks = {k: view.tasks.get(k) or TaskView(k) for k in record.tasks}
        view.spares = [h for h in view.spares if h not in moved.values() and h not in record.added.values()]
    elif isinstance(record, HostAdded):
        view.suspects.pop(record.host, None)
        view._lost.pop(record.host, None)  # back before any replan (the group waited for it)
        if record.host and record.spare and record.host not in view.spares:
            view.spares.append(record.host)


def resumed(view: Any, t: TaskView) -> None:
    """Task ``t`` printed its start line: the first after the last change counts (whichever
    task's is read first) towards where the group resumed."""
    change = view.host_changes[-1] if view.host_changes else None
    if change is not None and t.global_step is not None and t.key not in change.resumed_by:
        change.resumed_by = sorted([*change.resumed_by, t.key])
        change.resumed_at = t.global_step if change.resumed_at is None else min(change.resumed_at, t.global_step)


def started(view: Any, group: Any) -> None:
    """run_start's ``group`` (a worker group with a min, launcher/plan/elastic.py's group_size):
    the group's size in attempt 1."""
    if isinstance(group, Mapping) and isinstance(group.get("size"), int) and isinstance(group.get("of"), int):
        view.group_sizes = [{"attempt": 1, "size": group["size"], "of": group["of"], "why": str(group.get("why", ""))}]


def _resized(view: Any, record: Replan, lost: Mapping[str, str]) -> None:
    """A replan of a run whose worker group has a min: its size from the replan's attempt on."""
    if not view.group_sizes or record.tasks is None:
        return
    size = sum(1 for k in record.tasks if k.startswith("worker:"))
    of = view.group_sizes[0]["of"]
    back = list(dict.fromkeys(record.added.values()))
    why = "; ".join(([f"{', '.join(lost)} lost"] if lost else []) + ([f"{', '.join(back)} back"] if back else []))
    attempt = record.attempt  # (0-based, as TFCLUSTER_RESTART_COUNT: the attempt the new plan starts)
    view.group_sizes.append({"attempt": attempt + 1 if attempt is not None else len(view.group_sizes) + 1,
                             "size": size, "of": of, "why": why})


def size_now(view: Any) -> str:
    """The panel's ``worker: 1 of 2 (h2 not answering)`` while the group is smaller than its count."""
    if not view.group_sizes:
        return ""
    last = view.group_sizes[-1]
    if last["size"] >= last["of"]:
        return ""
    return f"worker: {last['size']} of {last['of']}" + (f" ({last['why']})" if last["why"] else "")


def waiting_line(waiting: Optional[Mapping[str, Any]], now: float) -> str:
    """The panel's and ``status``'s ``waiting for 2 more hosts of worker (min 3): 41 s left (h2, h3
    not answering)`` while the run waits below tasks.worker.min (RunFacts.waiting); "" otherwise."""
    if not waiting:
        return ""
    hosts = [str(h) for h in waiting.get("hosts") or ()]
    need, have = waiting.get("need") or 0, waiting.get("have") or 0
    more = max(1, need - have)
    left = max(0.0, float(waiting.get("until") or 0.0) - now)
    why = f" ({', '.join(hosts)} not answering)" if hosts else ""
    return (f"waiting for {more} more host{'s' if more != 1 else ''} of worker (min {need}): {left:.0f} s left of "
            f"elastic.host_wait={float(waiting.get('wait') or 0.0):g} s{why}")


def sizes_line(view: Any) -> str:
    """``status``'s ``worker group by attempt: 1: 1 of 2 (h2 not answering); 2: 2 of 2 (h2 back)``."""
    if not view.group_sizes or all(g["size"] >= g["of"] for g in view.group_sizes):
        return ""
    return "worker group by attempt: " + "; ".join(
        f"{g['attempt']}: {g['size']} of {g['of']}" + (f" ({g['why']})" if g["why"] else "") for g in view.group_sizes)
