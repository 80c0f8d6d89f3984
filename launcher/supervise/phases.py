"""One attempt's watch phases, which the supervisor's loop (loop.py) calls in turn on its own
thread until one ends the attempt: new exits and what they mean for the group (success, failure,
a sidecar lost, a parameter_server worker restarted alone), readiness (watchdog.startup_timeout),
a task's process stopped by a signal (watchdog.stopped_timeout), the hang watchdog
(watchdog.hang_timeout) and, in elastic runs, membership changes while every
task is up. Each phase reads and updates the attempt's ``AttemptWatch`` and returns True when the
attempt is over (its state set).

``AttemptPhases`` is a part of ``Supervisor`` (loop.py): it owns the count of workers restarted
alone and is given the run's context (context.py: the backend, record, view, the restart
and watchdog settings, the stop and hurry events) and the collaborators it uses: the task group,
the membership and its plan, the tasks' starts (starts.py: a worker restarted alone) and the
reports (outcome.py: an attempt's failure). It calls nothing of the supervisor's: what the
supervisor acts on comes back as its phases' answers (the attempt over, or ``AllReady``).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Optional, Union

from launcher.errors import LaunchError
from launcher.plan.build import Plan
from launcher.system.procinfo import describe_exit
from launcher.record import events as ev
from launcher.record.states import AttemptState
from launcher.supervise.context import RunContext
from launcher.supervise.group import AttemptGroup
from launcher.supervise.hangwatch import HangWatch
from launcher.supervise.membership import Membership
from launcher.supervise.outcome import Reporter
from launcher.supervise.policy import FAILED, SUCCEEDED, Attempt, assess, fails_group_alone, stopped_too_long
from launcher.supervise.starts import Starter
from launcher.supervise.straggler import Lag, Sample, Stragglers

READY_CHECK_EVERY = 0.5
# A lost session's survivors (``_let_survivors_save``): how many of their step times, and at
# least how many seconds, they get to start the save a preemption's SIGTERM agreed on. Two
# steps reach the agreement (the preempted worker's SIGTERM lands mid-step; the next step
# all-reduces the flags); the third covers the signal's way here and over SSH.
SAVE_LOOK = 3
SAVE_LOOK_MIN = 0.5


@dataclass
class AttemptWatch:
    """One attempt's running state, which its phases read and update."""

    started: float  # the clock when every task had been started
    exits: dict[str, Optional[int]]  # key -> exit code, None while it runs
    ready: set[str]  # tasks whose port is open (or that serve none)
    next_ready_check: float
    next_back_check: float
    order: list[str] = field(default_factory=list)  # keys in the order they exited
    warned_sidecars: set[str] = field(default_factory=set)
    stopped_since: dict[str, float] = field(default_factory=dict)  # key -> the clock when its wrapper said it is stopped


@dataclass(frozen=True)
class AllReady:
    """What ``readiness`` returns the first time every task of the attempt is up, ``after``
    seconds from its start: the supervisor records it and acts on it (the hand-over of ``up
    --detach``, the next attempt's standbys)."""

    after: float


