"""The supervisor loop (after torchelastic's ``_invoke_run``): start the group, poll, reduce to
a group state, apply the restart policy, and always tear down in ``finally``.

Threads only read task output; every decision is made here, on the calling thread. This module
holds the algorithm: ``run`` (attempts until an outcome, and what follows each: retry, move,
give up), ``_run_attempt`` (start the group, watch it, stop it), and the tasks' stop.
``Supervisor`` has no base classes: it builds the run's context once (context.py: what every part
reads) and owns its parts, each given the context and the few collaborators it uses: the task
group (group.py: handles, task output, save marks), the output sink (output.py), the tasks' starts
(starts.py), one attempt's watch phases (phases.py: exits, readiness, hang, membership), the warm
standby wiring (prewarm.py: when and where the next attempt's standbys start), the reports
(outcome.py: a failed attempt's, the run's outcome and final report), the membership
(membership.py: elastic runs' host changes and the plan in use) and the standbys (standby.py);
blame.py says who failed an attempt. The parts call nothing of the supervisor's: what it acts on
comes back as their answers (an attempt over, ``AllReady``, the membership's ``Ended``).

The supervisor prints nothing: what it does and decides is written to the record as events
(launcher/record/events.py), and the app makes the console a listener on the record
(launcher/app/up.py), which says them (launcher/ui/eventlines.py) as ``attach`` does later.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from launcher.backends.base import Backend
from launcher.errors import AttemptImpossible, LaunchError
from launcher.plan.build import Plan
from launcher.record import events as ev
from launcher.record.feed import SnapshotWriter
from launcher.record.states import AttemptState, Outcome
from launcher.record.view import RunModel
from launcher.record.writer import RunRecord
from launcher.spec.model import Restart, Watchdog
from launcher.supervise.context import RunContext
from launcher.supervise.gpuwatch import GpuWatch
from launcher.supervise.group import AttemptGroup
from launcher.supervise.membership import Ended, HostsGiven, Membership, Moved
from launcher.supervise.outcome import Reporter
from launcher.supervise.output import TaskOutput
from launcher.supervise.phases import AllReady, AttemptPhases, AttemptWatch
from launcher.supervise.policy import (FAILED, SUCCEEDED, Attempt, backoff_delay, preempted, retry_decision,
                                      too_many_preemptions)
from launcher.supervise.prewarm import Prewarm
from launcher.supervise.standby import WarmStandby, decide as standby_decision
from launcher.supervise.starts import Starter

INTERRUPTED = AttemptState.INTERRUPTED
# Seconds, all tasks together, that the end of an attempt waits for output its readers still hold.
DRAIN_BOUND = 5.0


class Supervisor:
    """One run of a plan on a backend, from the first attempt to the outcome. Its parts, each given
    the run's context (context.py) and the collaborators it uses: ``group`` (the tasks' handles and
    output), ``output`` (the line sink), ``members`` (the plan in use), ``standby``, ``starter``
    (starts.py), ``report`` (outcome.py), ``prewarm`` and ``phases``."""

    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        record: RunRecord,
        restart: Restart,
        watchdog: Watchdog,
        stop_event: Optional[threading.Event] = None,
        poll_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        given: HostsGiven = HostsGiven(),
    ) -> None:
        """``given``: what the hosts start from (membership.py: the spec, the hosts it lists, where
        discovery runs, and the hosts a worker group with a min started without, and why)."""
        self.backend = backend
        self.record = record
        self.restart = restart
        self.watchdog = watchdog
        self.stop_event = stop_event or threading.Event()
        self.stacks_wanted = threading.Event()  # `tfcluster stacks` asked for every live task's stacks
        self.hurry_event = threading.Event()
        self.stop_reason = ""  # why it was stopped, when not by Ctrl-C (``stop``)
        # The run as the live panel and the final report show it, fed by events and task lines.
        self.view = RunModel()
        record.listeners.append(self.view.event)
        # What every part reads (context.py), built once.
        ctx = RunContext(record=record, view=self.view, backend=backend, restart=restart,
                         watchdog=watchdog, clock=clock, poll_interval=poll_interval, stop_event=self.stop_event,
                         hurry_event=self.hurry_event)
        # Elastic host membership (lost hosts, hosts back, discovery) and the plan in use.
        self.members = Membership(ctx, plan, given)
        self.poll_interval = poll_interval
        self.clock = clock
        self.attempts: list[Attempt] = []
        self.group = AttemptGroup(clock)  # the attempt's handles, task output and save marks
        self.output = TaskOutput(ctx, self.group)  # where every task's lines go (output.py)
        # Warm standby: the next attempt's processes, started early, waiting for SIGUSR1.
        self.standby = WarmStandby(ctx, self.output)
        standby_on, self.standby_why = standby_decision(
            restart, [t.command for t in plan.tasks], backend.capabilities, backend.name,
            elastic=self.members.elastic,
            refused=(backend.hosts.standby_off(given.spec) if given.spec is not None
                     and backend.capabilities.warm_standby else None))
        # The tasks' starts: promoted or cold, recorded (starts.py).
        self.starter = Starter(ctx, self.group, self.members, self.standby, self.output)
        # A failed attempt's report, the run's outcome and final report (outcome.py).
        self.report = Reporter(ctx, self.group, self.members, self.standby, self.attempts)
        # When and where the next attempt's standbys start (prewarm.py).
        self.prewarm = Prewarm(ctx, standby_on, self.standby, self.members, self.starter, self.report)
        # One attempt's watch phases: exits, readiness, hang, membership (phases.py).
        self.phases = AttemptPhases(ctx, self.group, self.members, self.starter, self.report)
        # Called once, on this thread, the first time every task of an attempt is ready
        # (``up --detach`` hands the run over to the background then).
        self.on_ready: Optional[Callable[[], None]] = None

    @property
    def plan(self) -> Plan:
        """The plan in use: the first, or the latest membership change's."""
        return self.members.plan

    # -------------------------------------------------------------- public

    def run(self) -> Outcome:
        """Run attempts until success, a permanent failure, the restart budget, or a stop: how
        the run ended (the CLI alone turns it into an exit code)."""
        elastic = self.members.spares()  # (spares, group: the elastic fields)
        self.record.write(ev.RunStart(run_id=self.record.run_id, name=self.plan.name, strategy=self.plan.strategy,
                                      backend=self.plan.backend, tasks=list(self.plan.keys),
                                      run_dir=str(self.record.dir), max_restarts=self.restart.max_restarts,
                                      warm_standby=self.standby_why, spares=elastic.get("spares"),
                                      group=elastic.get("group"), hosts=sorted({t.host for t in self.plan.tasks})))
        snapshots = SnapshotWriter(self.record.dir).start()  # status and attach replay from its last
        gpu_watch = self._gpu_watch()
        self.members.start()
        try:
            number = 0  # attempts so far - 1 (TFCLUSTER_RESTART_COUNT)
            failures = 0  # failed attempts that count against restart.max_restarts
            preemptions = 0  # attempts whose tasks saved for a preemption (restart.preemption_exit_codes)
            while True:
                attempt = self._run_attempt(number)
                if attempt.state == SUCCEEDED:
                    try:
                        self.backend.tasks.collect_results()
                    except LaunchError as exc:
                        self.record.write(ev.ResultsNotCollected(problems=list(exc.lines)))
                        return self._finish(Outcome.FAILED, reason="; ".join(exc.lines))
                    return self._finish(Outcome.SUCCEEDED)
                if attempt.state == INTERRUPTED:
                    return self._finish(Outcome.INTERRUPTED, reason=self.stop_reason)
                if attempt.state == AttemptState.REGROW:
                    ended = self.members.regrow(number)
                    if ended is not None:  # no spare left, too many losses
                        return self._finish(ended.outcome, reason=ended.reason)
                    number += 1  # a membership change, not a failure
                    continue
                failure = attempt.failure
                assert failure is not None
                if self.members.elastic:
                    moved = self.members.after_failure(number, attempt.sessions_lost)
                    if isinstance(moved, Ended):  # no spare left, too many losses, interrupted
                        return self._finish(moved.outcome, reason=moved.reason)
                    if moved is Moved.RESTART:
                        number += 1  # a host loss is the infrastructure's, not a failure of the training
                        continue
                if preempted(failure, self.restart.preemption_exit_codes):
                    preemptions += 1  # its tasks saved and asked for a restart: not a failure of the training
                    if preemptions > self.restart.max_preemptions:
                        why = too_many_preemptions(preemptions, self.restart.max_preemptions)
                        self.record.write(ev.GaveUp(reason=why))
                        return self._finish(Outcome.FAILED, reason=why)
                    number += 1
                    if self._restart_group(number, failure, 0.0, preemption=preemptions):
                        return self._finish(Outcome.INTERRUPTED, reason=self.stop_reason)
                    continue
                retryable, why = retry_decision(failure, self.restart.permanent_exit_codes)
                if not retryable:
                    self.record.write(ev.GaveUp(task=failure.key, reason=why, final=failure.final))
                    return self._finish(Outcome.FAILED, reason=why)
                if failures >= self.restart.max_restarts:
                    why = (f"gave up after {number + 1} attempt(s): restart.max_restarts is "
                           f"{self.restart.max_restarts}; raise it to retry more")
                    self.record.write(ev.GaveUp(reason=why))
                    return self._finish(Outcome.FAILED, reason=why)
                number += 1
                failures += 1
                delay = backoff_delay(failures, self.restart.backoff, self.restart.max_backoff)
                if self._restart_group(number, failure, delay, restart=failures):
                    return self._finish(Outcome.INTERRUPTED, reason=self.stop_reason)
        finally:
            self.members.close()
            self._stop_all(grace=0)
            self.standby.drop()
            self.backend.close()
            if gpu_watch is not None:
                gpu_watch.close()
            snapshots.close()  # the last one: the record as it ends

    def _restart_group(self, number: int, failure, delay: float, restart: Optional[int] = None,
                       preemption: Optional[int] = None) -> bool:
        """Record the whole group's restart as attempt ``number`` after ``delay`` s: the ``restart``-th
        counted against restart.max_restarts, or the ``preemption``-th after the tasks saved for a
        preemption (not counted); True when a stop came during the delay."""
        fresh = self.members.restart_on_fresh_ports(number)  # (slurm: the old steps leave their nodes late)
        self.record.write(ev.GroupRestart(attempt=number, delay=delay, after=failure.key, reason=failure.reason,
                                          ports={t.key: t.port for t in self.plan.tasks} if fresh else None,
                                          restart=restart, max_restarts=self.restart.max_restarts if restart else None,
                                          preemption=preemption, code=failure.code if preemption else None))
        return bool(delay) and self.stop_event.wait(delay)

    def interrupt(self) -> None:
        """First call: stop gracefully (SIGTERM, grace, SIGKILL). Second call: SIGKILL now."""
        if self.stop_event.is_set():
            self.hurry_event.set()
            for handle in list(self.group.handles.values()):
                handle.signal(9)
        self.stop_event.set()

    def stop(self, reason: str) -> None:
        """Stop gracefully, as a first Ctrl-C, however often it is called and whatever came
        before: a closed terminal says so several times (SIGHUP, each failed write to it), and
        none of it is a user asking to kill at once. ``reason`` goes into the outcome."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
        self.stop_event.set()

    def _all_ready(self, attempt: Attempt, after: float) -> None:
        """Every task is up (the readiness phase said ``AllReady``): record it, hand over once
        (``on_ready``), arm the warm standby."""
        attempt.ready_after = after
        self.record.write(ev.AttemptReady(attempt=attempt.number, after=round(after, 3)))
        if self.on_ready is not None:
            on_ready, self.on_ready = self.on_ready, None
            on_ready()
        self.prewarm.arm(attempt)

    def _finish(self, outcome: Outcome, reason: str = "") -> Outcome:
        """End the run: its outcome and final report."""
        return self.report.finish(outcome, reason=reason)

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
            failure = attempt.failure
            self.record.write(ev.AttemptEnded(attempt=number, began=attempt.started, ended=attempt.ended,
                                              state=attempt.state, task=failure.key if failure else None,
                                              reason=failure.reason if failure else ""))
            if attempt.state == FAILED and self.members.elastic:
                self.phases.sessions_lost(attempt)
                self.prewarm.watch_spares(attempt)  # a spare lost meanwhile is no place for a move
                self.members.look_ahead(attempt.sessions_lost)  # while the survivors save
            hung = attempt.state == FAILED and attempt.failure is not None and attempt.failure.hung
            if hung and attempt.failure.key in self.group.handles:
                self.group.handles[attempt.failure.key].signal(9)  # the stuck task; the others save where they can
            elif attempt.state == FAILED:
                self.phases.let_survivors_save(attempt)
            at_once = (attempt.state == FAILED and not hung) or self.hurry_event.is_set()
            self._stop_all(0 if at_once else self.watchdog.stop_grace, killed=attempt.failure.key if hung else None)

    def _start_group(self, attempt: Attempt) -> Optional[AttemptWatch]:
        """Prepare the attempt and start every task. None: the attempt already failed."""
        number = attempt.number
        self.prewarm.due = None  # (an earlier attempt's, not started before it ended)
        try:
            self.backend.tasks.prepare_attempt(number)
        except LaunchError as exc:
            self.report.fail(attempt, "prepare", "; ".join(exc.lines), None, final=isinstance(exc, AttemptImpossible))
            return None
        exits: dict[str, Optional[int]] = {}
        # Every host's standbys promoted at once (each task's log offsets fixed first), then the rest started.
        starter = self.starter
        offsets = {t.key: starter.new_process(t.key) for t in self.plan.tasks}
        promoted = self.standby.promote_all(self.plan.tasks, starter.env(number))
        with self.record.tasks_starting():  # launcher.json once for the group
            for task in self.plan.tasks:
                if self.stop_event.is_set():
                    self.backend.tasks.stop([promoted.pop(k) for k in list(promoted) if k not in exits], grace=0)
                    break
                try:
                    starter.launch(task.key, number, ready=(offsets[task.key], promoted.pop(task.key, None)))
                except LaunchError as exc:
                    if not self.members.elastic:
                        raise
                    # The session to its host failed: the host is suspect (membership.py), like a
                    # session lost while the task ran.
                    attempt.sessions_lost.setdefault(task.host, time.time())
                    self.report.fail(attempt, task.key, "; ".join(exc.lines), None)
                    return None
                exits[task.key] = None
        self.standby.drop(run_ends=False)  # standbys no task of this attempt took
        started = self.clock()
        return AttemptWatch(started, exits, ready={t.key for t in self.plan.tasks if t.port is None},
                            next_ready_check=started, next_back_check=started)

    def _watch(self, attempt: Attempt, watch: AttemptWatch) -> None:
        """Poll the group until a phase ends the attempt (its state set)."""
        phases = self.phases
        while not (self._interrupted(attempt) or phases.exits(attempt, watch)):
            now = self.clock()
            up = phases.readiness(attempt, watch, now)
            if isinstance(up, AllReady):
                self._all_ready(attempt, up.after)
            elif up:
                return
            if phases.stopped(attempt, watch, now) or phases.hang(attempt, watch, now) \
                    or phases.membership(attempt, watch, now):
                return
            if self.prewarm.acks(attempt):
                return
            self.prewarm.when_due(attempt, now)
            self.prewarm.watch_spares(attempt, now)
            phases.straggle(attempt, now)
            if self.stacks_wanted.is_set():  # `tfcluster stacks` asked
                self.stacks_wanted.clear()
                phases.hangs.snapshot(watch.exits)
            time.sleep(self.poll_interval)

    def _interrupted(self, attempt: Attempt) -> bool:
        if not self.stop_event.is_set():
            return False
        attempt.state = INTERRUPTED
        self.record.write(ev.StopRequested(reason=self.stop_reason))
        return True

    # -------------------------------------------------------------- the tasks: stop

    def _gpu_watch(self) -> Optional[GpuWatch]:
        """Each GPU task's memory and utilisation from nvidia-smi (launcher/supervise/gpuwatch.py), where the
        plan knows its GPUs on this machine (Capabilities.gpus_here: tasks are process groups here)."""
        gpu_ids = {t.key: t.gpus.ids for t in self.plan.tasks if t.gpus.ids}
        if not gpu_ids or not self.backend.capabilities.gpus_here:
            return None

        def groups() -> dict[str, int]:
            out = {}
            for key, handle in list(self.group.handles.items()):
                pgid = handle.info().local_group()
                if pgid is not None:
                    out[key] = pgid
            return out

        def on_sample(figures) -> None:
            self.record.write(ev.GpuUsage(tasks={k: list(v) for k, v in figures.items()}))

        def on_give_up(misses: int, timeout: float) -> None:
            self.record.write(ev.GpuWatchEnded(misses=misses, timeout=timeout))

        return GpuWatch(groups, gpu_ids, on_sample, on_give_up).start()

    def _saved(self, key: str) -> bool:
        """Whether ``key`` said its agreed save is written (tfcluster-preempted) in this attempt:
        a stop awaits its exit no longer (Tasks.stop, SAVED_LINGER)."""
        with self.group.lock:
            return key in self.group.saved

    def _stop_all(self, grace: float, killed: Optional[str] = None) -> None:
        """Stop every task of the attempt (``grace``: SIGTERM first); ``killed``: the stuck task
        already SIGKILLed at a hang, stopped with the others but not said or recorded as stopped
        (its failure says what became of it)."""
        handles = list(self.group.handles.values())
        if not handles:
            return
        running = [h.key for h in handles if h.poll() is None and h.key != killed]
        if running:
            self.record.write(ev.TasksStopping(tasks=running, grace=max(0.0, grace)))
        left = self.backend.tasks.stop(handles, grace, saved=self._saved)
        # Each stopped task's last lines into its log before the attempt (or the run) ends: a reader
        # thread the load held up past poll()'s short wait would otherwise log them after the next
        # attempt's offsets, or die with this process when the run ends, the lines lost.
        deadline = time.monotonic() + DRAIN_BOUND
        for h in handles:
            if h.poll() is not None:
                h.drain(deadline - time.monotonic())
        # Every task of the attempt ends in the record once: those stopped now, and those that
        # exited since the last look at the exits (a survivor whose saved line ended the wait for
        # its save, and whose exit came a moment later).
        for h in handles:
            if h.key not in self.group.ended and h.key != killed and (h.key in running or h.poll() is not None):
                self.record.write(ev.Stopped(task=h.key, code=h.poll()))
                self.group.ended.add(h.key)
        if left:
            self.record.write(ev.StopUnconfirmed(tasks=left))
        self.group.handles.clear()
