"""Elastic membership: spare hosts, and the plan after a host is lost.

Pure: no I/O. After a failed attempt the supervisor (launcher/supervise/membership.py) takes as lost the
hosts whose tasks' sessions were lost (``TaskHandle.session_lost``) and those that do not answer
(``Hosts.lost``); each is *suspect* (:func:`suspect_how`) until it has answered for
``elastic.settle`` s without a break. It asks :func:`replace_lost` for the next plan. A lost
host's tasks move, with the same identities (type and index), onto spare hosts: hosts listed
under ``hosts:`` that no task of the plan uses and that are not suspect. Every task of the group
then gets a new TF_CONFIG (the cluster's addresses changed) and the group restarts from the last
backup.

A host loss is the infrastructure's, not a failure of the training: it never spends
``restart.max_restarts``; ``elastic.max_host_losses`` bounds them instead (:func:`too_many_losses`).
With no spare and no smaller group possible, the group waits up to ``elastic.host_wait`` for the
hosts to settle and restarts on them, else the run ends in one line naming the missing hosts.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Callable, Mapping, Optional, Sequence, Union

from launcher.plan.build import Placement, Plan, Slot, build_plan
from launcher.errors import SpecError
from launcher.plan.hostloss import SUSPECT, HostLoss, lost_phrase
from launcher.spec.model import Spec


@dataclass(frozen=True)
class PlanChange:
    """The next plan and what changed: ``moved`` maps each moved task to (old host, new host)."""

    plan: Plan
    lost: tuple[str, ...]
    moved: Mapping[str, tuple[str, str]]  # the task's key in the new plan -> (old host, new host)
    dropped: tuple[str, ...] = ()  # tasks of the old plan left out (a shrink: no spare left)
    added: Mapping[str, str] = field(default_factory=dict)  # grow: new task key -> its host
    back: tuple[str, ...] = ()  # grow: the hosts of ``added`` that held no task before (back, or found)

    @property
    def old_hosts(self) -> tuple[str, ...]:
        return tuple(sorted({old for old, _ in self.moved.values()}))

    @property
    def new_hosts(self) -> tuple[str, ...]:
        return tuple(sorted({new for _, new in self.moved.values()}))

    def describe(self, losses: Mapping[str, HostLoss]) -> str:
        """``h2: session lost at 12:01:07, host still answering; suspect until it answers for 30 s;
        worker:1 moved to h3 (spare)``"""
        how = {h: loss.text for h, loss in losses.items()}
        suspect = [h for h, loss in losses.items() if loss.suspect]
        return describe_change(self.lost, how, self.back, self.added, {k: new for k, (_, new) in self.moved.items()},
                               self.dropped, sum(1 for t in self.plan.tasks if t.type == "worker"), suspect)


def describe_change(lost: Sequence[str], how: Mapping[str, str], back: Sequence[str], added: Mapping[str, str],
                    moved: Mapping[str, str], dropped: Sequence[str], workers: int, suspect: Sequence[str] = ()) -> str:
    """A membership change in one line (``PlanChange.describe``; a replan event's fields say the
    same): the hosts ``lost`` (``how``: host -> how; ``suspect``: those whose loss may pass),
    ``back``, the tasks ``added`` (key -> host), ``moved`` (key -> new host) and ``dropped``, and
    the ``workers`` that go on."""
    parts = [lost_phrase(h, how.get(h, ""), h in suspect) for h in lost]
    parts += [f"{h} back" for h in back]
    parts += [f"{key} added on {host}" for key, host in added.items()]
    parts += [f"{key} moved to {new} (spare)" for key, new in sorted(moved.items())]
    if dropped:
        parts.append(f"{', '.join(dropped)} left out: {workers} worker{'s' if workers != 1 else ''} "
                     "go on (no spare host)")
    return "; ".join(parts)


def suspect_how(settle: float, lost_at: Optional[float], answering: bool) -> str:
    """A host_lost event's ``how`` for a host whose task's session was lost (``lost_at``: when;
    None: no session was seen to drop, the host just does not answer):
    ``session lost at 12:01:07, host still answering; suspect until it answers for 30 s``."""
    state = "host still answering" if answering else "host not answering"
    first = f"session lost at {time.strftime('%H:%M:%S', time.localtime(lost_at))}, " if lost_at else ""
    return f"{first}{state}; {SUSPECT} it answers for {settle:g} s"


def spare_how(settle: float, lost_at: float) -> str:
    """A spare's host_lost ``how`` (its warm standbys' sessions lost at ``lost_at``, time.time()):
    ``a spare: its standbys' sessions lost at 12:01:07; suspect until it answers for 30 s``."""
    return (f"a spare: its standbys' sessions lost at {time.strftime('%H:%M:%S', time.localtime(lost_at))}; "
            f"{SUSPECT} it answers for {settle:g} s")


