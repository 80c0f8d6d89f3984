"""Warm standby wiring (the processes themselves: standby.py): when the next attempt's standbys
start (once this attempt's tasks are all up and one trained a step, or STANDBY_AFTER_READY after),
where (every task's host, and in elastic runs the hot spares), and a promoted standby that never
took its promotion (started cold instead).

``Prewarm`` is a part of ``Supervisor`` (loop.py): it owns when the standbys are due and is given
the run's context (context.py) and the collaborators it uses: the standbys, the membership and its
plan, the tasks' starts (starts.py: a task's environment, a cold start) and the reports (outcome.py:
an attempt's failure). It calls nothing of the supervisor's.
"""

from __future__ import annotations

from typing import Optional

from launcher.errors import LaunchError
from launcher.plan.build import Plan
from launcher.plan.reconcile import grow_ahead
from launcher.record import events as ev
from launcher.supervise.context import RunContext
from launcher.supervise.membership import Membership
from launcher.supervise.outcome import Reporter
from launcher.supervise.phases import READY_CHECK_EVERY
from launcher.supervise.policy import Attempt
from launcher.supervise.starts import Starter
from launcher.supervise.standby import ACK_BOUND, PROMOTED, WarmStandby, is_reference_worker

# tfcluster's worker: the most seconds after every task is up that the next attempt's standbys
# wait for its first step (a slow restore, a long first trace) before they start anyway.
STANDBY_AFTER_READY = 60.0
# Seconds a lost host answers again (of elastic.settle) before the standbys of the tasks a shrunk
# group would grow with onto it start there: a host that answered one probe may drop again.
RETURNING_AFTER = 2.0