class AttemptPhases:
    def __init__(self, ctx: RunContext, group: AttemptGroup, members: Membership, starter: Starter,
                 report: Reporter) -> None:
        self.group, self.members, self.backend = group, members, ctx.backend
        self.record, self.view = ctx.record, ctx.view
        self.restart, self.watchdog = ctx.restart, ctx.watchdog
        self.stop_event, self.hurry_event = ctx.stop_event, ctx.hurry_event
        self.clock, self.poll_interval = ctx.clock, ctx.poll_interval
        self.starter, self.report = starter, report
        self.worker_restarts = 0  # parameter_server workers restarted alone, run-wide
        self.sidecar_restarts = 0  # evaluators restarted alone, run-wide
        self.hangs = HangWatch(group=group, backend=ctx.backend, record=ctx.record, plan=lambda: self.members.plan,
                               watchdog=ctx.watchdog, clock=ctx.clock)
        self._stragglers: Optional[tuple[int, Stragglers]] = None  # (attempt, its samples)

    @property
    def plan(self) -> Plan:
        return self.members.plan

    def exits(self, attempt: Attempt, watch: AttemptWatch) -> bool:
        """New exits, and what they mean for the group: success, failure, a sidecar restarted alone
        or lost, a parameter_server worker restarted alone. True: the attempt is over."""
        exits = watch.exits
        for key, handle in self.group.handles.items():
            if exits.get(key) is None:
                code = handle.poll()
                if code is not None:
                    exits[key] = code
                    watch.order.append(key)
                    self.record.write(ev.Exit(task=key, attempt=attempt.number, code=code, how=describe_exit(code)))
                    self.group.ended.add(key)
        verdict = assess(self.plan.strategy, self.plan.success_task, exits, watch.order)
        for key in verdict.sidecar_failed:
            if key not in watch.warned_sidecars and not self._restart_sidecar(attempt, key, exits, watch.order):
                watch.warned_sidecars.add(key)
                self.record.write(ev.SidecarFailed(task=key, code=exits[key]))
        if verdict.state == SUCCEEDED:
            attempt.state = SUCCEEDED
            return True
        if verdict.state == FAILED:
            self.report.fail_exit(attempt, verdict.failed, exits, watch.started)
            return True
        for key in verdict.restart_alone:
            if not self._restart_alone(attempt, key, exits, watch.order):
                return True
        return False

    def readiness(self, attempt: Attempt, watch: AttemptWatch, now: float) -> Union[bool, AllReady]:
        """Until every task's port is open (checked every READY_CHECK_EVERY s; runs once even
        when no task serves a port, e.g. single-host strategies). True: the attempt failed
        (watchdog.startup_timeout); ``AllReady``: every task is up now (once an attempt)."""
        if attempt.ready_after is not None or now < watch.next_ready_check:
            return False
        watch.next_ready_check = now + READY_CHECK_EVERY
        for task in self.plan.tasks:
            if task.key not in watch.ready and watch.exits.get(task.key) is None and self.backend.tasks.port_open(task):
                watch.ready.add(task.key)
                self.record.write(ev.Ready(task=task.key, attempt=attempt.number,
                                           after=round(now - watch.started, 3)))
        if len(watch.ready) == len(self.plan.tasks):
            return AllReady(now - watch.started)
        if now - watch.started <= self.watchdog.startup_timeout:
            return False
        missing = [t.key for t in self.plan.tasks if t.key not in watch.ready]
        ports = ", ".join(f"{k} ({self.plan.task(k).endpoint})" for k in missing)
        self.report.fail(attempt, missing[0], f"never came up: no TF server listening within watchdog.startup_timeout="
                   f"{self.watchdog.startup_timeout:g} s: {ports}", None, others=tuple(missing[1:]))
        return True

    def hang(self, attempt: Attempt, watch: AttemptWatch, now: float) -> bool:
        """The hang watchdog (hangwatch.py). Its clock starts once every task is up: until then
        startup_timeout governs, and importing TensorFlow can be silent for many seconds. True:
        the group stopped progressing (or, hang_timeout in seconds, a task that reports no count
        was silent that long); the task that stopped it failed."""
        if self.watchdog.hang_timeout == 0 or attempt.ready_after is None:
            return False
        since = watch.started + attempt.ready_after
        stall = self.hangs.stalled(now, watch.exits, since)
        if stall is not None:
            with self.group.lock:
                counts = dict(self.group.counts)
            self.record.write(ev.GroupStalled(tasks=list(stall.keys), idle=max(0.0, stall.idle), limit=max(0.0, stall.limit),
                                              what=stall.what, counts=counts))
            found = self.hangs.find(attempt.number, watch.exits, stall)
            key = found.key or stall.keys[0]
            self.report.fail(attempt, key, found.reason, None, hung_since=found.hung_since,
                             stack=found.stacks.get(key, ""))
            return True
        hung = self.hangs.silent(now, watch.exits, since)
        if not hung:
            return False
        note = self.group.handles[hung].state_note()
        self.report.fail(attempt, hung, f"hung: no progress for {self.watchdog.hang_timeout:g} s (watchdog.hang_timeout)"
                   + (f"; {note}" if note else ""), None)
        return True

    def stopped(self, attempt: Attempt, watch: AttemptWatch, now: float) -> bool:
        """A task's process stopped by a signal (its wrapper's word: TaskHandle.stopped) for
        watchdog.stopped_timeout: killed where its death is restarted alone (policy.py
        ``fails_group_alone``), else the attempt fails on it at once. True: the attempt failed."""
        for key, handle in self.group.handles.items():
            if watch.exits.get(key) is None and handle.stopped:
                watch.stopped_since.setdefault(key, now)
            else:
                watch.stopped_since.pop(key, None)
        key = stopped_too_long(watch.stopped_since, now, self.watchdog.stopped_timeout)
        if key is None:
            return False
        seconds = now - watch.stopped_since.pop(key)
        alone = not fails_group_alone(self.plan.strategy, self.plan.success_task, watch.exits, key)
        self.record.write(ev.ProcessStopped(task=key, seconds=max(0.0, seconds), limit=self.watchdog.stopped_timeout,
                                            killed=alone))
        if alone:
            self.group.handles[key].signal(signal.SIGKILL)  # (its exit is then restarted alone, as any)
            return False
        self.report.fail(attempt, key, f"process is stopped (SIGSTOP?) for {seconds:.0f} s "
                                       f"(watchdog.stopped_timeout {self.watchdog.stopped_timeout:g} s)", None)
        return True

    def straggle(self, attempt: Attempt, now: float) -> None:
        """A task consistently behind the others (straggler.py), recorded once when named and once
        when it caught up: a straggler event (``status`` shows it while it lasts)."""
        if self._stragglers is None or self._stragglers[0] != attempt.number:
            self._stragglers = (attempt.number, Stragglers(self.plan.strategy, self.watchdog.straggler_after))
        trainers = [k for k in self.group.handles if k.startswith(("chief:", "worker:"))]  # (not the evaluator)
        with self.group.lock:
            sample = Sample(now, {k: self.group.counts[k] for k in trainers if k in self.group.counts},
                            {k: self.group.inside[k] for k in trainers if k in self.group.inside},
                            {f"worker:{i}": n for counts in self.group.closures.values() for i, n in counts.items()})
        said = self._stragglers[1].sample(sample)
        if isinstance(said, Lag):
            self.record.write(ev.Straggler(task=said.key, why=said.why))
        elif said is not None:
            self.record.write(ev.Straggler(task=said))

    def membership(self, attempt: Attempt, watch: AttemptWatch, now: float) -> bool:
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

    def _restart_sidecar(self, attempt: Attempt, key: str, exits: dict, order: list) -> bool:
        """The evaluator, dead while training goes on, restarted alone (its standby promoted where
        one waits, and a new one made), up to restart.max_restarts times a run; not where its exit
        code is permanent (restart.permanent_exit_codes: what a restart would repeat) or the run is
        stopping. False: it stays failed, and training goes on without it (said by the caller)."""
        code = exits[key]
        if (code in self.restart.permanent_exit_codes or self.sidecar_restarts >= self.restart.max_restarts
                or self.stop_event.is_set()):
            return False
        self.sidecar_restarts += 1
        self.record.write(ev.TaskRestart(task=key, code=code, restart=self.sidecar_restarts,
                                         max_restarts=self.restart.max_restarts, sidecar=True))
        self.group.handles[key].signal(9)  # what is left of its group
        try:
            self.starter.launch(key, attempt.number, alone=True)
        except LaunchError as exc:
            self.record.write(ev.RestartFailed(task=key, problem=exc.lines[0]))
            return False
        exits[key] = None
        order.remove(key)
        return True

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
            if self.group.handles[key].session_lost is not None:
                # Its session was lost, not the task: its host is suspect (it may be shutting
                # down, its sshd still accepting), so the worker is not restarted onto it.
                self.report.fail(attempt, key, self.group.handles[key].state_note() or describe_exit(code), code)
                return False
            if self.backend.hosts.lost([host], 0.0, self.stop_event):
                self.report.fail(attempt, key, _host_gone(code, host), code)
                return False
        if self.worker_restarts >= self.restart.max_restarts:
            self.report.fail(attempt, key, describe_exit(code) + " (worker restart budget used up)", code)
            return False
        self.worker_restarts += 1
        self.record.write(ev.TaskRestart(task=key, code=code, restart=self.worker_restarts,
                                         max_restarts=self.restart.max_restarts))
        self.group.handles[key].signal(9)
        try:
            self.starter.launch(key, attempt.number, alone=True)  # its standby promoted where one waits, and a new one made
        except LaunchError as exc:
            # Its host failed the start (gone since the check above, or broken): that worker's
            # failure, not the run's. An elastic run leaves it out if its host is now lost.
            if self.members.elastic and self.backend.hosts.lost([host], 0.0, self.stop_event):
                self.worker_restarts -= 1  # a host lost spends no restart
                self.report.fail(attempt, key, _host_gone(code, host), code)
                return False
            self.report.fail(attempt, key, f"restarting it failed: {exc.lines[0]}", code)
            return False
        exits[key] = None
        order.remove(key)
        return True

    def sessions_lost(self, attempt: Attempt) -> None:
        """A failed attempt's tasks whose sessions were lost (each still running polled once more:
        its host's connection may have dropped with the others'): their hosts, and when."""
        for handle in list(self.group.handles.values()):
            handle.poll()
            lost = handle.session_lost
            if lost is not None:
                host = handle.task.host
                attempt.sessions_lost[host] = min(lost, attempt.sessions_lost.get(host, lost))

    def let_survivors_save(self, attempt: Attempt) -> None:
        """A failed attempt whose group may be saving: the tasks still running are stopped
        gracefully, not killed at once. Two ways a save is under way when an attempt fails:
        a host's shutdown (a Spot preemption) sends SIGTERM to its tasks as it ends their
        sessions (a lost session), and a task SIGTERMed on its own (the GCE notice's wrapper, a
        ``kill``) says ``tfcluster-saving`` and exits 143 once saved, or exits with a code of
        restart.preemption_exit_codes (TensorFlow's preemption handler, saved). A host that
        announced its preemption (GCE's notice: its wrappers SIGTERMed its tasks so that they save,
        ``TaskHandle.host_going``) counts as a lost session whatever its tasks print: its task's
        exit 143 may reach us before anything else does, and a script's own SIGTERM save needs
        its peers in it too. Either way the reference
        worker's graceful preemption has every worker save the step they agree on
        (worker/preemption.py): the survivors take part in that save, so killing them would lose
        it, and the next attempt would redo the steps since the last periodic backup. They get
        SIGTERM too (a cut-off host's workers then agree to save all the same), SAVE_LOOK step
        times (at least SAVE_LOOK_MIN s) to say ``tfcluster-saving``, and one that says it gets
        until it says ``tfcluster-preempted`` (saved) or exits, up to watchdog.stop_grace; the
        rest is killed as before (a peer gone without a SIGTERM leaves them blocked in a
        collective: no save comes). Nothing waits for a saved task's exit: TensorFlow's
        shutdown can wait seconds for a peer on the host going down. A task that failed on its
        own (a crash) gets its peers killed at once: they cannot save without it."""
        handles = list(self.group.handles.values())
        survivors = [h for h in handles if h.poll() is None and h.session_lost is None]
        going = any(h.host_going is not None for h in handles)
        with self.group.lock:
            agreed = any(h.key in self.group.saving for h in handles)
        # A task that exited for a preemption (TensorFlow's PreemptionCheckpointHandler: its save is
        # written) had every worker agree on that save: the others finish theirs and exit, awaited
        # up to watchdog.stop_grace (they say no tfcluster-saving line).
        preempting = any(h.poll() in self.restart.preemption_exit_codes for h in handles)
        agreed = agreed or preempting
        lost = going or any(h.session_lost is not None for h in handles)
        if not survivors or self.hurry_event.is_set() or self.watchdog.stop_grace <= 0 or not (lost or agreed):
            return
        start = self.clock()
        look = min(self.watchdog.stop_grace, max(SAVE_LOOK_MIN, SAVE_LOOK * self.step_seconds(survivors)))
        self.record.write(ev.TasksStopping(tasks=[h.key for h in survivors], grace=self.watchdog.stop_grace,
                                           save_look=look))
        for h in survivors:
            h.signal(signal.SIGTERM)
        running = list(survivors)
        while running and not self.hurry_event.is_set():
            for h in list(running):
                code = h.poll()
                if code is not None:
                    running.remove(h)
                    self.record.write(ev.Stopped(task=h.key, code=code))
                    self.group.ended.add(h.key)
            now = self.clock()
            with self.group.lock:  # (both are this attempt's: a new process clears its marks)
                saving = [h.key for h in running if h.key in self.group.saving]
                unsaved = [k for k in saving if k not in self.group.saved]
            if not running or (saving and not unsaved) or \
                    now - start > (self.watchdog.stop_grace if saving or preempting else look):
                return
            time.sleep(min(self.poll_interval, 0.05))

    def step_seconds(self, handles) -> float:
        """The slowest of these tasks' seconds per step in this attempt (from their progress
        lines; 0 when none trained two steps yet)."""
        tasks = self.view.snapshot().tasks
        paces = []
        for h in handles:
            tp = tasks[h.key].throughput if h.key in tasks else None
            if tp is not None and tp.first_time is not None and tp.last_step > tp.first_step:
                paces.append((tp.last_time - tp.first_time) / (tp.last_step - tp.first_step))
        return max(paces, default=0.0)


def _host_gone(code: Optional[int], host: str) -> str:
    return f"{describe_exit(code) if code is not None else 'gone'}; its host {host} does not answer"
