"""The ssh preflight of a worker group with ``tasks.worker.min``: it starts with the hosts that
answer (launcher/plan/elastic.py's ``start_without`` says with which plan). A listed host that does
not answer within ``ssh.connect_timeout`` is not an error but a host the group grows onto later;
below ``min`` the preflight waits up to ``elastic.host_wait`` for hosts to answer, then ends in one
line naming them. A host that must hold a chief, ps or evaluator is not elastic: its error is the
usual one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from launcher.errors import LaunchError
from launcher.plan.build import Plan
from launcher.plan.elastic import options, spare_hosts, start_without
from launcher.spec.model import Spec
from launcher.backends.ssh import probe as ssh_probe

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool


def hosts_there(pool: "HostPool", spec: Spec, plan: Plan, say: Callable[[str], None],
                clock: Callable[[], float] = time.monotonic,
                pause: Callable[[float], None] = time.sleep) -> tuple[Plan, dict[str, str]]:
    """Connect to the plan's hosts and the spares (in parallel, each within ssh.connect_timeout):
    (the plan to start with, {absent host: its one-line problem}). Raises the usual unreachable
    error where a chief, ps or evaluator host does not answer, and one line when fewer than
    tasks.worker.min workers have hosts after elastic.host_wait."""
    names = sorted({t.host for t in plan.tasks})
    spares = spare_hosts(spec, names)
    problems = pool.connect([*names, *spares])
    if not problems:
        return plan, {}
    opts = options(spec)
    deadline = clock() + opts.host_wait
    said = False
    while True:
        absent = sorted(problems)
        change = start_without(spec, plan, absent)
        if change is None:  # a chief, ps or evaluator host: not elastic, the usual error
            ssh_probe.unreachable_error(names, {h: p for h, p in problems.items() if h in names})
        if change is not None and not isinstance(change, str):
            return change.plan, dict(problems)
        left = deadline - clock()
        if left <= 0:
            why = "; ".join(problems[h] for h in absent)
            raise LaunchError(f"{', '.join(absent)} not answering after elastic.host_wait={opts.host_wait:g} s: "
                              f"{change} ({why}); bring {'them' if len(absent) > 1 else 'it'} back, list more hosts "
                              "under hosts: (spares), or lower tasks.worker.min")
        if not said:
            said = True
            say(f"{', '.join(absent)} not answering: {change}; waiting up to elastic.host_wait={opts.host_wait:g} s "
                f"for hosts (until {time.strftime('%H:%M:%S', time.localtime(time.time() + left))})")
        pause(min(1.0, left))
        problems = pool.connect(absent)  # the ones that answer now are the plan's again



# The preflight's lines for a host whose sessions died under it (probe.py): a host shutting down
# (its sessions end while its sshd still answers), or a link that dropped.
_DROPPED = ("the connection closed during preflight", "preflight could not run",
            "the reachability probe gave no answer")


def dropped_hosts(lines: tuple[str, ...], plan: Plan) -> list[str]:
    """The hosts whose sessions the preflight lost, where that is all that went wrong and they hold
    only workers; else [] (the error stands as it is)."""
    hosts = {t.host for t in plan.tasks}
    gone: set[str] = set()
    for line in lines:
        if line == "no task was started" or line.startswith("nothing was started:"):
            continue
        host = next((h for h in hosts if any(line.startswith(f"host {h}: {what}") for what in _DROPPED)), None)
        if host is None:
            return []
        gone.add(host)
    if any(t.host in gone and t.type != "worker" for t in plan.tasks):
        return []
    return sorted(gone)