class Prewarm:
    def __init__(self, ctx: RunContext, enabled: bool, standby: WarmStandby, members: Membership, starter: Starter,
                 report: Reporter) -> None:
        self.enabled = enabled  # warm standby is on for this run (standby.decide)
        self.standby, self.members, self.view = standby, members, ctx.view
        self.record, self.backend = ctx.record, ctx.backend
        self.restart, self.clock = ctx.restart, ctx.clock
        self.starter, self.report = starter, report
        self.after_ready = STANDBY_AFTER_READY
        self.due: Optional[float] = None  # when this attempt's standbys start at the latest
        self.checked = 0.0
        self.stocked: Optional[int] = None  # the attempt whose next attempt's standbys were started
        self.spares_stocked: set[str] = set()  # the hot spares they were started on
        self.returning_stocked: set[str] = set()  # hosts settling that standbys of the grow were started on
        self.spares_checked = 0.0

    @property
    def plan(self) -> Plan:
        return self.members.plan

    def arm(self, attempt: Attempt) -> None:
        """Every task of ``attempt`` is up: the next attempt's standbys are due (now, or at its
        first step at the latest ``after_ready`` from now)."""
        number = attempt.number
        if self.enabled and (number < self.restart.max_restarts or self.members.elastic):
            # tfcluster's worker says when it has trained a step: its standbys start then, not
            # while it builds, restores and traces (two standbys importing TensorFlow beside a
            # promoted pair on 2 cores made its first step 2-3 s later). Other entrypoints: now.
            wait = self.after_ready if all(is_reference_worker(t.command) for t in self.plan.tasks) else 0.0
            self.due, self.checked = self.clock() + wait, 0.0
            if wait <= 0:
                self.when_due(attempt, self.due)

    def when_due(self, attempt: Attempt, now: float) -> None:
        """Start the next attempt's standbys once a task of this attempt trained a step (its
        own first_step line), or when due (STANDBY_AFTER_READY after every task was up, or at
        once for an entrypoint that prints no steps)."""
        due = self.due
        if due is None:
            return
        if now < due:
            if now < self.checked + READY_CHECK_EVERY:
                return
            self.checked = now
            keys = {t.key for t in self.plan.tasks}
            if not any(t.global_step is not None and t.start_global_step is not None
                       and t.global_step > t.start_global_step and t.attempt == attempt.number
                       for k, t in self.view.snapshot().tasks.items() if k in keys):
                return
        self.due = None
        number = attempt.number
        spares = self.hot_spares()
        self.stocked, self.spares_stocked = number, {name for name, _ in spares}
        self.standby.start(number + 1, self.plan.tasks, self.starter.env(number + 1), spares=spares)

    def watch_spares(self, attempt: Attempt, now: Optional[float] = None) -> None:
        """Elastic runs, about once a second (``now`` None: at once, a failed attempt's end,
        before the replan): a hot spare whose standbys' sessions were lost (its connection
        dropped, or its heartbeat silent past the lease: how a working host's loss shows) is
        lost to the membership (down, not chosen by a replan until it answers again); its
        standbys are forgotten. A spare back (``Hosts.back``, the membership's look) gets its
        standbys again once this attempt's have started."""
        if not self.members.elastic or (now is not None and now < self.spares_checked + 1.0):
            return
        self.spares_checked = now if now is not None else self.spares_checked
        used = {t.host for t in self.plan.tasks}
        lost = self.standby.sessions_lost(sorted(self.standby.hosts() - used))
        if lost:
            self.standby.forget(sorted(lost))
            self.spares_stocked -= set(lost)
            self.returning_stocked -= set(lost)
            down = set(self.members.seen.down)  # (a settling host dropped again: down already)
            self.members.spares_lost(attempt.number, {h: t for h, t in lost.items() if h not in down})
            return
        if now is None or self.stocked != attempt.number:
            return
        spares = self.hot_spares()
        if {name for name, _ in spares} - self.spares_stocked:
            self.spares_stocked = {name for name, _ in spares}
            self.standby.start(attempt.number + 1, self.plan.tasks, self.starter.env(attempt.number + 1),
                               spares=spares)
        self.warm_returning(attempt)

    def warm_returning(self, attempt: Attempt) -> None:
        """Elastic runs whose group is shrunk: lost hosts that answer again (RETURNING_AFTER s, not
        yet elastic.settle) get the standbys of the tasks the group would grow with onto them
        (reconcile.grow_ahead), so that the grow once they settle promotes them (and their host's
        fork server imports meanwhile) instead of starting those tasks cold after the others."""
        spec, down = self.members.spec, list(self.members.seen.down)
        if spec is None or not down:
            self.returning_stocked.clear()
            return
        self.returning_stocked &= set(down)  # (one grown onto, or dropped: warmed again when it next returns)
        answering = [h for h in self.backend.hosts.answering(down, RETURNING_AFTER) if h not in self.returning_stocked]
        ahead = grow_ahead(spec, self.plan, down, answering) if answering else ()
        if ahead:
            self.returning_stocked |= {t.host for t in ahead}
            self.standby.start(attempt.number + 1, ahead, self.starter.env(attempt.number + 1))

    def hot_spares(self) -> list[tuple[str, str]]:
        """Elastic runs: the spare hosts (unused, not down) as (name, address); each keeps a
        standby per task, so a move there is promoted like a restart. A hot move is faster than
        a suspect host's old tasks die (their lease, their grace): a replan's fresh ports keep
        them from the new attempt (launcher/plan/elastic.py, fresh_ports)."""
        spec = self.members.spec
        if not self.members.elastic or spec is None:
            return []
        names = self.members.seen.spares(spec, self.plan)
        return [(name, spec.host(name).dial_address) for name in names]

    def acks(self, attempt: Attempt) -> bool:
        """A promoted standby that does not say it took its promotion (its entrypoint ignores
        TFCLUSTER_STANDBY's protocol) is stopped and its task started cold, in one line. True:
        the cold start failed (the attempt with it)."""
        for key, handle in self.standby.overdue():
            self.record.write(ev.StandbyFailed(task=key, stage=ev.StandbyFailed.ANSWER, why=f"no '{PROMOTED}' line",
                                               within=ACK_BOUND))
            self.record.write(ev.StandbyStopped(tasks=[key], reason="no answer to the promotion"))
            self.backend.tasks.stop([handle], grace=0)
            try:
                self.starter.launch(key, attempt.number, standby_ok=False)
            except LaunchError as exc:
                self.report.fail(attempt, key, f"starting it cold failed: {exc.lines[0]}", None)
                return True
        return False
