"""Elastic host membership (launcher/plan/elastic.py says what changes, pure; this applies it): which
hosts a run uses and when that changes. A failed attempt's lost hosts move to spares; lost hosts
that answer again make a shrunk group grow; discovery.command's answers add and drop hosts; a
parameter_server worker whose host is lost may be left out. The run's current plan lives here.
"""

from __future__ import annotations

import threading
import time
from enum import Enum
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

from launcher.backends import placed_hosts
from launcher.backends.base import Backend
from launcher.bounded import listing
from launcher.ui.console import Console
from launcher.plan.elastic import (PlanChange, elastic_enabled, fresh_ports, grow, group_size, on_fresh_ports, options,
                                   replace_lost, shrunk, size_phrase, spare_hosts, suspect_how, too_many_losses)
from launcher.plan.build import Plan
from launcher.errors import SpecError
from launcher.record import events as ev
from launcher.plan.hostloss import SUSPECT, lost_phrase
from launcher.record.states import Outcome
from launcher.record.writer import RunRecord
from launcher.spec.model import Spec


class Moved(Enum):
    """What ``Membership.after_failure`` found, when the run goes on (else the run's Outcome)."""

    NO = "no host lost: the failure is the training's (the restart policy decides)"
    RESTART = "hosts lost: restart under the plan now in use (a loss spends no restart)"


LOOK = 1.0  # s: how long a host whose sessions were lost is given to say it still answers


