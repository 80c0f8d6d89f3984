"""The plans a preflight's findings give: the one owner of the plan a run starts with.

``up`` probes a plan on its backend (``Hosts.probe``: it only reports, a ``HostReport``), asks
``step`` what the report gives, and probes again until the plan is stable (launcher/app/up.py's
probe stage). Pure: the spec, what the earlier rounds saw (``Seen``), the plan just probed and its
report in; the next step out:

* ``StartWith``: the report passed; the plan the run starts with (None: the allocation's), the hosts
  left out (watched from the start, to grow the group) and why the group is smaller.
* ``ProbeAgain``: probe this plan instead. A worker group with ``tasks.worker.min`` starts without
  the hosts that do not answer (their workers move to spares that answer, else the group starts
  smaller) or whose sessions dropped during the probe; a plan the hosts' GPUs refused only for
  its placement is placed by each host's GPUs; containers get the cores and GPUs their machine
  has (docker: the engine's host).
* ``WaitForHosts``: fewer than ``tasks.worker.min`` workers have hosts now; the caller waits up to
  elastic.host_wait, probing again.
* ``Refused``: the preflight's error, one line per problem.

Every decision reads the report's typed fields (an ``Absent``'s kind, a ``Problem``'s kind),
never the words of its lines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence, Union

from launcher.errors import LaunchError, SpecError
from launcher.plan import containergpus
from launcher.plan.build import Plan, build_plan
from launcher.plan.elastic import PlanChange, short_why, start_without, with_workers
from launcher.plan.hostreport import Absent, AbsentKind, HostReport, Problem, ProblemKind, SharedMachine
from launcher.plan.roundrobin import gpu_replan
from launcher.spec.model import Spec

STARTED_NONE = "no task was started"
GPU_ROOM = "no GPU room for more on the hosts there"


@dataclass(frozen=True)
class Seen:
    """What the rounds so far found: the ``full`` plan (from the spec), whether the worker group
    starts with the hosts there (``small``: elastic.starts_small), the hosts left out so far, and
    the workers before a placement by GPUs (``before_gpus``: 0 where there was none)."""

    full: Plan
    small: bool = False
    absent: tuple[Absent, ...] = ()
    before_gpus: int = 0

    def absent_hosts(self, kind: Optional[AbsentKind] = None) -> list[str]:
        return sorted(a.host for a in self.absent if kind is None or a.kind == kind)


@dataclass(frozen=True)
class StartWith:
    plan: Optional[Plan]  # None: the allocation's (the preflight changed nothing)
    absent: tuple[Absent, ...] = ()
    short_why: str = ""


@dataclass(frozen=True)
class ProbeAgain:
    plan: Plan
    line: str = ""  # said once, where the change needs saying


@dataclass(frozen=True)
class WaitForHosts:
    why: str  # "1 worker can start now, below tasks.worker.min=2"
    absent: tuple[Absent, ...]  # the hosts waited for


@dataclass(frozen=True)
class Refused:
    lines: tuple[str, ...]
    keys: tuple = ()

    def error(self) -> LaunchError:
        return LaunchError(*self.lines, keys=self.keys) if self.keys else LaunchError(*self.lines)


Step = Union[StartWith, ProbeAgain, WaitForHosts, Refused]


def step(spec: Spec, seen: Seen, probed: Plan, report: Optional[HostReport]) -> tuple[Seen, Step]:
    """What ``report`` (a preflight of ``probed``) gives, and what is seen from now on."""
    if report is None:
        return seen, StartWith(None if probed == seen.full else probed)
    seen = replace(seen, absent=_merged(seen.absent, report))
    if report.shared is not None:
        return seen, _containers(spec, seen, probed, report.shared)
    names = [h.name for h in probed.hosts]
    gone = [a for a in seen.absent if a.host in names]
    dropped = [p for p in report.problems if p.kind == ProblemKind.DROPPED]
    if gone:
        return _without_absent(spec, seen, probed, gone)
    if dropped:
        return _without_dropped(spec, seen, report, dropped)
    if report.problems and report.kinds() == {ProblemKind.GPU} and not seen.before_gpus:
        return _by_gpus(spec, seen, probed, report)
    if report.problems:
        return seen, refusal(report.problems)
    return seen, _start(spec, seen, probed)


def refusal(problems: Sequence[Problem]) -> Refused:
    """The preflight's error: a line per problem, then ``no task was started``."""
    keys = tuple(p.key for p in problems) + (None,) if any(p.key for p in problems) else ()
    return Refused(tuple(p.text for p in problems) + (STARTED_NONE,), keys)


def unreachable(names: Sequence[str], absent: Sequence[Absent]) -> Refused:
    """One line per host of ``names`` that did not answer, and a summary."""
    texts = {a.host: a.text for a in absent}
    lines = [texts[n] for n in names if n in texts]
    return Refused((*lines, f"nothing was started: {len(lines)} of {len(names)} hosts unreachable"))


def _merged(before: Sequence[Absent], report: HostReport) -> tuple[Absent, ...]:
    """The hosts left out after ``report``: those before that did not answer again, and those it
    found absent (the first ``since`` kept). A host whose sessions dropped stays out though it
    answers a connection again (a VM shutting down still accepts them a while): the supervisor
    takes it back once it has answered for elastic.settle s."""
    out = {a.host: a for a in before if a.host not in report.answered or a.kind == AbsentKind.DROPPED}
    for a in report.absent:
        out[a.host] = replace(a, since=out[a.host].since) if a.host in out and out[a.host].kind == a.kind else a
    return tuple(out[h] for h in sorted(out))


