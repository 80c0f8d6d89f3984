"""Elastic host membership: which hosts a run uses and when that changes. The run's current plan
lives here.

Observe, want, correct (as dask's ``SpecCluster`` reconciles the workers it wants with those
running): each look updates what membership has seen of the hosts (launcher/plan/reconcile.py's
``HostsSeen``): a failed attempt's lost sessions and the look at its hosts (``after_failure``), lost
hosts that answer again and discovery.command's answers while an attempt runs (``changed``).
``correct`` asks reconcile.wanted for the plan the run should have now (pure: elastic.py's
decisions, in order) and applies it where it is not the plan in use: a lost host's tasks moved to
a spare, a group shrunk to tasks.worker.min or grown back, the same hosts on fresh ports; or it
waits for the lost hosts, or says why the run ends. A parameter_server worker whose host is lost
may be left out (the shrink).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from launcher.backends import placed_hosts
from launcher.plan.elastic import (PlanChange, elastic_enabled, fresh_ports, group_size, options,
                                   spare_how, suspect_how)
from launcher.plan.build import Plan
from launcher.plan.reconcile import Act, HostsSeen, due, wanted
from launcher.record import events as ev
from launcher.plan.hostloss import HostLoss, LossKind
from launcher.plan.hostreport import Absent
from launcher.record.states import Outcome
from launcher.spec.model import Spec
from launcher.supervise.context import RunContext


class Moved(Enum):
    """What ``Membership.after_failure`` found, when the run goes on (else how it ended: ``Ended``)."""

    NO = "no host lost: the failure is the training's (the restart policy decides)"
    RESTART = "hosts lost: restart under the plan now in use (a loss spends no restart)"


@dataclass(frozen=True)
class Ended:
    """The run ends where membership says so (no spare left, too many losses, a stop while it
    waited): the supervisor's ``run`` finishes it with this outcome and reason (one line already
    said why)."""

    outcome: Outcome
    reason: str = ""


LOOK = 1.0  # s: how long a host whose sessions were lost is given to say it still answers


@dataclass(frozen=True)
class HostsGiven:
    """What an elastic run's membership starts from besides its plan: the ``spec`` (its hosts,
    elastic: and discovery: fields; None: no membership changes), ``static_hosts`` (the hosts the
    spec file itself lists: discovery never drops them), ``discovery_cwd`` (where
    discovery.command runs), and for a worker group with a min the preflight's findings start
    smaller (launcher/plan/preflight.py's Start) the hosts left out (``absent``: each an
    ``Absent``, typed) and why it is smaller (``short_why``)."""

    spec: Optional[Spec] = None
    static_hosts: Optional[Sequence[str]] = None
    discovery_cwd: Optional[Path] = None
    absent: tuple[Absent, ...] = ()
    short_why: str = ""


class Membership:
    def __init__(self, ctx: RunContext, plan: Plan, given: HostsGiven = HostsGiven()) -> None:
        """The run's context (context.py: its backend, record, stop event), the first
        plan, and what the hosts start from (``HostsGiven``)."""
        spec, backend = given.spec, ctx.backend
        self.plan = plan
        # Hosts that come and go (launcher/plan/elastic.py): on when the spec asks for it or lists
        # spare hosts, and the backend can tell which hosts are lost.
        self.spec = spec
        self.elastic = (spec is not None and backend.capabilities.elastic
                        and elastic_enabled(spec, placed_hosts(spec)))
        self.first_plan = plan
        self.replans: list[tuple[PlanChange, dict[str, HostLoss]]] = []  # (the change, {lost host: its loss})
        self.port_plans: list[Plan] = []  # restarts on fresh ports (fresh_ports_per_restart): same hosts
        # Host discovery (launcher/loader/discovery.py): polled in a thread; hosts: entries never vanish.
        self.poller = None
        self.static_hosts: set[str] = set()
        self._answers = 0
        self._discovery_problem = ""
        if self.elastic and spec is not None and spec.discovery is not None:
            from launcher.loader.discovery import Poller

            self.static_hosts = (set(given.static_hosts) if given.static_hosts is not None
                                 else {h.name for h in spec.hosts})
            self.poller = Poller(spec.discovery.command, spec.discovery.every, spec.discovery.timeout,
                                 given.discovery_cwd or Path.cwd())
        self.backend = backend
        self.record = ctx.record
        self.stop_event = ctx.stop_event
        self._looking: Optional[_Look] = None  # after_failure's look, started early (look_ahead)
        # A worker group with a min started with the hosts there (the preflight's start plan):
        # the listed hosts that did not answer then are watched from the start, as lost hosts
        # are, and the group grows onto them once they answer for elastic.settle s.
        self.small = self.elastic and spec is not None and spec.tasks.worker.min is not None
        self.seen = HostsSeen(down=tuple(sorted(a.host for a in given.absent)) if self.small else ())
        self.short_why = given.short_why

    @property
    def down(self) -> list[str]:
        """Hosts lost (suspect), absent at the start or found by discovery, not back yet."""
        return list(self.seen.down)

    @property
    def vanished(self) -> dict[str, HostLoss]:
        """Hosts of the plan gone from discovery's list, their tasks not moved yet (host -> its loss)."""
        return dict(self.seen.lost) if self.seen.for_good else {}

    def start(self) -> None:
        if self.small and self.spec is not None:
            opts = options(self.spec)
            group = group_size(self.spec, self.plan, self.short_why)
            if group["size"] < group["of"]:
                self.record.write(ev.SmallStart(size=group["size"], of=group["of"], why=group.get("why", ""),
                                                settle=opts.settle, discovery=self.poller is not None))
            if self.seen.down:
                self.backend.hosts.back(list(self.seen.down), opts.settle)  # watched from now on
        if self.poller is not None:
            self.poller.start()

    def close(self) -> None:
        if self.poller is not None:
            self.poller.close()

    def spares(self) -> dict:
        """The run_start event's elastic fields: ``spares``, the spec's hosts the plan does not use
        (elastic runs), and ``group`` where a worker group with a min started with the hosts
        there (its size, tasks.worker.count, and why it is smaller: launcher/plan/elastic.py's
        group_size)."""
        if self.elastic and self.spec is not None:
            out: dict = {"spares": self.seen.spares(self.spec, self.plan)}
            if self.small:
                out["group"] = group_size(self.spec, self.plan, self.short_why)
            return out
        return {}

    # -------------------------------------------------------------- correct

    def correct(self, number: int, ports: bool = False) -> Optional[Ended]:
        """After attempt ``number``: the plan in use corrected to the plan wanted for what was seen
        since it was made (reconcile.wanted). The hosts lost are recorded (host_lost events), then
        the plan wanted is used (a membership change: plan-N.json, a replan event, one line; or
        ``ports``, asked before a restart, the same hosts on fresh ports), or the lost hosts are
        waited for, or one line says why the run ends. None: the next attempt runs under the plan
        now in use; else how the run ended."""
        assert self.spec is not None
        opts = options(self.spec)
        seen = self.seen
        for host, loss in sorted(seen.lost.items()):
            self.record.write(ev.HostLost(host=host, how=loss.text, suspect=loss.suspect, attempt=number,
                                          settle=opts.settle, cause=loss.kind.value, since=loss.since))
        want = wanted(self.spec, self.plan, seen, self._ports_used(), ports=ports)
        # What was seen is acted upon; only the hosts down stay.
        self.seen = replace(seen, lost={}, for_good=False, back=(), down=seen.down if want.down is None else want.down)
        if want.watch:
            self.backend.hosts.back(list(self.seen.down), opts.settle)  # watched from now on: settle counts from here
        if want.act in (Act.END, Act.GO_ON):
            self.record.write(ev.Reconciled(act=ev.Reconciled.END if want.act is Act.END else ev.Reconciled.GO_ON,
                                            line=want.line))
            return Ended(Outcome.FAILED, reason=want.line) if want.act is Act.END else None
        if want.act is Act.WAIT:
            return self._wait_for(number, dict(seen.lost), want.said, want.line)
        if want.act is Act.USE:
            assert want.change is not None
            self.use(want.change, dict(seen.lost), number, want.then)
        elif want.act is Act.PORTS:
            assert want.plan is not None
            self.port_plans.append(want.plan)
            self.plan = want.plan
            self.backend.tasks.use_plan(want.plan)
        elif want.line:
            self.record.write(ev.Reconciled(act=ev.Reconciled.KEEP, line=want.line))
        return None

    def use(self, change: PlanChange, lost: dict[str, HostLoss], number: int, then: str) -> None:
        """Run the next attempts under ``change.plan``: record it (plan-N.json, a replan event),
        say so in one line, hand it to the backend."""
        self.replans.append((change, dict(lost)))
        n = len(self.replans) + 1
        name = self.record.add_plan(change.plan, n)
        self.record.write(ev.Replan(plan=n, file=name, attempt=number + 1, lost=list(change.lost),
                                    old_hosts=list(change.old_hosts), new_hosts=list(change.new_hosts),
                                    moved={k: {"from": a, "to": b} for k, (a, b) in change.moved.items()},
                                    dropped=list(change.dropped), added=dict(change.added),
                                    tasks=list(change.plan.keys), hosts=sorted({t.host for t in change.plan.tasks}),
                                    back=list(change.back), how={h: lost[h].text for h in change.lost if h in lost},
                                    suspect=[h for h in change.lost if h in lost and lost[h].suspect], then=then))
        self.plan = change.plan
        self.backend.tasks.use_plan(change.plan)

    def regrow(self, number: int) -> Optional[Ended]:
        """After attempt ``number`` ended for a membership change (REGROW: ``changed`` said so): the
        plan corrected, the tasks of the hosts discovery dropped moved, or the group grown onto
        the hosts back. None: restart under the plan now in use; else how the run ended."""
        return self.correct(number)

    def restart_on_fresh_ports(self, number: int) -> Optional[str]:
        """Before restart ``number``, where the backend asks for it (Capabilities.fresh_ports_per_restart):
        the same tasks on the same hosts, on ports no earlier plan of the run used (each task's
        start event records its endpoint). Returns what the restart line says of it, or None (the
        backend does not ask, explicit tasks.*.ports, or no fresh port is left: the same ports,
        said once)."""
        if self.spec is None or not self.backend.capabilities.fresh_ports_per_restart:
            return None
        before = self.plan
        self.correct(number, ports=True)
        return None if self.plan is before else "on fresh ports"

    def _ports_used(self) -> frozenset[tuple[str, int]]:
        """The ports of every plan of the run so far, which a replan does not take again
        (launcher/plan/elastic.py's fresh_ports: an old task that outlives its host's loss then dials
        addresses nobody listens on)."""
        return fresh_ports([self.first_plan, *(change.plan for change, _ in self.replans), *self.port_plans])

    # -------------------------------------------------------------- observe

    def after_failure(self, number: int, sessions: Mapping[str, float]) -> Union[Moved, Ended]:
        """After a failed attempt: was it the infrastructure's? ``sessions``: the hosts whose
        tasks' SSH sessions were lost in it (host -> when). Those hosts, and any host of the plan
        that does not answer now (or announced its preemption), are *suspect* until they answer
        for elastic.settle s without a break; the loss never spends restart.max_restarts.
        ``Moved.NO``: no host is suspect (the failure is the training's). ``Moved.RESTART``:
        restart under the plan now in use (``correct``: tasks moved to spares, a shrunk group, or
        the suspect hosts settled within elastic.host_wait). Else how the run ended."""
        assert self.spec is not None
        opts = options(self.spec)
        hosts, look = self._look_at(sessions)
        early, self._looking = self._looking, None
        if early is not None and (early.hosts, early.look) == (hosts, look):
            quiet = early.result()
        else:
            quiet = self.backend.hosts.lost(hosts, 0.0, self.stop_event, look=look)
        if self.stop_event.is_set():
            return Ended(Outcome.INTERRUPTED)
        lost: dict[str, HostLoss] = {}
        for host in hosts:
            known = quiet.get(host)
            if known is not None and not known.suspect:
                lost[host] = known  # (a loss the host announced, GCE's notice: as the backend said it)
            elif host in sessions or known is not None:  # suspect: since its session dropped, or the look
                answering, dropped = known is None, sessions.get(host)
                lost[host] = HostLoss(LossKind.SESSION if answering else LossKind.UNREACHABLE, host,
                                      dropped if dropped is not None or known is None else known.since,
                                      suspect_how(opts.settle, dropped, answering=answering))
        if not lost:
            return Moved.NO
        self._lost(lost)
        ended = self.correct(number)
        return Moved.RESTART if ended is None else ended

    def look_ahead(self, sessions: Mapping[str, float]) -> None:
        """Start after_failure's look at the plan's hosts now, in a thread, for the same
        ``sessions``: it overlaps the survivors' save (loop.py), and the look at a host going
        down takes LOOK s when its link is already gone."""
        if self.elastic and self.spec is not None and sessions:
            hosts, look = self._look_at(sessions)
            self._looking = _Look(hosts, look, lambda: self.backend.hosts.lost(hosts, 0.0, self.stop_event, look=look))

    def _look_at(self, sessions: Mapping[str, float]) -> tuple[list[str], dict[str, float]]:
        """The hosts after_failure looks at, and how long each may take. One look each, no wait.
        A host whose sessions were lost is suspect whatever it says: the look only words its
        loss, so it ends after LOOK s (a host shutting down can accept the connection and never
        answer: ssh.connect_timeout would be spent on every move)."""
        hosts = sorted({t.host for t in self.plan.tasks})
        return hosts, {h: LOOK for h in hosts if h in sessions}

    def spares_lost(self, number: int, sessions: Mapping[str, float]) -> list[str]:
        """During or after attempt ``number``: spares (hosts no task of the plan uses) whose warm
        standbys' sessions were lost (host -> when: the same sign a working host's loss gives,
        its connection dropped or its heartbeat silent past ssh.lease). Each is recorded lost
        (a host_lost event, ``spare``), down until it answers for elastic.settle s (watched by
        ``Hosts.back``, then a spare again), so no replan moves a task there meanwhile; no
        training was lost, so nothing restarts. Returns the hosts newly down."""
        if not self.elastic or self.spec is None:
            return []
        settle = options(self.spec).settle
        self.seen, hosts = self.seen.spares_lost(self.plan, list(sessions))
        for host in hosts:
            loss = HostLoss(LossKind.SESSION, host, sessions[host], spare_how(settle, sessions[host]))
            self.record.write(ev.HostLost(host=host, how=loss.text, suspect=loss.suspect, attempt=number, settle=settle,
                                          spare=True, cause=loss.kind.value, since=loss.since))
        if hosts:
            self.backend.hosts.back(list(self.seen.down), settle)  # watched from now on
        return hosts

    def _lost(self, lost: Mapping[str, HostLoss]) -> None:
        """Seen: the hosts of the plan ``lost`` (host -> its loss), each a loss of the run
        (elastic.max_host_losses); gone for good where discovery dropped them all."""
        for_good = bool(lost) and all(loss.kind is LossKind.DROPPED for loss in lost.values())
        self.seen = replace(self.seen, lost=dict(lost), for_good=for_good, losses=self.seen.losses + tuple(sorted(lost)))

    def changed(self, number: int) -> bool:
        """While attempt ``number`` runs, every task up: True if it is to end (REGROW) for a
        membership change (reconcile.due: discovery dropped a host of the plan; a lost host is
        back and the group may grow)."""
        if self.poller is not None and self._discovered():
            return True
        return bool(self.seen.down) and self._hosts_back(number)

    def _wait_for(self, number: int, lost: dict[str, HostLoss], said: str, why: str) -> Optional[Ended]:
        """No spare and no smaller group possible (reconcile's WAIT): wait up to elastic.host_wait
        for every lost host to answer for elastic.settle s without a break, then restart the group
        on them under the same plan (None); else one line naming the hosts (the run failed).
        An observation, not a plan: the plan wanted is the one in use, once its hosts answer, and
        only watching them tells whether they do."""
        assert self.spec is not None
        opts = options(self.spec)
        hosts = sorted(lost)
        keys = [t.key for t in self.plan.tasks if t.host in hosts]
        self.record.write(ev.HostsAwaited(hosts=hosts, tasks=keys, said=said, wait=opts.host_wait))
        deadline = time.monotonic() + opts.host_wait
        group_min = self.spec.tasks.worker.min
        if group_min is not None and all(k.startswith("worker:") for k in keys):  # below min: the panel counts down
            have = sum(1 for t in self.plan.tasks if t.type == "worker" and t.host not in hosts)
            self.record.write(ev.HostWait(hosts=hosts, have=have, need=group_min, until=time.time() + opts.host_wait,
                                          wait=opts.host_wait, attempt=number))
        while True:
            back = set(self.backend.hosts.back(list(self.seen.down), opts.settle))
            if set(hosts) <= back:
                self.seen = replace(self.seen, down=tuple(h for h in self.seen.down if h not in hosts))
                for host in hosts:
                    self.record.write(ev.HostAdded(host=host, attempt=number, settle=opts.settle, spare=False))
                self.backend.hosts.back(list(self.seen.down), opts.settle)  # no longer watched: a fresh clock next time
                self.record.write(ev.HostsAnswer(hosts=hosts, settle=opts.settle, restart=True))
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self.stop_event.wait(min(1.0, left)):
                return Ended(Outcome.INTERRUPTED)
        line = why.replace(" lost and ", f" lost (no {opts.settle:g} s of answers without a break within "
                           f"elastic.host_wait={opts.host_wait:g} s) and ", 1)
        self.record.write(ev.Reconciled(act=ev.Reconciled.END, line=line))
        return Ended(Outcome.FAILED, reason=line)

    def _discovered(self) -> bool:
        """While an attempt runs: the discovery command's newest answer (launcher/loader/discovery.py).
        A failed one keeps the last good list and says why in one line (once per reason). New
        hosts are added and watched until they answer for elastic.settle s (then usable, as a
        lost host that came back). Hosts gone from the list are dropped; if the plan uses one,
        it is seen lost for good and True: the attempt is to end (REGROW), its tasks stopped
        gracefully, and they move."""
        assert self.spec is not None and self.poller is not None
        count, answer = self.poller.latest()
        if count == self._answers or answer is None:
            return False
        self._answers = count
        if answer.hosts is None:
            if answer.problem != self._discovery_problem:
                self._discovery_problem = answer.problem
                self.record.write(ev.DiscoveryAnswer(ok=False, problem=answer.problem,
                                                     kept=[h.name for h in self.spec.hosts]))
            return False
        self._discovery_problem = ""
        known = {h.name for h in self.spec.hosts}
        found = {h.name for h in answer.hosts}
        added = [h for h in answer.hosts if h.name not in known]
        gone = sorted(known - found - self.static_hosts)
        if not added and not gone:
            return False
        hosts = tuple(h for h in self.spec.hosts if h.name not in gone) + tuple(added)
        self.spec = self.spec.model_copy(update={"hosts": hosts})
        self.backend.hosts.add(added)
        self.seen = replace(self.seen, down=tuple(h for h in self.seen.down if h not in gone) + tuple(h.name for h in added))
        self.record.write(ev.DiscoveryAnswer(ok=True, added=[h.name for h in added], gone=list(gone),
                                             settle=options(self.spec).settle))
        in_plan = {t.host for t in self.plan.tasks}
        vanished = {h: HostLoss(LossKind.DROPPED, h, time.time(), "gone from discovery.command's list")
                    for h in gone if h in in_plan}
        if not vanished:
            return False
        self._lost(vanished)
        self.record.write(ev.Regroup(moving=[t.key for t in self.plan.tasks if t.host in vanished]))
        return due(self.spec, self.plan, self.seen)

    def _hosts_back(self, number: int) -> bool:
        """While an attempt runs: lost hosts that answered again for elastic.settle s become
        usable (a ``host_added`` event), seen back. True: the group is shrunk and may grow
        (reconcile.due), so the attempt is to end (REGROW) and its tasks are stopped gracefully
        (they save the step they agree on)."""
        assert self.spec is not None
        opts = options(self.spec)
        back = self.backend.hosts.back(list(self.seen.down), opts.settle)
        if not back:
            return False
        for host in back:
            self.record.write(ev.HostAdded(host=host, attempt=number, settle=opts.settle))
        self.seen = replace(self.seen, down=tuple(h for h in self.seen.down if h not in back), back=tuple(back))
        self.record.write(ev.HostsAnswer(hosts=list(back), settle=opts.settle))
        if not due(self.spec, self.plan, self.seen):
            return False
        self.record.write(ev.Regroup())
        return True


class _Look:
    """A look at hosts (``Hosts.lost``) running in its own thread; ``result`` waits for it."""

    def __init__(self, hosts: list[str], look: dict[str, float], run: Callable[[], dict[str, HostLoss]]) -> None:
        self.hosts, self.look = hosts, look
        self._run, self._answer, self._error = run, None, None
        self._thread = threading.Thread(target=self._go, daemon=True, name="look-ahead")
        self._thread.start()

    def _go(self) -> None:
        try:
            self._answer = self._run()
        except BaseException as exc:  # noqa: BLE001 - raised where the answer is read
            self._error = exc

    def result(self) -> dict[str, HostLoss]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._answer or {}
