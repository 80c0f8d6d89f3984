"""What the run records about itself: a failed attempt (blamed, recorded as a failure event with
what its report shows: each named task's exception, hint and last lines, a hang's stacks) and, once
the run ends, its outcome event (how each task ended, where the results are). The console says
both as they are written (launcher/ui/eventlines.py: the failure's lines, the final report).

``Reporter`` is a part of ``Supervisor`` (loop.py): it is given the run's context (context.py:
the record and view, the settings) and what else it reads (the task group, the membership and its
plan, the standbys, the attempts so far), and writes only the record and an attempt's failure.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Sequence

from launcher.plan.build import Plan
from launcher.record import events as ev
from launcher.record.noise import TAIL, report_tail
from launcher.record.states import Outcome
from launcher.supervise.blame import blame_exit, peer_notes, peers_to_ask
from launcher.supervise.diagnose import exception_lines, hint, peers_gone_named
from launcher.supervise.context import RunContext
from launcher.supervise.group import AttemptGroup
from launcher.supervise.membership import Membership
from launcher.supervise.policy import FAILED, Attempt, AttemptFailure, output_limit
from launcher.supervise.standby import WarmStandby
from launcher.record.layout import locations


# Seconds a failed task's named peer gets to report its own exit before the blame (settle_named_peer).
PEER_EXIT_SETTLE = 1.0


class Reporter:
    def __init__(self, ctx: RunContext, group: AttemptGroup, members: Membership, standby: WarmStandby,
                 attempts: list[Attempt]) -> None:
        self.record, self.view = ctx.record, ctx.view
        self.group, self.members, self.standby = group, members, standby
        self.attempts = attempts  # the supervisor's list, appended to as attempts start
        self.restart, self.watchdog, self.clock = ctx.restart, ctx.watchdog, ctx.clock

    @property
    def plan(self) -> Plan:
        return self.members.plan

    def infra(self, attempt: Attempt) -> bool:
        """Elastic runs: a task's session was lost in this attempt (so far): its failure is the
        infrastructure's, and the membership line says it all (launcher/supervise/membership.py)."""
        return self.members.elastic and (bool(attempt.sessions_lost) or any(
            h.session_lost is not None for h in self.group.handles.values()))

    def state_note(self, key: str) -> str:
        return self.group.handles[key].state_note()

    def state_notes(self, keys: Sequence[str]) -> dict[str, str]:
        """``keys``' state notes, asked all at once (AttemptGroup.state_notes)."""
        return self.group.state_notes(keys)

    def fail_exit(self, attempt: Attempt, failed: tuple, exits: dict, started: float) -> None:
        """An exit failed the attempt: blame the root cause (launcher/supervise/blame.py)."""
        since = started + attempt.ready_after if attempt.ready_after is not None else None
        now = self.clock()
        with self.group.lock:
            tails = {k: tuple(self.group.tails.get(k, ())) for k in failed}
            activity = dict(self.group.activity)
            counts = {k: self.group.counts.get(k) for k in self.group.handles}
        exits = self.settle_named_peer(failed[0], tails.get(failed[0], ()), exits)
        asked = self.state_notes(peers_to_ask(failed[0], list(self.group.handles), exits))
        notes = peer_notes(failed[0], list(self.group.handles), exits,
                           lambda k: asked[k] if k in asked else self.state_note(k), now=now, since=since,
                           activity=activity, hang_timeout=output_limit(self.watchdog.hang_timeout), strategy=self.plan.strategy)
        fault = blame_exit(failed, exits, tails, notes, self.state_note, self.script_text, counts)
        if fault.code is not None and fault.code in self.restart.preemption_exit_codes:
            fault = replace(fault, reason=f"saved for a preemption and asks for a restart (exit {fault.code}: "
                                          "restart.preemption_exit_codes)")
        self.fail(attempt, fault.key, fault.reason, fault.code, others=fault.others, consequences=fault.consequences)

    def settle_named_peer(self, key: str, lines: Sequence[str], exits: dict) -> dict:
        """``exits`` as the blame should see them: where ``key``'s lines say a peer aborted it (or
        the coordination service's leader is lost) and that peer is still running here, up to
        PEER_EXIT_SETTLE s for its own exit. A task whose pull already waits on its peer fails
        within milliseconds of that peer's end (its socket closed), and which of the two exits reaches us first is chance: seen in
        the wrong order, "its collective lost worker:0, which had ended (exit 0) before this task
        did" became a bare "exit code 1". A copy; the caller's map is left as it is."""
        waiting = [k for k in peers_gone_named(key, lines, list(self.group.handles)) if exits.get(k) is None]
        seen = dict(exits)
        deadline = time.monotonic() + PEER_EXIT_SETTLE
        while waiting:
            for peer in list(waiting):
                code = self.group.handles[peer].poll()
                if code is not None:
                    seen[peer] = code
                    waiting.remove(peer)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        return seen

    def script_text(self, path: str) -> Optional[str]:
        """The text of the script a task's traceback names, where it is the entrypoint's own here."""
        from launcher.loader.scriptcheck import entry_source

        return entry_source(self.plan.tasks[0].command if self.plan.tasks else (), path)

    def fail(self, attempt: Attempt, key: str, reason: str, code: Optional[int], others: tuple = (),
              consequences: tuple = (), final: bool = False, hung_since: Optional[float] = None,
              stack: str = "") -> None:
        """Fail ``attempt`` on ``key``; a hang's failure (``hung_since``) shows ``stack``, the
        culprit's stacks, in place of its last lines. The failure event holds what its report
        shows (launcher/ui/failurelines.py): each named task's exception, hint and last lines."""
        shown = [key] + [k for k, _ in consequences]  # whose exception and last lines the report shows
        tails = self.group.tails_of(shown)
        tail = tails[key]
        attempt.state = FAILED
        attempt.failure = AttemptFailure(key=key, reason=reason, code=code, last_lines=tail[-TAIL:], others=tuple(others),
                                         consequences=tuple(consequences), final=final, hung=hung_since is not None)
        peers = [k for k in shown if k != key]
        self.record.write(ev.Failure(task=key, attempt=attempt.number, reason=reason, code=code,
                                     last_lines=list(tail[-TAIL:]), others=list(others),
                                     consequences={k: c for k, c in consequences},
                                     errors=list(exception_lines(tail)), hint=hint(tail, self.given_gpus(key), self.port_here(key)),
                                     hung_since=hung_since, stack=stack.splitlines(),
                                     max_restarts=self.restart.max_restarts, host_loss=self.infra(attempt),
                                     tails={k: report_tail(tails[k]) for k in shown},
                                     peer_errors={k: list(exception_lines(tails[k])) for k in peers},
                                     peer_hints={k: h for k in peers
                                                 if (h := hint(tails[k], self.given_gpus(k), self.port_here(k)))}))

    def port_here(self, key: str) -> Optional[int]:
        """``key``'s port when it runs on this machine (others dial it at localhost): a port it
        could not bind is then named with its holder (diagnose.hint)."""
        try:
            task = self.plan.task(key)
        except KeyError:
            return None
        return task.port if task.address in ("localhost", "127.0.0.1") else None

    def given_gpus(self, key: str) -> bool:
        """Whether the plan gave ``key`` GPUs: some on a known host, or a count where it starts."""
        try:
            g = self.plan.task(key).gpus
        except KeyError:
            return False
        return bool(g.ids) or (g.ids is None and g.required)

    def finish(self, outcome: Outcome, reason: str = "") -> Outcome:
        """The run ended ``outcome``: its outcome event (the console's final report is drawn
        from it and the view); ``outcome`` returned."""
        self.standby.drop()  # before the outcome, which stays the record's last event
        where = locations(self.record.state_dir, self.record.logs_dir)
        self.record.write(ev.RunOutcome(outcome=outcome, attempts=len(self.attempts), reason=reason,
                                        tasks=self.view.outcome_facts(), locations=where))
        return outcome
