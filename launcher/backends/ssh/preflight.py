"""The ssh preflight's second chance: when the probe refused only hosts whose GPUs the round-robin
over-fills or that would give the workers unequal GPU counts, the placement by each host's GPUs
with the smallest host's count for every worker (``placement.gpu_replan``), and the probe once
more for that plan. The probe itself is probe.py; the backend's ``preflight`` ties them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from launcher.plan import gpus
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan
from launcher.spec.model import Spec
from launcher.backends.ssh import probe as ssh_probe
from launcher.backends.ssh.placement import gpu_replan

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool
    from launcher.backends.ssh.state import StateSync


def replan_by_gpus(pool: "HostPool", spec: Spec, plan: Plan, names: list[str],
                   exc: LaunchError, smallest: Optional[int] = None) -> tuple[Placement, str]:
    """The preflight refused only hosts whose GPUs the round-robin over-fills, or hosts that
    would give the workers unequal GPU counts, and placing by each host's GPUs (the smallest
    host's count for every worker) fits: that placement (``allocate`` gives it to the run) and
    the one line saying so; its plan is to be probed once more. Else ``exc`` stands (raised).
    ``smallest``: the group starts small on ``names`` (the hosts that answered): placed over them
    only, with down to that many workers (``placement.gpu_replan``)."""
    found = {n: pool.hosts[n].gpus for n in names}
    refused = [p for n, g in found.items() if g is not None for p in gpus.host_problems(plan, n, g)]
    unequal = gpus.hosts_problem(plan, {n: g for n, g in found.items() if g is not None})
    refused += [unequal] if unequal else []
    others = [line for line in exc.lines if line not in refused and line != "no task was started"]
    got = None if others or not refused else gpu_replan(spec, plan, found, smallest)
    if got is None:
        raise exc
    return got


def probe_again(pool: "HostPool", state_sync: "StateSync", plan: Plan, names: list[str]) -> None:
    """The preflight once more, for the plan placed by GPUs. The first probe's agents exit when
    their channels close, releasing the task ports they held; one not gone yet makes a port
    look in use (the first probe found no port in use, or there would be no replan): waited
    for, a few times."""
    for left in (3, 2, 1, 0):
        try:
            ssh_probe.probe(pool, state_sync, plan, names)
            return
        except LaunchError as exc:
            ours = all(" is in use (" in line or line == "no task was started" for line in exc.lines)
            if not left or not ours:
                raise
            time.sleep(0.5)