def too_many_losses(losses: Sequence[str], limit: int) -> Optional[str]:
    """``losses``: every host loss of the run so far, in order (a host once per loss). None while
    within ``elastic.max_host_losses``, else why the run ends (one line)."""
    if len(losses) <= limit:
        return None
    counts = ", ".join(f"{h} {n} time{'s' if n != 1 else ''}" for h, n in Counter(losses).most_common())
    n = len(losses)
    return (f"{n} host loss{'es' if n != 1 else ''} in this run ({counts}), more than elastic.max_host_losses={limit}: "
            "the hosts keep dropping their sessions; fix them (network, shutdowns) or raise "
            "elastic.max_host_losses, then run `tfcluster up` again (it resumes from the last backup)")


def elastic_enabled(spec: Spec, placed: Optional[Sequence[str]]) -> bool:
    """Membership changes are handled when the spec asks for them (``elastic:``, ``discovery:``,
    a worker group with ``tasks.worker.min``, which the loader lets through on backends that can
    move tasks only) or lists spares. ``placed``: the hosts the spec's static placement gives its tasks (its
    backend's ``place``, which the caller asks: ``launcher.backends.placed_hosts``); None where
    the backend cannot place the spec, which then has no spares."""
    return spec.elastic is not None or spec.discovery is not None or spec.tasks.worker.min is not None or (
        placed is not None and bool(spare_hosts(spec, placed)))


def options(spec: Spec):
    """The spec's ``elastic:`` block, or its defaults when only spares turned elastic on."""
    from launcher.spec.model import Elastic

    return spec.elastic if spec.elastic is not None else Elastic()


def spare_hosts(spec: Spec, used: Sequence[str], down: Sequence[str] = ()) -> list[str]:
    """Hosts of ``hosts:`` that no task uses (``used``: the running plan's hosts, or before a run
    the static placement's, ``launcher.backends.placed_hosts``) and that are not known to be
    down, in the spec's order."""
    taken, gone = set(used), set(down)
    return [h.name for h in spec.hosts if h.name not in taken and h.name not in gone]


def with_workers(spec: Spec, count: int) -> Spec:
    """``spec`` with ``count`` workers (explicit ports cut to match): the shape of a shrunk plan."""
    group = spec.tasks.worker
    ports = group.ports[:count] if group.ports is not None else None
    worker = group.model_copy(update={"count": count, "ports": ports})
    return spec.model_copy(update={"tasks": spec.tasks.model_copy(update={"worker": worker})})


def replace_lost(spec: Spec, plan: Plan, lost: Sequence[str], down: Sequence[str] = (),
                 avoid: AbstractSet[tuple[str, int]] = frozenset()) -> Union[PlanChange, str]:
    """The plan with every task of the ``lost`` hosts moved onto a spare (one spare per lost
    host, in the spec's order); with no spare left, a group whose lost tasks are all workers and
    that keeps at least ``tasks.worker.min`` of them goes on with fewer (renumbered 0..k-1, the
    workers left keep their order); else one line saying why no plan is possible. ``down``: hosts
    lost earlier in the run, never used again. ``avoid``: (host, port) pairs the new plan's
    ports must not take (:func:`fresh_ports`)."""
    used = [t.host for t in plan.tasks]
    spares = spare_hosts(spec, used, [*down, *lost])
    lost = tuple(h for h in dict.fromkeys(lost) if h in used)
    target = dict(zip(lost, spares))
    unplaced = [h for h in lost if h not in target]
    dropped = [t for t in plan.tasks if t.host in unplaced]
    workers = [t for t in plan.tasks if t.type == "worker"]
    left = len(workers) - len(dropped)
    group_min = spec.tasks.worker.min
    if dropped and (group_min is None or any(t.type != "worker" for t in dropped) or left < group_min):
        keys = [t.key for t in dropped]
        listed = ", ".join(f"{h} ({', '.join(t.key for t in plan.tasks if t.host == h)})" for h in unplaced)
        if group_min is not None and all(t.type == "worker" for t in dropped):
            why = f"{left} worker{'s' if left != 1 else ''} would be left, below tasks.worker.min={group_min}"
        else:
            why = f"no spare host left for {', '.join(keys)}"
        return (f"host{'s' if len(unplaced) > 1 else ''} {listed} lost and {why}; list more hosts under hosts: "
                f"(the unused ones are spares) or bring {', '.join(unplaced)} back and run `tfcluster up` again "
                "(it resumes from the last backup)")
    index = {t.key: i for i, t in enumerate(t for t in workers if t not in dropped)}
    slots: dict[str, Slot] = {}
    moved: dict[str, tuple[str, str]] = {}
    for task in plan.tasks:
        if task in dropped:
            continue
        key = f"worker:{index[task.key]}" if task.type == "worker" else task.key
        host = target.get(task.host)
        if host is None:
            slots[key] = Slot(task.host, task.address)
        else:
            slots[key] = Slot(host, spec.host(host).dial_address)
            moved[key] = (task.host, host)
    new = build_plan(with_workers(spec, left) if dropped else spec, Placement(slots), avoid)
    return PlanChange(plan=new, lost=lost, moved=moved, dropped=tuple(t.key for t in dropped))