class Membership:
    def __init__(self, plan: Plan, backend: Backend, record: RunRecord, console: Console,
                 stop_event: threading.Event, finish: Callable[..., Outcome], spec: Optional[Spec] = None,
                 static_hosts: Optional[Sequence[str]] = None, discovery_cwd: Optional[Path] = None,
                 absent: Mapping[str, str] = {}, short_why: str = "") -> None:
        """``finish(outcome, reason=...)``: end the run (the supervisor's final report), the
        outcome returned. ``absent`` (host -> why), ``short_why``: a worker group with a min the
        preflight's findings start smaller (launcher/plan/startsmall.py's PreflightPlans)."""
        self.plan = plan
        # Hosts that come and go (launcher/plan/elastic.py): on when the spec asks for it or lists
        # spare hosts, and the backend can tell which hosts are lost.
        self.spec = spec
        self.elastic = (spec is not None and backend.capabilities.elastic
                        and elastic_enabled(spec, placed_hosts(spec)))
        self.first_plan = plan
        self.replans: list[tuple[PlanChange, dict[str, str]]] = []  # (the change, {lost host: how})
        self.port_plans: list[Plan] = []  # restarts on fresh ports (fresh_ports_per_restart): same hosts
        self.down: list[str] = []  # hosts lost (suspect) in this run and not back (elastic.settle) yet
        self.losses: list[str] = []  # every host loss of the run, in order (elastic.max_host_losses)
        # Host discovery (launcher/loader/discovery.py): polled in a thread; hosts: entries never vanish.
        self.poller = None
        self.static_hosts: set[str] = set()
        self._answers = 0
        self._discovery_problem = ""
        self.vanished: dict[str, str] = {}  # plan hosts gone from discovery's list: their tasks move
        if self.elastic and spec is not None and spec.discovery is not None:
            from launcher.loader.discovery import Poller

            self.static_hosts = set(static_hosts) if static_hosts is not None else {h.name for h in spec.hosts}
            self.poller = Poller(spec.discovery.command, spec.discovery.every, spec.discovery.timeout,
                                 discovery_cwd or Path.cwd())
        self.backend = backend
        self.record = record
        self.console = console
        self.stop_event = stop_event
        self.finish = finish
        self._looking: Optional[_Look] = None  # after_failure's look, started early (look_ahead)
        # A worker group with a min started with the hosts there (the preflight's start plan):
        # the listed hosts that did not answer then are watched from the start, as lost hosts
        # are, and the group grows onto them once they answer for elastic.settle s.
        self.small = self.elastic and spec is not None and spec.tasks.worker.min is not None
        if self.small:
            self.down = sorted(absent)
        self.short_why = short_why

    def start(self) -> None:
        if self.small and self.spec is not None:
            opts = options(self.spec)
            group = group_size(self.spec, self.plan, self.short_why)
            if group["size"] < group["of"]:
                self.console.info(f"{size_phrase(group['size'], group['of'], group.get('why', ''))}; the group grows as "
                                  f"hosts answer for elastic.settle={opts.settle:g} s"
                                  + (" or discovery.command finds them" if self.poller is not None else ""))
            if self.down:
                self.backend.hosts.back(list(self.down), opts.settle)  # watched from now on
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
            out: dict = {"spares": spare_hosts(self.spec, [t.host for t in self.plan.tasks], self.down)}
            if self.small:
                out["group"] = group_size(self.spec, self.plan, self.short_why)
            return out
        return {}

    def regrow(self, number: int) -> Optional[Outcome]:
        """After attempt ``number`` ended for a membership change (REGROW): move the tasks of the
        hosts discovery dropped, or grow the group onto the hosts back. None: restart under the
        plan now in use; else how the run ended."""
        assert self.spec is not None
        if self.vanished:  # discovery says hosts of the plan are gone: move their tasks
            ended = self.move_lost_hosts(number, lost=self.vanished)
            self.vanished = {}
            if ended is not None:
                return ended
        else:
            try:
                change = grow(self.spec, self.plan, self.down, avoid=self._ports_used())
            except SpecError as exc:  # no fresh port left: go on as the group is, without them
                self.console.error(f"{', '.join(self.down)}: back, but the group cannot grow onto them: "
                                   f"{exc.lines[0]}; it goes on without them")
                self.down = []
                change = None
            if change is not None:
                self.use(change, {}, number, "restarting the bigger group from the step just saved")
        return None

    def changed(self, number: int) -> bool:
        """While attempt ``number`` runs, every task up: True if it is to end (REGROW) for a
        membership change (discovery dropped a host of the plan; a lost host is back and the
        group may grow)."""
        if self.poller is not None and self._discovered():
            return True
        return bool(self.down) and self._hosts_back(number)

    def after_failure(self, number: int, sessions: Mapping[str, float]) -> Union[Moved, Outcome]:
        """After a failed attempt: was it the infrastructure's? ``sessions``: the hosts whose
        tasks' SSH sessions were lost in it (host -> when). Those hosts, and any host of the plan
        that does not answer now (or announced its preemption), are *suspect* until they answer
        for elastic.settle s without a break; the loss never spends restart.max_restarts.
        ``Moved.NO``: no host is suspect (the failure is the training's). ``Moved.RESTART``:
        restart under the plan now in use (tasks moved to spares, a shrunk group, or the suspect
        hosts settled within elastic.host_wait). Else how the run ended (one line said why)."""
        assert self.spec is not None
        opts = options(self.spec)
        hosts, look = self._look_at(sessions)
        early, self._looking = self._looking, None
        if early is not None and (early.hosts, early.look) == (hosts, look):
            quiet = early.result()
        else:
            quiet = self.backend.hosts.lost(hosts, 0.0, self.stop_event, look=look)
        if self.stop_event.is_set():
            return self.finish(Outcome.INTERRUPTED)
        lost = {}
        for host in hosts:
            if host in quiet and quiet[host].startswith("preempted"):
                lost[host] = quiet[host]  # (GCE's notice: said as it was)
            elif host in sessions or host in quiet:
                lost[host] = suspect_how(opts.settle, sessions.get(host), answering=host not in quiet)
        if not lost:
            return Moved.NO
        ended = self._lose(number, lost)
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

    def move_lost_hosts(self, number: int, lost: dict[str, str]) -> Optional[Outcome]:
        """Hosts of the plan gone for good (discovery dropped them): their tasks move to spares,
        or the group shrinks; None, or how the run ended (one line)."""
        return self._lose(number, lost, wait=False)

    def _lose(self, number: int, lost: dict[str, str], wait: bool = True) -> Optional[Outcome]:
        """Record ``lost`` (host -> how), count them against elastic.max_host_losses, and replan:
        each lost host's tasks to a spare, else a shrink to tasks.worker.min, else (``wait``)
        wait up to elastic.host_wait for the hosts to settle and restart on them. None: restart
        under the plan now in use; else how the run ended."""
        assert self.spec is not None
        opts = options(self.spec)
        for host, how in sorted(lost.items()):
            self.record.write(ev.HostLost(host=host, how=how, suspect=SUSPECT in how, attempt=number, settle=opts.settle))
        self.losses += sorted(lost)
        said = "; ".join(lost_phrase(h, how) for h, how in sorted(lost.items()))
        too_many = too_many_losses(self.losses, opts.max_host_losses)
        if too_many:
            line = f"{said}; {too_many}"
            self.console.error(line)
            return self.finish(Outcome.FAILED, reason=line)
        try:
            change = replace_lost(self.spec, self.plan, sorted(lost), self.down, avoid=self._ports_used())
        except SpecError as exc:  # no fresh port left below 65536 (each replan takes new ones)
            line = f"{said}; the group cannot be replanned: {exc.lines[0]}"
            self.console.error(line)
            return self.finish(Outcome.FAILED, reason=line)
        self.down += [h for h in sorted(lost) if h not in self.down]
        self.backend.hosts.back(list(self.down), opts.settle)  # watched from now on: settle counts from here
        if isinstance(change, str):
            if not wait:
                self.console.error(change)
                return self.finish(Outcome.FAILED, reason=change)
            return self._wait_for(number, lost, said, change)
        self.use(change, lost, number, "restarting the group there from the last backup")
        return None

    def _wait_for(self, number: int, lost: dict[str, str], said: str, why: str) -> Optional[Outcome]:
        """No spare and no smaller group possible: wait up to elastic.host_wait for every lost
        host to answer for elastic.settle s without a break, then restart the group on them under
        the same plan (None); else one line naming the hosts (the run failed)."""
        assert self.spec is not None
        opts = options(self.spec)
        hosts = sorted(lost)
        keys = [t.key for t in self.plan.tasks if t.host in hosts]
        them = "it" if len(hosts) == 1 else "them"
        self.console.info(f"{said}; no spare host for {', '.join(keys)}: waiting up to elastic.host_wait="
                          f"{opts.host_wait:g} s for {', '.join(hosts)} to settle, then restarting the group on "
                          f"{them} (a host loss does not count against restart.max_restarts)")
        deadline = time.monotonic() + opts.host_wait
        group_min = self.spec.tasks.worker.min
        if group_min is not None and all(k.startswith("worker:") for k in keys):  # below min: the panel counts down
            have = sum(1 for t in self.plan.tasks if t.type == "worker" and t.host not in hosts)
            self.record.write(ev.HostWait(hosts=hosts, have=have, need=group_min, until=time.time() + opts.host_wait,
                                          wait=opts.host_wait, attempt=number))
        while True:
            back = set(self.backend.hosts.back(list(self.down), opts.settle))
            if set(hosts) <= back:
                for host in hosts:
                    self.down.remove(host)
                    self.record.write(ev.HostAdded(host=host, attempt=number, settle=opts.settle, spare=False))
                self.backend.hosts.back(list(self.down), opts.settle)  # no longer watched: a fresh clock next time
                self.console.info(f"{', '.join(hosts)} answer{'s' if len(hosts) == 1 else ''} again "
                                  f"({opts.settle:g} s without a break, elastic.settle); restarting the group on "
                                  f"{them} from the last backup")
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self.stop_event.wait(min(1.0, left)):
                return self.finish(Outcome.INTERRUPTED)
        line = why.replace(" lost and ", f" lost (no {opts.settle:g} s of answers without a break within "
                           f"elastic.host_wait={opts.host_wait:g} s) and ", 1)
        self.console.error(line)
        return self.finish(Outcome.FAILED, reason=line)

    def _ports_used(self) -> frozenset[tuple[str, int]]:
        """The ports of every plan of the run so far, which a replan does not take again
        (launcher/plan/elastic.py's fresh_ports: an old task that outlives its host's loss then dials
        addresses nobody listens on)."""
        return fresh_ports([self.first_plan, *(change.plan for change, _ in self.replans), *self.port_plans])

    def restart_on_fresh_ports(self) -> Optional[str]:
        """Before a restart, where the backend asks for it (Capabilities.fresh_ports_per_restart):
        the same tasks on the same hosts, on ports no earlier plan of the run used (each task's
        start event records its endpoint). Returns what the restart line says of it, or None (the
        backend does not ask, or no fresh port is left: the same ports, said once)."""
        if self.spec is None or not self.backend.capabilities.fresh_ports_per_restart:
            return None
        try:
            plan = on_fresh_ports(self.spec, self.plan, self._ports_used())
        except SpecError as exc:
            self.console.info(f"restarting on the same ports: {exc.lines[0]}")
            return None
        if plan == self.plan:
            return None  # explicit tasks.*.ports: they stay
        self.port_plans.append(plan)
        self.plan = plan
        self.backend.tasks.use_plan(plan)
        return "on fresh ports"

    def use(self, change: PlanChange, lost: dict[str, str], number: int, then: str) -> None:
        """Run the next attempts under ``change.plan``: record it (plan-N.json, a replan event),
        say so in one line, hand it to the backend."""
        self.replans.append((change, dict(lost)))
        n = len(self.replans) + 1
        name = self.record.add_plan(change.plan, n)
        self.record.write(ev.Replan(plan=n, file=name, attempt=number + 1, lost=list(change.lost),
                                    old_hosts=list(change.old_hosts), new_hosts=list(change.new_hosts),
                                    moved={k: {"from": a, "to": b} for k, (a, b) in change.moved.items()},
                                    dropped=list(change.dropped), added=dict(change.added),
                                    tasks=list(change.plan.keys)))
        self.console.info(f"{change.describe(lost)}; {then} (plan {n}; a membership change does not count "
                          "against restart.max_restarts)")
        self.plan = change.plan
        self.backend.tasks.use_plan(change.plan)

    def _discovered(self) -> bool:
        """While an attempt runs: the discovery command's newest answer (launcher/loader/discovery.py).
        A failed one keeps the last good list and says why in one line (once per reason). New
        hosts are added and watched until they answer for elastic.settle s (then usable, as a
        lost host that came back). Hosts gone from the list are dropped; if the plan uses one,
        True: the attempt is to end (REGROW), its tasks stopped gracefully, and they move."""
        assert self.spec is not None and self.poller is not None
        count, answer = self.poller.latest()
        if count == self._answers or answer is None:
            return False
        self._answers = count
        if answer.hosts is None:
            if answer.problem != self._discovery_problem:
                self._discovery_problem = answer.problem
                self.console.error(f"discovery.command: {answer.problem}; keeping the last good host list "
                                   f"({listing([h.name for h in self.spec.hosts], 'hosts')}); the run goes on")
                self.record.write(ev.DiscoveryAnswer(ok=False, problem=answer.problem))
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
        self.down = [h for h in self.down if h not in gone] + [h.name for h in added]
        self.record.write(ev.DiscoveryAnswer(ok=True, added=[h.name for h in added], gone=list(gone)))
        bits = ([f"{listing([h.name for h in added], 'hosts')} found (usable once {'they answer' if len(added) > 1 else 'it answers'} "
                 f"for elastic.settle={options(self.spec).settle:g} s)"] if added else [])
        bits += [f"{listing(gone, 'hosts')} gone from the list"] if gone else []
        self.console.info(f"discovery: {'; '.join(bits)}")
        in_plan = {t.host for t in self.plan.tasks}
        vanished = {h: "gone from discovery.command's list" for h in gone if h in in_plan}
        if not vanished:
            return False
        self.vanished = vanished
        self.console.info(f"moving {', '.join(t.key for t in self.plan.tasks if t.host in vanished)}: stopping the "
                          "group gracefully (SIGTERM: the workers save the step they agree on)")
        return True

    def _hosts_back(self, number: int) -> bool:
        """While an attempt runs: lost hosts that answered again for elastic.settle s become
        usable (a ``host_added`` event). True: the group is shrunk and may grow, so the attempt
        is to end (REGROW) and its tasks are stopped gracefully (they save the step they agree on)."""
        assert self.spec is not None
        opts = options(self.spec)
        back = self.backend.hosts.back(list(self.down), opts.settle)
        if not back:
            return False
        for host in back:
            self.down.remove(host)
            self.record.write(ev.HostAdded(host=host, attempt=number, settle=opts.settle))
        self.console.info(f"{', '.join(back)} answer{'s' if len(back) == 1 else ''} again "
                          f"({opts.settle:g} s without a break, elastic.settle): usable again")
        if not (opts.grow and shrunk(self.spec, self.plan)):
            return False
        self.console.info("growing the group: stopping it gracefully (SIGTERM: the workers save the step they "
                          "agree on) to restart it bigger")
        return True


class _Look:
    """A look at hosts (``Hosts.lost``) running in its own thread; ``result`` waits for it."""

    def __init__(self, hosts: list[str], look: dict[str, float], run: Callable[[], dict[str, str]]) -> None:
        self.hosts, self.look = hosts, look
        self._run, self._answer, self._error = run, None, None
        self._thread = threading.Thread(target=self._go, daemon=True, name="look-ahead")
        self._thread.start()

    def _go(self) -> None:
        try:
            self._answer = self._run()
        except BaseException as exc:  # noqa: BLE001 - raised where the answer is read
            self._error = exc

    def result(self) -> dict[str, str]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._answer or {}
