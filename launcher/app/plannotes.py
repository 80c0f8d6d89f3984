"""What ``tfcluster plan`` and ``up --dry-run`` say below a plan: a worker group that starts with
the hosts there, the warm standby, the hang watchdog, the spare hosts. From the spec and the plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.app.stages import starts_small_here
from launcher.plan.build import Plan

if TYPE_CHECKING:  # pragma: no cover
    from launcher.loader.load import Spec


def short_line(spec: "Spec", plan: Plan, why: str) -> str:
    """``worker: 1 of 2 (h2 not answering)`` where the group starts smaller than its count, else ""."""
    from launcher.plan.elastic import group_size, size_phrase

    group = group_size(spec, plan, why)
    return size_phrase(group["size"], group["of"], group.get("why", "")) if group["size"] < group["of"] else ""


def start_note(spec: "Spec", plan: Plan) -> str:
    """What ``plan`` says of a worker group that starts with the hosts there: ``worker: starts
    with 1..2 of 2 workers where hosts are short (tasks.worker.min=1); grows as hosts appear``."""
    if not starts_small_here(spec):
        return ""
    group = spec.tasks.worker
    size = sum(1 for t in plan.tasks if t.type == "worker")
    if size < group.count:
        return (f"worker: starts with {size} of {group.count} workers (no room for more on the hosts known now); "
                f"grows as hosts appear (tasks.worker.min={group.min})")
    return (f"worker: starts with {group.min}..{group.count} of {group.count} workers where hosts are short "
            f"(tasks.worker.min={group.min}: hosts that do not answer at `up` are waited for, not errors); "
            "grows as hosts appear")


def standby_line(spec, plan: Plan) -> str:
    from launcher.supervise.standby import plan_line

    return plan_line(spec, plan.tasks)


def hang_line(spec, plan: Plan) -> str:
    """What the hang watchdog does for this plan (launcher/supervise/hangwatch.py's plan_line)."""
    from launcher.backends import backend_class
    from launcher.supervise.hangwatch import plan_line

    return plan_line(spec.watchdog, [t.command for t in plan.tasks], backend_class(spec.backend).capabilities.stacks)


def spares_of(spec) -> list[str]:
    """The spare hosts ``plan`` and ``up --dry-run`` show: on backends that move tasks only."""
    from launcher.backends import backend_class, placed_hosts
    from launcher.plan.elastic import spare_hosts

    placed = placed_hosts(spec) if backend_class(spec.backend).capabilities.elastic else None
    return spare_hosts(spec, placed) if placed is not None else []