def grow(spec: Spec, plan: Plan, down: Sequence[str] = (),
         avoid: AbstractSet[tuple[str, int]] = frozenset()) -> Optional[PlanChange]:
    """A shrunk group back towards ``tasks.worker.count``: new workers (the next indices) in the
    free room of the hosts there (:func:`room_to_grow`), in the spec's order, while workers are
    missing; the workers there keep their hosts and indices. None: nothing to add. ``avoid`` as for
    :func:`replace_lost`."""
    workers = [t for t in plan.tasks if t.type == "worker"]
    missing = spec.tasks.worker.count - len(workers)
    if missing <= 0:
        return None
    hosts = [h for h, free in room_to_grow(spec, plan, down).items() for _ in range(free)][:missing]
    if not hosts:
        return None
    slots = {t.key: Slot(t.host, t.address) for t in plan.tasks}
    added = {}
    for i, host in enumerate(hosts):
        key = f"worker:{len(workers) + i}"
        slots[key] = Slot(host, spec.host(host).dial_address)
        added[key] = host
    new = build_plan(with_workers(spec, len(workers) + len(hosts)), Placement(slots), avoid)
    held = {t.host for t in plan.tasks}
    return PlanChange(plan=new, lost=(), moved={}, added=added,
                  back=tuple(h for h in dict.fromkeys(hosts) if h not in held))


def room_to_grow(spec: Spec, plan: Plan, down: Sequence[str] = ()) -> dict[str, int]:
    """How many more workers each host can take (host -> count, spec order, none of ``down`` and
    only the worker group's ``hosts`` where it names them): a host with ``hosts[].slots`` its free
    slots, whether it holds tasks already or not; a host without slots one worker where it holds
    no task (a spare), none where it holds some (nothing bounds it: the group spreads instead)."""
    used = Counter(t.host for t in plan.tasks)
    allowed = set(spec.tasks.worker.hosts) if spec.tasks.worker.hosts else None
    gone = set(down)
    out: dict[str, int] = {}
    for host in spec.hosts:
        name = host.name
        if name in out or name in gone or (allowed is not None and name not in allowed):
            continue
        free = host.slots - used[name] if host.slots is not None else (0 if used[name] else 1)
        if free > 0:
            out[name] = free
    return out


def on_fresh_ports(spec: Spec, plan: Plan, avoid: AbstractSet[tuple[str, int]]) -> Plan:
    """``plan``'s tasks on the same hosts, ports.base's counting skipping ``avoid`` (every port of
    the run so far: :func:`fresh_ports`; explicit tasks.*.ports stay). A restart on a backend whose
    stopped task leaves its host a while after it was stopped (Capabilities.fresh_ports_per_restart:
    slurm's step) then need not wait for it: the new attempt's task, a promoted standby above all,
    binds a port the old one never held. SpecError: no fresh port left below 65536."""
    slots = {t.key: Slot(t.host, t.address) for t in plan.tasks}
    workers = sum(1 for t in plan.tasks if t.type == "worker")
    group = getattr(spec.tasks, "worker", None)
    shape = with_workers(spec, workers) if group is not None and workers != group.count else spec
    ported = build_plan(shape, Placement(slots), avoid)
    # Only the ports (and the TF_CONFIG cluster naming them) change: each task keeps the rest of
    # what its plan gave it (threads and GPUs made from the hosts the backend placed it on), so a
    # standby started under ``plan`` is still its task's process (standby.py's _same_process).
    return replace(plan, tasks=tuple(replace(t, port=ported.task(t.key).port, cluster=ported.task(t.key).cluster)
                                     for t in plan.tasks))


