"""The supervisor loop (after torchelastic's ``_invoke_run``): start the group, poll, reduce to
a group state, apply the restart policy, and always tear down in ``finally``.

Threads only read task output; every decision is made here, on the calling thread. Beside it:
membership.py (elastic runs' host changes and the plan in use), standby.py (warm standby) and
blame.py (who failed an attempt, and the report's text).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from launcher.contract import envnames
from launcher.backends.base import Backend, TaskHandle
from launcher.supervise.blame import (TAIL, also_failed_line, blame_exit, consequence_lines, failed_line, peer_notes, report_lines,
                    summary_lines)
from launcher.ui.console import Console
from launcher.supervise.diagnose import exception_lines, hint
from launcher.plan.elastic import spare_hosts
from launcher.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, AttemptImpossible, LaunchError, exc_text
from launcher.supervise.membership import Membership
from launcher.procinfo import describe_exit
from launcher.plan.build import Plan
from launcher.supervise.policy import (FAILED, SUCCEEDED, Attempt, Failure, assess, backoff_delay, hang_watched,
                     retry_decision, silent_by_design)
from launcher.record.events import Event
from launcher.record.feed import SnapshotWriter
from launcher.record.states import AttemptState, Outcome
from launcher.supervise.gpuwatch import GpuWatch
from launcher.record.view import RunView
from launcher.record.writer import RunRecord
from launcher.ui.report import gpu_peak_lines, location_lines, locations, task_table
from launcher.spec.model import Restart, Spec, Watchdog
from launcher.supervise.standby import ACK_BOUND, PROMOTED, WarmStandby, decide as standby_decision, is_reference_worker

INTERRUPTED = AttemptState.INTERRUPTED
_TAIL_KEPT = 400  # lines kept, so the exception line above a long traceback or repr is found
_READY_CHECK_EVERY = 0.5
# tfcluster's worker: the most seconds after every task is up that the next attempt's standbys
# wait for its first step (a slow restore, a long first trace) before they start anyway.
STANDBY_AFTER_READY = 60.0


@dataclass
class _Watch:
    """One attempt's running state, which its phases read and update."""

    started: float  # the clock when every task had been started
    exits: dict[str, Optional[int]]  # key -> exit code, None while it runs
    ready: set[str]  # tasks whose port is open (or that serve none)
    next_ready_check: float
    next_back_check: float
    order: list[str] = field(default_factory=list)  # keys in the order they exited
    warned_sidecars: set[str] = field(default_factory=set)


