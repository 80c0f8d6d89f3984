"""The ssh preflight's second chance: when the probe refused only hosts whose GPUs the round-robin
over-fills or that would give the workers unequal GPU counts, the placement by each host's GPUs
with the smallest host's count for every worker (made in launcher/plan/startsmall.py's
``by_gpus``), and the probe once more for that plan. The probe itself is probe.py; the backend's
``preflight`` ties them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from launcher.errors import LaunchError
from launcher.plan.build import Plan
from launcher.backends.ssh import probe as ssh_probe

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool
    from launcher.backends.ssh.state import StateSync


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
            ours = all(" is in use" in line or line == "no task was started" for line in exc.lines)
            if not left or not ours:
                raise
            time.sleep(0.5)
