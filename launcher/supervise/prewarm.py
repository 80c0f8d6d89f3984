"""Warm standby wiring (the processes themselves: standby.py): when the next attempt's standbys
start (once this attempt's tasks are all up and one trained a step, or STANDBY_AFTER_READY after),
where (every task's host, and in elastic runs the hot spares), and a promoted standby that never
took its promotion (started cold instead).

``Prewarm`` is a part of ``Supervisor`` (a mixin): its methods use the supervisor's plan, view,
membership, standby, clock and record, and its ``_launch``/``_env`` (loop.py) and ``report``
(outcome.py).
"""

from __future__ import annotations

from launcher.errors import LaunchError
from launcher.plan.elastic import spare_hosts
from launcher.record import events as ev
from launcher.supervise.phases import READY_CHECK_EVERY
from launcher.supervise.policy import Attempt
from launcher.supervise.standby import ACK_BOUND, PROMOTED, is_reference_worker

# tfcluster's worker: the most seconds after every task is up that the next attempt's standbys
# wait for its first step (a slow restore, a long first trace) before they start anyway.
STANDBY_AFTER_READY = 60.0


class Prewarm:
    def _all_ready(self, attempt: Attempt, after: float) -> None:
        """Every task is up: record it, hand over once (``on_ready``), start the warm standby."""
        attempt.ready_after = after
        self.record.write(ev.AttemptReady(attempt=attempt.number, after=round(after, 3)))
        if self.on_ready is not None:
            on_ready, self.on_ready = self.on_ready, None
            on_ready()
        number = attempt.number
        if self.standby_on and (number < self.restart.max_restarts or self.members.elastic):
            # tfcluster's worker says when it has trained a step: its standbys start then, not
            # while it builds, restores and traces (two standbys importing TensorFlow beside a
            # promoted pair on 2 cores made its first step 2-3 s later). Other entrypoints: now.
            wait = self.standby_after_ready if all(is_reference_worker(t.command) for t in self.plan.tasks) else 0.0
            self._standby_due, self._standby_checked = self.clock() + wait, 0.0
            if wait <= 0:
                self._standby_when_due(attempt, self._standby_due)

    def _standby_when_due(self, attempt: Attempt, now: float) -> None:
        """Start the next attempt's standbys once a task of this attempt trained a step (its
        own first_step line), or when due (STANDBY_AFTER_READY after every task was up, or at
        once for an entrypoint that prints no steps)."""
        due = self._standby_due
        if due is None:
            return
        if now < due:
            if now < self._standby_checked + READY_CHECK_EVERY:
                return
            self._standby_checked = now
            keys = {t.key for t in self.plan.tasks}
            if not any(t.global_step is not None and t.start_global_step is not None
                       and t.global_step > t.start_global_step and t.attempt == attempt.number
                       for k, t in self.view.snapshot().tasks.items() if k in keys):
                return
        self._standby_due = None
        number = attempt.number
        self.standby.start(number + 1, self.plan.tasks, self._env(number + 1), spares=self._hot_spares())

    def _hot_spares(self) -> list[tuple[str, str]]:
        """Elastic runs: the spare hosts (unused, not down) as (name, address); each keeps a
        standby per task, so a move there is promoted like a restart. A hot move is faster than
        a suspect host's old tasks die (their lease, their grace): a replan's fresh ports keep
        them from the new attempt (launcher/plan/elastic.py, fresh_ports)."""
        spec = self.members.spec
        if not self.members.elastic or spec is None:
            return []
        names = spare_hosts(spec, [t.host for t in self.plan.tasks], self.members.down)
        return [(name, spec.host(name).dial_address) for name in names]

    def _standby_acks(self, attempt: Attempt) -> bool:
        """A promoted standby that does not say it took its promotion (its entrypoint ignores
        TFCLUSTER_STANDBY's protocol) is stopped and its task started cold, in one line. True:
        the cold start failed (the attempt with it)."""
        for key, handle in self.standby.overdue():
            self.console.info(f"{key}: its warm standby did not answer the promotion within {ACK_BOUND:g} s "
                              f"(no '{PROMOTED}' line); starting it cold")
            self.record.write(ev.StandbyStopped(tasks=[key], reason="no answer to the promotion"))
            self.backend.stop([handle], grace=0)
            try:
                self._launch(key, attempt.number, standby_ok=False)
            except LaunchError as exc:
                self.report.fail(attempt, key, f"starting it cold failed: {exc.lines[0]}", None)
                return True
        return False