class Supervisor:
    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        record: RunRecord,
        console: Console,
        restart: Restart,
        watchdog: Watchdog,
        stop_event: Optional[threading.Event] = None,
        poll_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        spec: Optional[Spec] = None,
        static_hosts: Optional[Sequence[str]] = None,
        discovery_cwd: Optional[Path] = None,
    ) -> None:
        self.backend = backend
        self.record = record
        self.console = console
        self.restart = restart
        self.watchdog = watchdog
        self.stop_event = stop_event or threading.Event()
        # Elastic host membership (lost hosts, hosts back, discovery) and the plan in use.
        self.members = Membership(plan, backend, record, console, self.stop_event, self._finish, spec=spec,
                                  static_hosts=static_hosts, discovery_cwd=discovery_cwd)
        self.hurry_event = threading.Event()
        self.stop_reason = ""  # why it was stopped, when not by Ctrl-C (``stop``)
        self.poll_interval = poll_interval
        self.clock = clock
        self.attempts: list[Attempt] = []
        self._handles: dict[str, TaskHandle] = {}
        self._tails: dict[str, collections.deque] = {}
        self._activity: dict[str, float] = {}
        self._lock = threading.Lock()
        self._worker_restarts = 0
        # Warm standby: the next attempt's processes, started early, waiting for SIGUSR1.
        self.standby = WarmStandby(backend, record, console, clock, self._on_line, self._drain_line)
        self.standby_on, self.standby_why = standby_decision(
            restart, [t.command for t in plan.tasks], backend.capabilities.warm_standby, backend.name,
            elastic=self.members.elastic)
        self.standby_after_ready = STANDBY_AFTER_READY
        self._standby_due: Optional[float] = None  # when this attempt's standbys start at the latest
        self._standby_checked = 0.0
        self._sink_failed: set[str] = set()
        # The run as the live panel and the final report show it, fed by events and task lines.
        self.view = RunView()
        record.listeners.append(self.view.event)
        # Called once, on this thread, the first time every task of an attempt is ready
        # (``up --detach`` hands the run over to the background then).
        self.on_ready: Optional[Callable[[], None]] = None

    @property
    def plan(self) -> Plan:
        """The plan in use: the first, or the latest membership change's."""
        return self.members.plan

    # -------------------------------------------------------------- public

    def run(self) -> int:
        """Run attempts until success, a permanent failure, the restart budget, or a stop."""
        self.record.event(Event.RUN_START, run_id=self.record.run_id, name=self.plan.name, strategy=self.plan.strategy,
                          backend=self.plan.backend, tasks=list(self.plan.keys),
                          run_dir=str(self.record.dir), max_restarts=self.restart.max_restarts,
                          warm_standby=self.standby_why,
                          **self.members.spares())
        snapshots = SnapshotWriter(self.record.dir).start()  # status and attach replay from its last
        gpu_watch = self._gpu_watch()
        self.members.start()
        try:
            number = 0  # attempts so far - 1 (TFCLUSTER_RESTART_COUNT)
            failures = 0  # failed attempts that count against restart.max_restarts
            while True:
                attempt = self._run_attempt(number)
                if attempt.state == SUCCEEDED:
                    try:
                        self.backend.collect_results()
                    except LaunchError as exc:
                        for line in exc.lines:
                            self.console.error(line)
                        return self._finish(EXIT_FAILED, Outcome.FAILED, reason="; ".join(exc.lines))
                    return self._finish(EXIT_OK, Outcome.SUCCEEDED)
                if attempt.state == INTERRUPTED:
                    return self._finish(EXIT_INTERRUPTED, Outcome.INTERRUPTED, reason=self.stop_reason)
                if attempt.state == AttemptState.REGROW:
                    moved = self.members.regrow(number)
                    if moved:
                        return moved
                    number += 1  # a membership change, not a failure
                    continue
                failure = attempt.failure
                assert failure is not None
                if self.members.elastic:
                    moved = self.members.after_failure(number, attempt.sessions_lost)
                    if moved is not None:
                        if moved != 0:
                            return moved  # the run's exit code: no spare left, too many losses, interrupted
                        number += 1  # a host loss is the infrastructure's, not a failure of the training
                        continue
                retryable, why = retry_decision(failure, self.restart.permanent_exit_codes)
                if not retryable:
                    if not failure.final:  # a final failure's own line already said it all
                        self.console.error(f"{failure.key}: {why}")
                    return self._finish(EXIT_FAILED, Outcome.FAILED, reason=why)
                if failures >= self.restart.max_restarts:
                    why = (f"gave up after {number + 1} attempt(s): restart.max_restarts is "
                           f"{self.restart.max_restarts}; raise it to retry more")
                    self.console.error(why)
                    return self._finish(EXIT_FAILED, Outcome.FAILED, reason=why)
                number += 1
                failures += 1
                delay = backoff_delay(failures, self.restart.backoff, self.restart.max_backoff)
                self.console.info(
                    f"restarting the whole group (restart {failures} of {self.restart.max_restarts})"
                    + (f" in {delay:.1f} s" if delay else "")
                )
                self.record.event(Event.RESTART, attempt=number, delay=delay, after=failure.key, reason=failure.reason)
                if delay and self.stop_event.wait(delay):
                    return self._finish(EXIT_INTERRUPTED, Outcome.INTERRUPTED, reason=self.stop_reason)
        finally:
            self.members.close()
            self._stop_all(grace=0)
            self.standby.drop()
            self.backend.close()
            if gpu_watch is not None:
                gpu_watch.close()
            snapshots.close()  # the last one: the record as it ends

    def interrupt(self) -> None:
        """First call: stop gracefully (SIGTERM, grace, SIGKILL). Second call: SIGKILL now."""
        if self.stop_event.is_set():
            self.hurry_event.set()
            for handle in list(self._handles.values()):
                handle.signal(9)
        self.stop_event.set()

    def stop(self, reason: str) -> None:
        """Stop gracefully, as a first Ctrl-C, however often it is called and whatever came
        before: a closed terminal says so several times (SIGHUP, each failed write to it), and
        none of it is a user asking to kill at once. ``reason`` goes into the outcome."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
        self.stop_event.set()

    # -------------------------------------------------------------- one attempt

    def _run_attempt(self, number: int) -> Attempt:
        """One attempt, in phases: start the group, then watch it (exits, readiness, hang,
        membership) until an outcome. The group is always stopped at the end: with the usual
        grace, or at once after a failure (the group is the unit of failure) or a second Ctrl-C."""
        attempt = Attempt(number)
        self.attempts.append(attempt)
        try:
            watch = self._start_group(attempt)
            if watch is not None:
                self._watch(attempt, watch)
            return attempt
        finally:
            attempt.ended = time.time()
            if attempt.state == FAILED and self.members.elastic:
                self._sessions_lost(attempt)
            at_once = attempt.state == FAILED or self.hurry_event.is_set()
            self._stop_all(0 if at_once else self.watchdog.stop_grace)

    def _start_group(self, attempt: Attempt) -> Optional[_Watch]:
        """Prepare the attempt and start every task. None: the attempt already failed."""
        number = attempt.number
        self._standby_due = None  # (an earlier attempt's, not started before it ended)
        try:
            self.backend.prepare_attempt(number)
        except LaunchError as exc:
            self._fail(attempt, "prepare", "; ".join(exc.lines), None, final=isinstance(exc, AttemptImpossible))
            return None
        exits: dict[str, Optional[int]] = {}
        for task in self.plan.tasks:
            if self.stop_event.is_set():
                break
            try:
                self._launch(task.key, number)
            except LaunchError as exc:
                if not self.members.elastic:
                    raise
                # The session to its host failed: the host is suspect (membership.py), like a
                # session lost while the task ran.
                attempt.sessions_lost.setdefault(task.host, time.time())
                self._fail(attempt, task.key, "; ".join(exc.lines), None)
                return None
            exits[task.key] = None
        self.standby.drop(run_ends=False)  # standbys no task of this attempt took
        started = self.clock()
        return _Watch(started, exits, ready={t.key for t in self.plan.tasks if t.port is None},
                      next_ready_check=started, next_back_check=started)

    def _watch(self, attempt: Attempt, watch: _Watch) -> None:
        """Poll the group until a phase ends the attempt (its state set)."""
        while not (self._interrupted(attempt) or self._exits(attempt, watch)):
            now = self.clock()
            if (self._readiness(attempt, watch, now) or self._hang(attempt, watch, now)
                    or self._membership(attempt, watch, now)):
                return
            if self._standby_acks(attempt):
                return
            self._standby_when_due(attempt, now)
            time.sleep(self.poll_interval)

    def _interrupted(self, attempt: Attempt) -> bool:
        if not self.stop_event.is_set():
            return False
        attempt.state = INTERRUPTED
        self.console.info("stopping every task (Ctrl-C again to kill at once)")
        return True

    def _exits(self, attempt: Attempt, watch: _Watch) -> bool:
        """New exits, and what they mean for the group: success, failure, a sidecar lost, a
        parameter_server worker restarted alone. True: the attempt is over."""
        exits = watch.exits
        for key, handle in self._handles.items():
            if exits.get(key) is None:
                code = handle.poll()
                if code is not None:
                    exits[key] = code
                    watch.order.append(key)
                    self.record.event(Event.EXIT, task=key, attempt=attempt.number, code=code, how=describe_exit(code))
        verdict = assess(self.plan.strategy, self.plan.success_task, exits, watch.order)
        for key in verdict.sidecar_failed:
            if key not in watch.warned_sidecars:
                watch.warned_sidecars.add(key)
                self.console.error(f"{key} (sidecar) failed: {describe_exit(exits[key])}; training goes on")
                self.record.event(Event.SIDECAR_FAILED, task=key, code=exits[key])
        if verdict.state == SUCCEEDED:
            attempt.state = SUCCEEDED
            return True
        if verdict.state == FAILED:
            self._fail_exit(attempt, verdict.failed, exits, watch.started)
            return True
        for key in verdict.restart_alone:
            if not self._restart_alone(attempt, key, exits, watch.order):
                return True
        return False

    def _readiness(self, attempt: Attempt, watch: _Watch, now: float) -> bool:
        """Until every task's port is open (checked every _READY_CHECK_EVERY s; runs once even
        when no task serves a port, e.g. single-host strategies). True: the attempt failed
        (watchdog.startup_timeout)."""
        if attempt.ready_after is not None or now < watch.next_ready_check:
            return False
        watch.next_ready_check = now + _READY_CHECK_EVERY
        for task in self.plan.tasks:
            if task.key not in watch.ready and watch.exits.get(task.key) is None and self.backend.port_open(task):
                watch.ready.add(task.key)
                self.record.event(Event.READY, task=task.key, attempt=attempt.number,
                                  after=round(now - watch.started, 3))
        if len(watch.ready) == len(self.plan.tasks):
            self._all_ready(attempt, now - watch.started)
            return False
        if now - watch.started <= self.watchdog.startup_timeout:
            return False
        missing = [t.key for t in self.plan.tasks if t.key not in watch.ready]
        ports = ", ".join(f"{k} ({self.plan.task(k).endpoint})" for k in missing)
        self._fail(attempt, missing[0], f"never came up: no TF server listening within watchdog.startup_timeout="
                   f"{self.watchdog.startup_timeout:g} s: {ports}", None, others=tuple(missing[1:]))
        return True

    def _all_ready(self, attempt: Attempt, after: float) -> None:
        """Every task is up: record it, hand over once (``on_ready``), start the warm standby."""
        attempt.ready_after = after
        self.record.event(Event.ATTEMPT_READY, attempt=attempt.number, after=round(after, 3))
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
            if now < self._standby_checked + _READY_CHECK_EVERY:
                return
            self._standby_checked = now
            keys = {t.key for t in self.plan.tasks}
            if not any(t.global_step is not None and t.start_global_step is not None
                       and t.global_step > t.start_global_step and t.attempt == attempt.number + 1
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
            self.record.event(Event.STANDBY_STOPPED, tasks=[key], reason="no answer to the promotion")
            self.backend.stop([handle], grace=0)
            try:
                self._launch(key, attempt.number, standby_ok=False)
            except LaunchError as exc:
                self._fail(attempt, key, f"starting it cold failed: {exc.lines[0]}", None)
                return True
        return False

    def _hang(self, attempt: Attempt, watch: _Watch, now: float) -> bool:
        """The hang watchdog. Its clock starts once every task is up: until then startup_timeout
        governs, and importing TensorFlow can be silent for many seconds. True: a task hung."""
        if self.watchdog.hang_timeout <= 0 or attempt.ready_after is None:
            return False
        hung = self._hung(now, watch.exits, since=watch.started + attempt.ready_after)
        if not hung:
            return False
        note = self._handles[hung].state_note()
        self._fail(attempt, hung, f"hung: no progress for {self.watchdog.hang_timeout:g} s (watchdog.hang_timeout)"
                   + (f"; {note}" if note else ""), None)
        return True

    def _membership(self, attempt: Attempt, watch: _Watch, now: float) -> bool:
        """Elastic: hosts dropped by discovery, lost hosts back (checked about once a second, once
        every task is up: a group stopped while it starts would save nothing). True: the attempt
        ends (REGROW), its tasks stopped with the usual grace (a graceful save)."""
        if not (self.members.elastic and attempt.ready_after is not None and now >= watch.next_back_check):
            return False
        watch.next_back_check = now + 1.0
        if any(t.training_done for t in self.view.snapshot().tasks.values()):
            # Training is over (the final evaluation and save run): a restart now would find no
            # backup (fit deletes it at its end) and train again from step 0, all of it, for a
            # host that came back in that window. The run ends as it is.
            return False
        if not self.members.changed(attempt.number):
            return False
        attempt.state = AttemptState.REGROW
        return True

    def _launch(self, key: str, number: int, standby_ok: bool = True) -> None:
        task = self.plan.task(key)
        with self._lock:
            self._tails[key] = collections.deque(maxlen=_TAIL_KEPT)
            self._activity[key] = self.clock()
        handle = self.standby.promote(task, self._env(number)) if standby_ok else None
        if handle is None:
            handle = self.backend.start(task, self._env(number), self._drain_line)
        self._handles[key] = handle
        self.record.task_started(key, attempt=number, **handle.info())
        self.record.event(Event.START, task=key, attempt=number, host=task.host, endpoint=task.endpoint,
                          **handle.info(), **self.record.log_offsets(key))

    def _env(self, number: int) -> dict[str, str]:
        return {envnames.RESTART_COUNT: str(number), envnames.RUN_ID: self.record.run_id}

    def _restart_alone(self, attempt: Attempt, key: str, exits: dict, order: list) -> bool:
        """ParameterServer: relaunch one dead worker on its address while training goes on
        (TensorFlow's coordinator recovers a worker that answers at its address again). Elastic
        runs first ask whether its host still answers: if not, the attempt fails and the host's
        loss moves the worker to a spare or shrinks the group to tasks.worker.min, from the last
        backup (membership.py). The coordinator cannot go on without a worker that never comes
        back: its recovery waits for every worker's address to answer (TensorFlow's
        cluster_coordinator.py: "TODO: support partial cluster recovery"; the chief hung in
        "Waiting for all global closures to be finished" when we left a lost worker out)."""
        code = exits[key]
        if self.members.elastic:
            host = self.plan.task(key).host
            if self._handles[key].session_lost is not None:
                # Its session was lost, not the task: its host is suspect (it may be shutting
                # down, its sshd still accepting), so the worker is not restarted onto it.
                self._fail(attempt, key, self._handles[key].state_note() or describe_exit(code), code)
                return False
            if self.backend.lost_hosts([host], 0.0, self.stop_event):
                self._fail(attempt, key, _host_gone(code, host), code)
                return False
        if self._worker_restarts >= self.restart.max_restarts:
            self._fail(attempt, key, describe_exit(code) + " (worker restart budget used up)", code)
            return False
        self._worker_restarts += 1
        self.console.info(
            f"{key} exited ({describe_exit(code)}); restarting it alone "
            f"({self._worker_restarts} of {self.restart.max_restarts}), training continues"
        )
        self.record.event(Event.TASK_RESTART, task=key, code=code, restart=self._worker_restarts)
        self._handles[key].signal(9)
        try:
            self._launch(key, attempt.number, standby_ok=False)  # standbys wait for the next group attempt
        except LaunchError as exc:
            # Its host failed the start (gone since the check above, or broken): that worker's
            # failure, not the run's. An elastic run leaves it out if its host is now lost.
            if self.members.elastic and self.backend.lost_hosts([host], 0.0, self.stop_event):
                self._worker_restarts -= 1  # a host lost spends no restart
                self._fail(attempt, key, _host_gone(code, host), code)
                return False
            self._fail(attempt, key, f"restarting it failed: {exc.lines[0]}", code)
            return False
        exits[key] = None
        order.remove(key)
        return True

    def _sessions_lost(self, attempt: Attempt) -> None:
        """A failed attempt's tasks whose sessions were lost (each still running polled once more:
        its host's connection may have dropped with the others'): their hosts, and when."""
        for handle in list(self._handles.values()):
            handle.poll()
            lost = handle.session_lost
            if lost is not None:
                host = handle.task.host
                attempt.sessions_lost[host] = min(lost, attempt.sessions_lost.get(host, lost))

    def _infra(self, attempt: Attempt) -> bool:
        """Elastic runs: a task's session was lost in this attempt (so far): its failure is the
        infrastructure's, and the membership line says it all (launcher/supervise/membership.py)."""
        return self.members.elastic and (bool(attempt.sessions_lost) or any(
            h.session_lost is not None for h in self._handles.values()))

    def _hung(self, now: float, exits: dict, since: float) -> Optional[str]:
        with self._lock:
            stale = [
                (max(since, self._activity[k]), k)
                for k in self._handles
                if exits.get(k) is None and hang_watched(k)
                and now - max(since, self._activity.get(k, now)) > self.watchdog.hang_timeout
            ]
        if not stale:
            return None
        # A stopped process is the likeliest culprit; otherwise the one silent the longest,
        # except tasks that are silent by design (PSS servers), which only count when stopped.
        for _, key in sorted(stale):
            if self._handles[key].state_note():
                return key
        silent = [(t, k) for t, k in stale if not silent_by_design(self.plan.strategy, k)]
        return sorted(silent)[0][1] if silent else None

    def _state_note(self, key: str) -> str:
        return self._handles[key].state_note()

    def _fail_exit(self, attempt: Attempt, failed: tuple, exits: dict, started: float) -> None:
        """An exit failed the attempt: blame the root cause (launcher/supervise/blame.py)."""
        since = started + attempt.ready_after if attempt.ready_after is not None else None
        now = self.clock()
        with self._lock:
            tails = {k: tuple(self._tails.get(k, ())) for k in failed}
            activity = dict(self._activity)
        notes = peer_notes(failed[0], list(self._handles), exits, self._state_note, now=now, since=since,
                           activity=activity, hang_timeout=self.watchdog.hang_timeout, strategy=self.plan.strategy)
        fault = blame_exit(failed, exits, tails, notes, self._state_note)
        self._fail(attempt, fault.key, fault.reason, fault.code, others=fault.others, consequences=fault.consequences)

    def _fail(self, attempt: Attempt, key: str, reason: str, code: Optional[int], others: tuple = (),
              consequences: tuple = (), final: bool = False) -> None:
        shown = [key] + [k for k, _ in consequences]  # whose exception and last lines the report shows
        with self._lock:
            tails = {k: tuple(self._tails.get(k, ())) for k in shown}
        tail = tails[key]
        attempt.state = FAILED
        attempt.failure = Failure(key=key, reason=reason, code=code, last_lines=tail[-TAIL:], others=tuple(others),
                                  consequences=tuple(consequences), final=final)
        if not self._infra(attempt):  # (else: recorded, and said in the membership's one line)
            self.console.error(failed_line(key, reason, attempt.number, self.restart.max_restarts))
            for line in consequence_lines(key, consequences):
                self.console.info(line)
            report = [line for k in shown
                      for line in report_lines(k, tails[k], self.record.log_path(k), self.console.verbose,
                                               self._given_gpus(k))]
            if report:
                self.console.block(report)
            if others:
                self.console.info(also_failed_line(others))
        self.record.event(Event.FAILURE, task=key, attempt=attempt.number, reason=reason, code=code,
                          last_lines=list(tail[-TAIL:]), others=list(others),
                          consequences={k: c for k, c in consequences},
                          errors=list(exception_lines(tail)), hint=hint(tail, self._given_gpus(key)))

    def _gpu_watch(self) -> Optional[GpuWatch]:
        """Each GPU task's memory and utilisation from nvidia-smi (launcher/supervise/gpuwatch.py), where the
        plan knows its GPUs on this machine (the local backend: tasks are process groups here)."""
        gpu_ids = {t.key: t.gpus.ids for t in self.plan.tasks if t.gpus.ids}
        if not gpu_ids or self.plan.backend != "local":
            return None

        def groups() -> dict[str, int]:
            out = {}
            for key, handle in list(self._handles.items()):
                pgid = handle.info().get("pgid")
                if isinstance(pgid, int):
                    out[key] = pgid
            return out

        def on_sample(figures) -> None:
            self.record.event(Event.GPU_USAGE, tasks={k: list(v) for k, v in figures.items()})

        return GpuWatch(groups, gpu_ids, on_sample, self.console.info).start()

    def _given_gpus(self, key: str) -> bool:
        """Whether the plan gave ``key`` GPUs: some on a known host, or a count where it starts."""
        try:
            g = self.plan.task(key).gpus
        except KeyError:
            return False
        return bool(g.ids) or (g.ids is None and g.required)

    def _drain_line(self, key: str, line: str, sink: Optional[Callable[[str, str], None]] = None) -> None:
        """The sink every backend's output reader calls. It never raises: a reader that stopped
        would leave the task blocked writing to a full pipe (a full disk, a closed terminal)."""
        try:
            (sink or self._on_line)(key, line)
        except Exception as exc:  # noqa: BLE001
            if key not in self._sink_failed:
                self._sink_failed.add(key)
                try:
                    self.console.error(f"{key}: its output can no longer be shown or logged "
                                       f"({exc_text(exc)}); it is still read, and the run goes on")
                except Exception:  # noqa: BLE001
                    pass

    def _on_line(self, key: str, line: str) -> None:
        with self._lock:
            tail = self._tails.get(key)
            if tail is not None:
                tail.append(line)
            self._activity[key] = self.clock()
        self.record.log_line(key, line)
        self.view.line(key, line, time.time())
        self.console.task_line(key, line)

    def _stop_all(self, grace: float) -> None:
        handles = list(self._handles.values())
        if not handles:
            return
        running = [h.key for h in handles if h.poll() is None]
        if running:
            how = "SIGKILL" if grace <= 0 else f"SIGTERM, SIGKILL after {grace:g} s"
            self.console.info(f"stopping {', '.join(running)} ({how})")
        left = self.backend.stop(handles, grace)
        for key in running:
            self.record.event(Event.STOPPED, task=key, code=self._handles[key].poll())
        if left:
            self.console.error(f"could not confirm that {', '.join(left)} stopped; check the host")
            self.record.event(Event.STOP_UNCONFIRMED, tasks=left)
        self._handles.clear()

    # -------------------------------------------------------------- report

    def _finish(self, code: int, outcome: Outcome, reason: str = "") -> int:
        self.standby.drop()  # before the outcome, which stays the record's last event
        where = locations(self.record.state_dir, self.record.logs_dir)
        self.record.event(Event.OUTCOME, outcome=outcome, exit_code=code, attempts=len(self.attempts), reason=reason,
                          tasks=self.view.outcome_facts(), locations=where)
        view = self.view.snapshot()
        self.console.report(task_table(view) + gpu_peak_lines(view) + self._summary() + location_lines(where))
        if outcome == Outcome.SUCCEEDED:
            self.console.info(f"run succeeded after {len(self.attempts)} attempt(s); record: {self.record.dir}")
        elif outcome == Outcome.INTERRUPTED:
            self.console.info(f"interrupted; every task stopped; record: {self.record.dir}")
        else:
            self.console.info(f"run failed; record: {self.record.dir}")
        return code

    def _summary(self) -> list[str]:
        replans = self.members.replans
        changes = self.view.snapshot().host_changes if replans else []
        return summary_lines(self.attempts, self.members.first_plan, replans, changes)


def _host_gone(code: Optional[int], host: str) -> str:
    return f"{describe_exit(code) if code is not None else 'gone'}; its host {host} does not answer"
