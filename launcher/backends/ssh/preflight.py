"""The ssh preflight of a plan, as ``SSHHosts.probe`` runs it: the hosts connected (for a worker
group that starts small, the spares too: where the workers of a host that does not answer may
move), ssh.sync and ssh.setup once per host, then the agents' probe (probe.py). It reports what
it found (launcher/plan/hostreport.py's ``HostReport``); the plans that gives are made in
launcher/plan/preflight.py, and the use case probes again until the plan is stable.

A probe after an earlier one of the same run (its plan changed) may find a task port in use by
the earlier probe's own agents, which exit when their channels close: waited for, a few times.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, ContextManager, Optional, Sequence

from launcher.plan.build import Plan
from launcher.plan.hostreport import Absent, AbsentKind, HostReport, ProblemKind
from launcher.backends.ssh import probe as ssh_probe, sync as ssh_sync

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool
    from launcher.backends.ssh.state import StateSync
    from launcher.spec.model import LoadedSpec

# A host that did not answer this recently is not dialled again within the same preflight: the
# probe of the plan without it, right after, reports it as it was (a host coming back is dialled
# again once the wait for hosts pauses).
RECENT = 0.5


class Preflight:
    """The preflights of one run's plans over its pool (ssh.sync and ssh.setup done once per host,
    the agents of an earlier probe waited for)."""

    def __init__(self, pool: "HostPool", state_sync: "StateSync", loaded: "LoadedSpec") -> None:
        self.pool = pool
        self.state_sync = state_sync
        self.loaded = loaded
        self.set_up: set[str] = set()  # hosts ssh.sync/ssh.setup ran on
        self.probed = False  # an agents' probe ran (its agents may hold the ports a moment longer)
        self.dropped: set[str] = set()  # hosts whose sessions died under a probe: not dialled as spares again

    def report(self, plan: Plan, spares: Sequence[str],
               countdown: Optional[Callable[[Callable[[], str]], ContextManager]] = None) -> HostReport:
        """What the hosts of ``plan`` (and ``spares``) say: connected, then, where every host of the
        plan answered, ssh.sync/ssh.setup and the agents' probe."""
        names = [h.name for h in plan.hosts]
        at = time.time()
        opts = self.pool.opts
        looked = [*names, *[h for h in spares if h not in self.dropped]]
        early = bool(spares) or bool(opts.sync or opts.setup)  # otherwise each host connects as its agent starts
        unreachable = self.pool.connect(looked, recent=RECENT) if early else {}
        if not any(h in unreachable for h in names) and (opts.sync or opts.setup):
            todo = [n for n in names if n not in self.set_up]
            if todo:  # setup runs on every host at once (a ThreadingGroup)
                ssh_sync.sync_and_setup(self.pool, self.loaded, todo)
                self.set_up.update(todo)
        problems: tuple = ()
        if not any(h in unreachable for h in names):
            found = self._agents(plan, names, countdown)
            unreachable = {**unreachable, **found.unreachable}
            problems = found.problems
        for p in problems:
            if p.kind == ProblemKind.DROPPED and p.host in self.pool.hosts:
                self.pool.forget_connection(self.pool.hosts[p.host])  # its sessions died: connect afresh
                self.dropped.add(p.host)
        absent = tuple(Absent(AbsentKind.NOT_ANSWERING, h, self.pool.refused_since(h), unreachable[h])
                       for h in sorted(unreachable))
        answered = tuple(h for h in looked if h not in unreachable)
        gpus = {n: self.pool.hosts[n].gpus for n in names if n not in unreachable}
        return HostReport(answered, gpus, absent, tuple(problems), at=at)

    def _agents(self, plan: Plan, names: list[str], countdown) -> ssh_probe.ProbeFindings:
        """The agents' probe; after an earlier one, again a few times where it found only ports in
        use (the earlier agents' own, until their channels close)."""
        for left in (3, 2, 1, 0) if self.probed else (0,):
            found = ssh_probe.probe(self.pool, self.state_sync, plan, names, countdown=countdown)
            if not left or found.unreachable or {p.kind for p in found.problems} != {ProblemKind.PORT_IN_USE}:
                break
            time.sleep(0.5)
        self.probed = True
        return found
