"""The plan an elastic run wants, from the hosts as its membership has seen them. Pure: the spec,
the plan in use and a ``HostsSeen`` in, a ``Want`` out.

The supervisor's membership (launcher/supervise/membership.py) works as dask's ``SpecCluster``
does (``worker_spec``, the workers wanted, against ``workers``, those running; ``_correct_state``
closes the extras and starts the missing): it *observes* (an attempt's lost sessions and the look
at its hosts, hosts that answer again, discovery.command's answers) into a ``HostsSeen``, asks
:func:`wanted` for the plan the run should have now, and *corrects*: where the plan wanted is not
the plan in use, the group restarts under it. The decisions themselves are elastic.py's
(replace_lost, grow, too_many_losses, on_fresh_ports); this module orders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import AbstractSet, Mapping, Optional, Sequence

from launcher.errors import SpecError
from launcher.plan.build import Plan, PlannedTask
from launcher.plan.elastic import (PlanChange, grow, on_fresh_ports, options, replace_lost, shrunk, spare_hosts,
                                   too_many_losses)
from launcher.plan.hostloss import HostLoss
from launcher.spec.model import Spec

MOVED = "restarting the group there from the last backup"
GROWN = "restarting the bigger group from the step just saved"


@dataclass(frozen=True)
class HostsSeen:
    """The hosts as membership has seen them (the spec's ``hosts:`` are discovery's latest list;
    the plan in use says which hosts hold tasks).

    ``down``: hosts not usable until they answer for elastic.settle s without a break: lost
    (suspect) in this run (a spare among them: ``spares_lost``), absent at the start of a group
    that started small, or found by discovery. ``losses``: every host loss of the run, in order (elastic.max_host_losses).
    ``lost``: hosts of the plan lost since it was made and not yet replanned (host -> its loss,
    plan/hostloss.py); ``for_good``: they are gone for good (discovery dropped them), so
    there is no waiting for them. ``back``: hosts the latest look found answering again (no longer
    down), which a shrunk group grows onto."""

    down: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    lost: Mapping[str, HostLoss] = field(default_factory=dict)
    for_good: bool = False
    back: tuple[str, ...] = ()

    def spares(self, spec: Spec, plan: Plan) -> list[str]:
        """The spec's hosts no task of ``plan`` uses and not down, in the spec's order."""
        return spare_hosts(spec, [t.host for t in plan.tasks], self.down)

    def spares_lost(self, plan: Plan, hosts: Sequence[str]) -> tuple["HostsSeen", list[str]]:
        """Spares (hosts no task of ``plan`` uses) whose warm standbys' sessions were lost, or
        that stopped answering: down until they answer for elastic.settle s (``Hosts.back``),
        so no replan moves a task there meanwhile. Nothing of the plan was lost: no replan, and
        not a loss against elastic.max_host_losses (no training was lost). Returns what is seen
        then, and the hosts newly down (a host of the plan, or already down, is not one)."""
        used = {t.host for t in plan.tasks}
        new = sorted({h for h in hosts if h not in used and h not in self.down})
        return (replace(self, down=self.down + tuple(new)) if new else self), new


class Act(Enum):
    """What it takes to have the plan wanted."""

    KEEP = "the plan in use is the plan wanted"
    USE = "a membership change: the group restarts under its plan"
    PORTS = "the plan in use on fresh ports (a restart on a backend that asks for them)"
    GO_ON = "hosts are back but the group cannot grow onto them: it goes on as it is"
    WAIT = "no plan without the lost hosts: wait up to elastic.host_wait for them to settle"
    END = "no plan is possible: the run ends"


@dataclass(frozen=True)
class Want:
    """The plan the run should have now, or why there is none. ``change``: USE's membership
    change (its plan the one wanted), ``then`` what the group does next in words. ``plan``:
    PORTS's plan. ``line``: END's reason and GO_ON's error line; WAIT's why there is no plan (the
    run's reason if the hosts do not settle); KEEP's note, where there is one (why a restart keeps
    the same ports). ``said``: the lost hosts in words (WAIT's line starts with it). ``down``: the
    hosts down once it applies (None: as seen); ``watch``: ``down`` is handed to ``Hosts.back``,
    the lost hosts watched from now on (elastic.settle counts from then)."""

    act: Act
    change: Optional[PlanChange] = None
    plan: Optional[Plan] = None
    then: str = ""
    line: str = ""
    said: str = ""
    down: Optional[tuple[str, ...]] = None
    watch: bool = False


def wanted(spec: Spec, plan: Plan, seen: HostsSeen, avoid: AbstractSet[tuple[str, int]] = frozenset(),
           ports: bool = False) -> Want:
    """The plan the run should have now, ``plan`` in use and ``seen`` the hosts as observed.
    ``avoid``: every (host, port) the run's plans so far gave (elastic.fresh_ports), which a new
    plan does not take again. ``ports``: the next attempt restarts the group on a backend that
    asks for fresh ports (Capabilities.fresh_ports_per_restart). In order: hosts of the plan lost
    (their tasks to spares, or a shrink to tasks.worker.min; else a wait for them, or the end
    where they are gone for good, or past elastic.max_host_losses), the fresh ports, hosts back
    to a shrunk group that grows (elastic.grow), else the plan in use."""
    if seen.lost:
        return _without_lost(spec, plan, seen, avoid)
    if ports:
        try:
            fresh = on_fresh_ports(spec, plan, avoid)
        except SpecError as exc:
            return Want(Act.KEEP, line=f"restarting on the same ports: {exc.lines[0]}")
        return Want(Act.KEEP) if fresh == plan else Want(Act.PORTS, plan=fresh)
    if seen.back and options(spec).grow and shrunk(spec, plan):
        try:
            change = grow(spec, plan, seen.down, avoid=avoid)
        except SpecError as exc:  # no fresh port left: the group goes on as it is
            # The hosts named are those back (the ones it cannot grow onto); the hosts still down
            # stay down (they are not spares until they settle).
            return Want(Act.GO_ON, line=f"{', '.join(seen.back)}: back, but the group cannot grow onto them: "
                                        f"{exc.lines[0]}; it goes on without them")
        if change is not None:
            return Want(Act.USE, change=change, then=GROWN)
    return Want(Act.KEEP)


def grow_ahead(spec: Spec, plan: Plan, down: Sequence[str], answering: Sequence[str]) -> tuple[PlannedTask, ...]:
    """The tasks a shrunk group would grow with onto ``answering`` (hosts of ``down`` that answer,
    not yet for elastic.settle), were those back now: their standbys may start while the hosts
    settle, so that the grow promotes them instead of starting its new tasks cold. Their ports
    are not the grow's (it takes fresh ones): a standby's port is given at its promotion."""
    if not answering or not (options(spec).grow and shrunk(spec, plan)):
        return ()
    try:
        change = grow(spec, plan, [h for h in down if h not in answering])
    except SpecError:
        return ()
    if change is None:
        return ()
    return tuple(change.plan.task(key) for key, host in change.added.items() if host in answering)


def due(spec: Spec, plan: Plan, seen: HostsSeen) -> bool:
    """Whether a running attempt is to end (REGROW, its tasks stopped gracefully so that they save)
    for what its latest look saw: hosts of the plan gone, or hosts back to a shrunk group that
    grows. Growth follows a host coming back, not the group merely being smaller: a group shrunk
    for want of a spare would otherwise restart at once onto the free slots of the hosts it has."""
    return bool(seen.lost) or (bool(seen.back) and options(spec).grow and shrunk(spec, plan))


def _without_lost(spec: Spec, plan: Plan, seen: HostsSeen, avoid: AbstractSet[tuple[str, int]]) -> Want:
    """``seen.lost``'s tasks onto spares, or the group shrunk; else the wait, or the end."""
    said = "; ".join(loss.phrase() for _, loss in sorted(seen.lost.items()))
    too_many = too_many_losses(seen.losses, options(spec).max_host_losses)
    if too_many:
        return Want(Act.END, line=f"{said}; {too_many}")
    lost = sorted(seen.lost)
    try:
        change = replace_lost(spec, plan, lost, seen.down, avoid=avoid)
    except SpecError as exc:  # no fresh port left below 65536 (each replan takes new ones)
        return Want(Act.END, line=f"{said}; the group cannot be replanned: {exc.lines[0]}")
    down = seen.down + tuple(h for h in lost if h not in seen.down)
    if isinstance(change, str):
        if seen.for_good:
            return Want(Act.END, line=change, down=down, watch=True)
        return Want(Act.WAIT, line=change, said=said, down=down, watch=True)
    return Want(Act.USE, change=change, then=MOVED, down=down, watch=True)