def _without_absent(spec: Spec, seen: Seen, probed: Plan, gone: Sequence[Absent]) -> tuple[Seen, Step]:
    """Hosts of the probed plan did not answer: for a group that starts small, the plan without
    every host left out so far, or a wait where fewer than min workers would have hosts; else
    (or where a chief, ps or evaluator is on one) the usual error."""
    if not seen.small:
        return seen, unreachable([h.name for h in probed.hosts], gone)
    change = start_without(spec, seen.full, seen.absent_hosts())
    if change is None:
        return seen, unreachable(sorted({t.host for t in probed.tasks}), gone)
    if isinstance(change, str):
        return seen, WaitForHosts(change, tuple(a for a in seen.absent if a.kind == AbsentKind.NOT_ANSWERING))
    return seen, ProbeAgain(change.plan)


def _without_dropped(spec: Spec, seen: Seen, report: HostReport, dropped: Sequence[Problem]) -> tuple[Seen, Step]:
    """Worker hosts dropped the probe's sessions (a VM shutting down: its sshd still accepts
    connections for a while, its sessions die), and nothing else went wrong: a group that starts
    small starts without them, said in one line. Otherwise the error stands."""
    hosts = sorted({p.host for p in dropped})
    others = [p for p in report.problems if p.kind != ProblemKind.DROPPED]
    holds_more = any(t.host in hosts and t.type != "worker" for t in seen.full.tasks)
    if not seen.small or others or holds_more or not all(hosts):
        return seen, refusal(report.problems)
    said = {p.host: p for p in dropped}
    now = tuple(Absent(AbsentKind.DROPPED, h, report.at, said[h].text) for h in hosts)
    wider = replace(seen, absent=_merged(seen.absent, HostReport(absent=now)))
    change = start_without(spec, seen.full, wider.absent_hosts())
    if not isinstance(change, PlanChange):
        return seen, refusal(report.problems)
    them = len(hosts) > 1
    return wider, ProbeAgain(change.plan, f"{', '.join(hosts)}: {'their' if them else 'its'} sessions dropped during "
                                      f"the preflight (a host shutting down?); starting without {'them' if them else 'it'}")


def _by_gpus(spec: Spec, seen: Seen, probed: Plan, report: HostReport) -> tuple[Seen, Step]:
    """The probe refused only the plan's GPU placement: the plan placed by the GPUs of the hosts
    that answered (``roundrobin.gpu_replan``), said in one line; a group starting small keeps
    starting small, over those hosts only, with fewer workers where their GPUs hold fewer (down
    to ``tasks.worker.min``). Where no placement fits, the probe's error stands."""
    found = dict(report.gpus)
    got = gpu_replan(spec, probed, found, spec.tasks.worker.min if seen.small else None)
    if got is None:
        return seen, refusal(report.problems)
    placement, line = got
    if not seen.small:
        return replace(seen, before_gpus=_workers(probed)), ProbeAgain(build_plan(spec, placement), line)
    workers = sum(1 for key in placement.slots if key.startswith("worker:"))
    plan = build_plan(with_workers(spec, workers), placement)
    return replace(seen, before_gpus=_workers(probed)), ProbeAgain(plan, line)


def _containers(spec: Spec, seen: Seen, probed: Plan, machine: SharedMachine) -> Step:
    """Every task is a container on one machine: the plan with its cores and GPUs as the
    preflight found them (launcher/plan/containergpus.py). The same plan: start with it; another:
    probe that one; GPUs that do not hold the tasks: refused in one line."""
    if machine.gpus is not None:
        problems = containergpus.refused(spec, machine.gpus, machine.limit)
        if problems:
            return Refused((f"docker: {problems[0]}",))
    placement = containergpus.placement(spec, machine.gpus, machine.cores, machine.limit)
    try:
        plan = build_plan(spec, placement)
    except SpecError as exc:
        return Refused((f"docker: {exc.lines[0]}",))
    if plan != probed:
        return ProbeAgain(plan)
    return StartWith(None if plan == seen.full else plan)


def _start(spec: Spec, seen: Seen, plan: Plan) -> StartWith:
    """The preflight of ``plan`` passed: the run starts with it, and for a group that starts
    small, the hosts left out (watched from the start) and why it is smaller."""
    if not seen.small:
        return StartWith(None if plan == seen.full and not seen.before_gpus else plan)
    quiet = seen.absent_hosts(AbsentKind.NOT_ANSWERING)
    if seen.absent_hosts(AbsentKind.DROPPED):
        return StartWith(plan, seen.absent, "; ".join(f"{a.host} {a.kind.value}" for a in seen.absent))
    why = short_why(spec, plan, quiet)
    if seen.before_gpus and _workers(plan) < seen.before_gpus:
        why = "; ".join(w for w in (why if quiet else "", GPU_ROOM) if w)
    return StartWith(plan, seen.absent, why)


def _workers(plan: Plan) -> int:
    return sum(1 for t in plan.tasks if t.type == "worker")
