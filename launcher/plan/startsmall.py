"""The plans a preflight's findings give: a worker group with ``tasks.worker.min`` starting with
the hosts that answered, and the placement by each host's GPUs. Pure: the spec, the plan the
preflight was asked about and its ``HostReport`` in, plans out.

A backend's preflight only finds things out (which hosts answered, their GPUs, which are absent
and why) and returns them as a ``HostReport``; the plans are made here, for the backend (the probe
runs again over the plan these functions give) and for the use case (launcher/app/up.py's
``preflight_plans``: the plan the run starts with, the hosts the supervisor watches to grow the
group, why the group is smaller). The same report gives both the same plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Sequence, Union

from launcher.plan import gpus
from launcher.plan.build import Plan, build_plan
from launcher.plan.elastic import PlanChange, short_why, start_without, with_workers
from launcher.plan.roundrobin import gpu_replan
from launcher.spec.model import Spec

NOT_ANSWERING = "not answering"
DROPPED = "dropped its sessions at the start"


@dataclass(frozen=True)
class HostReport:
    """What a preflight found of the hosts. ``small``: it ran for a worker group with
    ``tasks.worker.min`` that starts with the hosts there (elastic.starts_small). ``answered``: the
    hosts it probed. ``gpus``: host -> its GPUs as the host listed them (None: not asked); the
    spec's ``hosts[].slots`` bound the rest. ``absent``: host -> why it is not in the run at the
    start (``NOT_ANSWERING``, or ``DROPPED`` for those in ``dropped``: their sessions died during
    the probe). ``by_gpus``: the probe refused only the round-robin's GPU placement, so the plan is
    placed by each host's GPUs (``by_gpus`` below)."""

    small: bool = False
    answered: tuple[str, ...] = ()
    gpus: Mapping[str, Optional[tuple]] = field(default_factory=dict)
    absent: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    by_gpus: bool = False


@dataclass(frozen=True)
class PreflightPlans:
    """What the use case takes from a preflight: ``start``, the plan the run starts with instead
    of the allocation's (None: the allocation's); ``absent`` (host -> why), watched from the start
    to grow the group; ``short_why``, why the group starts smaller than ``tasks.worker.count``."""

    start: Optional[Plan] = None
    absent: Mapping[str, str] = field(default_factory=dict)
    short_why: str = ""


def start_small(spec: Spec, full: Plan, report: HostReport) -> Union[Plan, str, None]:
    """The plan a worker group with a min starts with while the hosts ``report.absent`` do not
    answer (``full`` where none is absent): their workers move to spares that answer, else the
    group starts smaller (elastic.start_without). A string: fewer than ``tasks.worker.min``
    workers can start now (why, in a few words). None: a chief, ps or evaluator is on an absent
    host (not elastic: the preflight's own error stands)."""
    if not report.absent:
        return full
    change = start_without(spec, full, sorted(report.absent))
    return change.plan if isinstance(change, PlanChange) else change


def without_dropped(spec: Spec, full: Plan, report: HostReport) -> Optional[Plan]:
    """The plan without every absent host of ``report`` (those not answering and those whose
    sessions dropped during the probe), or None where that leaves no plan (a chief, ps or
    evaluator there, or fewer than min workers): the probe's error stands."""
    got = start_small(spec, full, report)
    return got if isinstance(got, Plan) else None


def gpu_refusals_only(plan: Plan, found: Mapping[str, Optional[tuple]], lines: Sequence[str]) -> bool:
    """Whether the probe's error ``lines`` are only refusals of the plan's GPU placement (hosts the
    round-robin over-fills, or unequal counts between the workers): then a placement by each
    host's GPUs may fit."""
    refused = [p for n, g in found.items() if g is not None for p in gpus.host_problems(plan, n, g)]
    unequal = gpus.hosts_problem(plan, {n: g for n, g in found.items() if g is not None})
    refused += [unequal] if unequal else []
    others = [line for line in lines if line not in refused and line != "no task was started"]
    return bool(refused) and not others


def by_gpus(spec: Spec, plan: Plan, report: HostReport) -> Optional[tuple[Plan, str]]:
    """``plan`` placed by the GPUs of the hosts that answered (``roundrobin.gpu_replan``) and the line
    saying so, or None where that does not fit either. A group starting small keeps starting small:
    over the hosts that answered only, with fewer workers where their GPUs hold fewer (down to
    ``tasks.worker.min``)."""
    found = {n: report.gpus.get(n) for n in report.answered}
    got = gpu_replan(spec, plan, found, spec.tasks.worker.min if report.small else None)
    if got is None:
        return None
    placement, line = got
    if not report.small:
        return build_plan(spec, placement), line
    workers = sum(1 for key in placement.slots if key.startswith("worker:"))
    return build_plan(with_workers(spec, workers), placement), line


def preflight_plans(spec: Spec, full: Plan, report: Optional[HostReport]) -> PreflightPlans:
    """The plans ``report`` gives for a preflight of ``full`` that passed: the start plan, the
    absent hosts and the short why (see PreflightPlans). None or an empty report: the usual."""
    if report is None or not (report.small or report.by_gpus):
        return PreflightPlans()
    plan, absent, why = full, {}, ""
    if report.small:
        absent = {h: w for h, w in report.absent.items() if h not in report.dropped}
        plan = start_small(spec, full, replace(report, absent=absent))
        assert isinstance(plan, Plan), plan  # (the preflight passed: the plan was there)
        why = short_why(spec, plan, sorted(absent))
        if report.dropped:  # the probe ran again without them (no replan by GPUs then)
            absent = dict(report.absent)
            plan = without_dropped(spec, full, report) or plan
            return PreflightPlans(plan, absent, "; ".join(f"{h} {w}" for h, w in sorted(absent.items())))
    if report.by_gpus:
        got = by_gpus(spec, plan, report)
        assert got is not None, "a report by_gpus from a plan no placement by GPUs fits"
        before, plan = plan, got[0]
        if not report.small:
            return PreflightPlans(plan)
        said = why if absent else ""  # (with every host there, its why is the slots')
        why = short_why(spec, plan, sorted(absent))
        if _workers(plan) < _workers(before):
            why = "; ".join(w for w in (said, "no GPU room for more on the hosts there") if w)
    return PreflightPlans(plan, absent, why)


def _workers(plan: Plan) -> int:
    return sum(1 for t in plan.tasks if t.type == "worker")