def fresh_ports(plans: Sequence[Plan]) -> frozenset[tuple[str, int]]:
    """Every (host, port) a task of ``plans`` (the run's plans so far) was given: a replan takes
    none of them again (ports.base's counting skips them; explicit tasks.*.ports stay as given).
    A lost host's old tasks can outlive the move: it keeps running while it does not answer (a
    partition, a paused VM) or is slow to shut down, until its wrappers' lease runs out and their
    grace after it. TensorFlow's runtime in such a task keeps dialling its cluster's addresses;
    had the new attempt's chief the old one's port, the stale worker's heartbeat would reach its
    coordination service, which then aborts the new attempt ("Incarnation ID mismatch ... The task
    has restarted"). On fresh ports it dials addresses nobody listens on, and gives up alone."""
    return frozenset((t.host, t.port) for plan in plans for t in plan.tasks if t.port is not None)


def shrunk(spec: Spec, plan: Plan) -> bool:
    return sum(1 for t in plan.tasks if t.type == "worker") < spec.tasks.worker.count


# -------------------------------------------------------------- starting smaller (a group with a min)


def starts_small(spec: Spec, elastic_on: bool) -> bool:
    """A worker group with ``tasks.worker.min`` on a run whose membership is handled (``elastic_on``:
    :func:`elastic_enabled` on a backend that moves tasks) starts with the hosts that are there:
    any size in [min, count] they can take now, growing to count as hosts answer."""
    return elastic_on and spec.tasks.worker.min is not None


def fitting_now(spec: Spec, place: Callable[[Spec], Placement]) -> Optional[Plan]:
    """The full plan does not fit the hosts known now (``hosts[].slots`` over-filled: discovery
    has not found every host yet) and the worker group has a ``min``: the plan of the biggest group
    in [min, count) that fits (``place``: the backend's static placement), else None."""
    group = spec.tasks.worker
    if group.min is None:
        return None
    for size in range(group.count - 1, group.min - 1, -1):
        smaller = with_workers(spec, size)
        try:
            return build_plan(smaller, place(smaller))
        except SpecError:
            continue
    return None


def start_without(spec: Spec, plan: Plan, absent: Sequence[str]) -> Union[PlanChange, str, None]:
    """The plan to start with while the hosts ``absent`` do not answer (the preflight's connection,
    within ssh.connect_timeout): their workers move to spares that answer, else the group starts
    smaller (never below ``tasks.worker.min``). None: a chief, ps or evaluator must be on an
    absent host (not elastic: the preflight's own error stands). A string: fewer than ``min``
    workers can start now (why, in a few words)."""
    if any(t.host in absent and t.type != "worker" for t in plan.tasks):
        return None
    change = replace_lost(spec, plan, absent, down=absent)
    if isinstance(change, str):
        left = sum(1 for t in plan.tasks if t.type == "worker" and t.host not in absent)
        return f"{left} worker{'s' if left != 1 else ''} can start now, below tasks.worker.min={spec.tasks.worker.min}"
    return change


def short_why(spec: Spec, plan: Plan, absent: Sequence[str]) -> str:
    """Why a group starts with fewer workers than ``tasks.worker.count``: ``h2 not answering``, or,
    with every host there, ``no room for more: hosts[].slots``."""
    if absent:
        return f"{', '.join(absent)} not answering"
    return "no room for more on the hosts there (hosts[].slots)"


def group_size(spec: Spec, plan: Plan, why: str = "") -> dict:
    """The run_start event's ``group`` field: the worker group's size at the start, its
    ``tasks.worker.count``, and why it is smaller (``status`` and the panel show it)."""
    size = sum(1 for t in plan.tasks if t.type == "worker")
    out = {"type": "worker", "size": size, "of": spec.tasks.worker.count}
    if why and size < spec.tasks.worker.count:
        out["why"] = why
    return out


def size_phrase(size: int, of: int, why: str = "") -> str:
    """``worker: 1 of 2 (h2 not answering)``"""
    return f"worker: {size} of {of}" + (f" ({why})" if why else "")
