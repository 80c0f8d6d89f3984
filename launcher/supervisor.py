"""The supervisor loop (after torchelastic's ``_invoke_run``): start the group, poll, reduce to
a group state, apply the restart policy, and always tear down in ``finally``.

Threads only read task output; every decision is made here, on the calling thread.
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import envnames
from .backends.base import Backend, TaskHandle
from .console import Console
from .diagnose import exception_lines, hint, peer_abort, root_cause
from .elastic import Replan, elastic_enabled, grow, options, replace_lost, shrunk, spare_hosts
from .errors import AttemptImpossible, LaunchError
from .noise import is_noise
from .plan import Plan
from .policy import (FAILED, SUCCEEDED, Failure, assess, backoff_delay, describe_exit, hang_watched,
                     retry_decision, silent_by_design)
from .record.events import Event
from .record.feed import SnapshotWriter
from .record.states import AttemptState, Outcome
from .record.view import RunView
from .record.writer import RunRecord
from .report import location_lines, locations, task_table
from .specmodel import Restart, Spec, Watchdog

INTERRUPTED = AttemptState.INTERRUPTED
_TAIL = 15  # lines of a task's output shown in failure reports
_TAIL_KEPT = 400  # lines kept, so the exception line above a long traceback or repr is found
_READY_CHECK_EVERY = 0.5
# A standby blocks SIGUSR1 as its first act; one younger than this may not have yet.
_STANDBY_MIN_AGE = 2.0


@dataclass
class Attempt:
    number: int  # 0-based; TFCLUSTER_RESTART_COUNT
    started: float = field(default_factory=time.time)
    ended: Optional[float] = None
    state: str = AttemptState.RUNNING
    failure: Optional[Failure] = None
    ready_after: Optional[float] = None  # seconds until every task's port was open


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
        self.plan = plan
        # Hosts that come and go (launcher/elastic.py): on when the spec asks for it or lists
        # spare hosts, and the backend can tell which hosts are lost.
        self.spec = spec
        self.elastic = spec is not None and backend.capabilities.elastic and elastic_enabled(spec)
        self.first_plan = plan
        self.replans: list[tuple[Replan, dict[str, str]]] = []  # (the change, {lost host: how})
        self.down: list[str] = []  # hosts lost in this run and not back (elastic.settle) yet
        # Host discovery (launcher/discovery.py): polled in a thread; hosts: entries never vanish.
        self.poller = None
        self.static_hosts: set[str] = set()
        self._answers = 0
        self._discovery_problem = ""
        self._vanished: dict[str, str] = {}
        self._left_out: set[str] = set()  # parameter_server workers whose host was lost, not replaced
        if self.elastic and spec is not None and spec.discovery is not None:
            from .discovery import Poller

            self.static_hosts = set(static_hosts) if static_hosts is not None else {h.name for h in spec.hosts}
            self.poller = Poller(spec.discovery.command, spec.discovery.every, spec.discovery.timeout,
                                 discovery_cwd or Path.cwd())
        self.backend = backend
        self.record = record
        self.console = console
        self.restart = restart
        self.watchdog = watchdog
        self.stop_event = stop_event or threading.Event()
        self.hurry_event = threading.Event()
        self.poll_interval = poll_interval
        self.clock = clock
        self.attempts: list[Attempt] = []
        self._handles: dict[str, TaskHandle] = {}
        self._tails: dict[str, collections.deque] = {}
        self._activity: dict[str, float] = {}
        self._lock = threading.Lock()
        self._worker_restarts = 0
        # Warm standby: the next attempt's processes, started early, waiting for SIGUSR1.
        self._standby: dict[str, TaskHandle] = {}
        self._standby_active: dict[str, list] = {}  # key -> [promoted?], read by its output sink
        self._standby_at = 0.0
        self._sink_failed: set[str] = set()
        # The run as the live panel and the final report show it, fed by events and task lines.
        self.view = RunView()
        record.listeners.append(self.view.event)
        # Called once, on this thread, the first time every task of an attempt is ready
        # (``up --detach`` hands the run over to the background then).
        self.on_ready: Optional[Callable[[], None]] = None

    # -------------------------------------------------------------- public

    def run(self) -> int:
        """Run attempts until success, a permanent failure, the restart budget, or a stop."""
        self.record.event(Event.RUN_START, run_id=self.record.run_id, name=self.plan.name, strategy=self.plan.strategy,
                          backend=self.plan.backend, tasks=list(self.plan.keys),
                          run_dir=str(self.record.dir), max_restarts=self.restart.max_restarts,
                          **({"spares": spare_hosts(self.spec, [t.host for t in self.plan.tasks])}
                             if self.elastic and self.spec is not None else {}))
        snapshots = SnapshotWriter(self.record.dir).start()  # status and attach replay from its last
        if self.poller is not None:
            self.poller.start()
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
                        return self._finish(1, Outcome.FAILED, reason="; ".join(exc.lines))
                    return self._finish(0, Outcome.SUCCEEDED)
                if attempt.state == INTERRUPTED:
                    return self._finish(130, Outcome.INTERRUPTED)
                if attempt.state == AttemptState.REGROW:
                    assert self.spec is not None
                    if self._vanished:  # discovery says hosts of the plan are gone: move their tasks
                        moved = self._move_lost_hosts(number, lost=self._vanished)
                        self._vanished = {}
                        if moved:
                            return moved
                    else:
                        change = grow(self.spec, self.plan, self.down)
                        if change is not None:
                            self._use(change, {}, number, "restarting the bigger group from the step just saved")
                    number += 1  # a membership change, not a failure
                    continue
                failure = attempt.failure
                assert failure is not None
                if self.elastic:
                    moved = self._move_lost_hosts(number)
                    if moved is not None:
                        if moved != 0:
                            return moved  # the run's exit code: no spare left, or interrupted
                        number += 1  # a host loss is a membership change, not a failure
                        continue
                retryable, why = retry_decision(failure, self.restart.permanent_exit_codes)
                if not retryable:
                    if not failure.final:  # a final failure's own line already said it all
                        self.console.error(f"{failure.key}: {why}")
                    return self._finish(1, Outcome.FAILED, reason=why)
                if failures >= self.restart.max_restarts:
                    why = (f"gave up after {number + 1} attempt(s): restart.max_restarts is "
                           f"{self.restart.max_restarts}; raise it to retry more")
                    self.console.error(why)
                    return self._finish(1, Outcome.FAILED, reason=why)
                number += 1
                failures += 1
                delay = backoff_delay(failures, self.restart.backoff, self.restart.max_backoff)
                self.console.info(
                    f"restarting the whole group (restart {failures} of {self.restart.max_restarts})"
                    + (f" in {delay:.1f} s" if delay else "")
                )
                self.record.event(Event.RESTART, attempt=number, delay=delay, after=failure.key, reason=failure.reason)
                if delay and self.stop_event.wait(delay):
                    return self._finish(130, Outcome.INTERRUPTED)
        finally:
            if self.poller is not None:
                self.poller.close()
            self._stop_all(grace=0)
            self._drop_standby()
            self.backend.close()
            snapshots.close()  # the last one: the record as it ends

    def _move_lost_hosts(self, number: int, lost: Optional[dict[str, str]] = None) -> Optional[int]:
        """After a failed attempt: are any of the plan's hosts lost? None: no (the failure is the
        training's). 0: their tasks moved to spares, restart under the new plan. Else the run's
        exit code (no spare left: one line naming the missing hosts; or interrupted). ``lost``:
        already known (discovery says they are gone), nothing to ask the backend."""
        assert self.spec is not None
        hosts = sorted({t.host for t in self.plan.tasks})
        if lost is None:
            lost = self.backend.lost_hosts(hosts, options(self.spec).host_wait, self.stop_event)
        if self.stop_event.is_set():
            return self._finish(130, Outcome.INTERRUPTED)
        if not lost:
            return None
        for host, how in sorted(lost.items()):
            self.record.event(Event.HOST_LOST, host=host, how=how, attempt=number)
        change = replace_lost(self.spec, self.plan, sorted(lost), self.down)
        if isinstance(change, str):
            self.console.error(change)
            return self._finish(1, Outcome.FAILED, reason=change)
        self.down += [h for h in change.lost if h not in self.down]
        self._use(change, lost, number, "restarting the group there from the last backup")
        return 0

    def _use(self, change: Replan, lost: dict[str, str], number: int, then: str) -> None:
        """Run the next attempts under ``change.plan``: record it (plan-N.json, a replan event),
        say so in one line, hand it to the backend."""
        self.replans.append((change, dict(lost)))
        n = len(self.replans) + 1
        name = self.record.add_plan(change.plan, n)
        self.record.event(Event.REPLAN, plan=n, file=name, attempt=number + 1, lost=list(change.lost),
                          old_hosts=list(change.old_hosts), new_hosts=list(change.new_hosts),
                          moved={k: {"from": a, "to": b} for k, (a, b) in change.moved.items()},
                          dropped=list(change.dropped), added=dict(change.added), tasks=list(change.plan.keys))
        self.console.info(f"{change.describe(lost)}; {then} (plan {n}; a membership change does not count "
                          "against restart.max_restarts)")
        self.plan = change.plan
        self.backend.use_plan(change.plan)

    def _discovered(self, attempt: Attempt) -> bool:
        """While an attempt runs: the discovery command's newest answer (launcher/discovery.py).
        A failed one keeps the last good list and says why in one line (once per reason). New
        hosts are added and watched until they answer for elastic.settle s (then usable, as a
        lost host that came back). Hosts gone from the list are dropped; if the plan uses one,
        True: the attempt ends (REGROW), its tasks stopped gracefully, and they move."""
        assert self.spec is not None and self.poller is not None
        count, answer = self.poller.latest()
        if count == self._answers or answer is None:
            return False
        self._answers = count
        if answer.hosts is None:
            if answer.problem != self._discovery_problem:
                self._discovery_problem = answer.problem
                self.console.error(f"discovery.command: {answer.problem}; keeping the last good host list "
                                   f"({', '.join(h.name for h in self.spec.hosts)}); the run goes on")
                self.record.event(Event.DISCOVERY, ok=False, problem=answer.problem)
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
        self.backend.add_hosts(added)
        self.down = [h for h in self.down if h not in gone] + [h.name for h in added]
        self.record.event(Event.DISCOVERY, ok=True, added=[h.name for h in added], gone=gone)
        bits = ([f"{', '.join(h.name for h in added)} found (usable once {'they answer' if len(added) > 1 else 'it answers'} "
                 f"for elastic.settle={options(self.spec).settle:g} s)"] if added else [])
        bits += [f"{', '.join(gone)} gone from the list"] if gone else []
        self.console.info(f"discovery: {'; '.join(bits)}")
        in_plan = {t.host for t in self.plan.tasks}
        vanished = {h: "gone from discovery.command's list" for h in gone if h in in_plan}
        if not vanished:
            return False
        self._vanished = vanished
        self.console.info(f"moving {', '.join(t.key for t in self.plan.tasks if t.host in vanished)}: stopping the "
                          "group gracefully (SIGTERM: the workers save the step they agree on)")
        attempt.state = AttemptState.REGROW
        return True

    def _hosts_back(self, attempt: Attempt) -> bool:
        """While an attempt runs: lost hosts that answered again for elastic.settle s become
        usable (a ``host_added`` event). True: the group is shrunk and may grow, so the attempt
        ends (REGROW) and its tasks are stopped gracefully (they save the step they agree on)."""
        assert self.spec is not None
        opts = options(self.spec)
        back = self.backend.hosts_back(list(self.down), opts.settle)
        if not back:
            return False
        for host in back:
            self.down.remove(host)
            self.record.event(Event.HOST_ADDED, host=host, attempt=attempt.number, settle=opts.settle)
        self.console.info(f"{', '.join(back)} answer{'s' if len(back) == 1 else ''} again "
                          f"({opts.settle:g} s without a break, elastic.settle): usable again")
        if not (opts.grow and shrunk(self.spec, self.plan)):
            return False
        self.console.info("growing the group: stopping it gracefully (SIGTERM: the workers save the step they "
                          "agree on) to restart it bigger")
        attempt.state = AttemptState.REGROW
        return True

    def interrupt(self) -> None:
        """First call: stop gracefully (SIGTERM, grace, SIGKILL). Second call: SIGKILL now."""
        if self.stop_event.is_set():
            self.hurry_event.set()
            for handle in list(self._handles.values()):
                handle.signal(9)
        self.stop_event.set()

    # -------------------------------------------------------------- one attempt

    def _run_attempt(self, number: int) -> Attempt:
        attempt = Attempt(number)
        self._left_out.clear()  # a new attempt starts every task of its plan
        self.attempts.append(attempt)
        exits: dict[str, Optional[int]] = {}
        order: list[str] = []
        warned_sidecars: set[str] = set()
        grace = self.watchdog.stop_grace
        try:
            try:
                self.backend.prepare_attempt(number)
            except LaunchError as exc:
                self._fail(attempt, "prepare", "; ".join(exc.lines), None, final=isinstance(exc, AttemptImpossible))
                return attempt
            for task in self.plan.tasks:
                if self.stop_event.is_set():
                    break
                try:
                    self._launch(task.key, number)
                except LaunchError as exc:
                    if not self.elastic:
                        raise
                    # Its host may be gone: the failure is checked for lost hosts like any other.
                    self._fail(attempt, task.key, "; ".join(exc.lines), None)
                    grace = 0
                    return attempt
                exits[task.key] = None
            started = self.clock()
            ready: set[str] = {t.key for t in self.plan.tasks if t.port is None}
            next_ready_check = started
            next_back_check = started
            while True:
                if self.stop_event.is_set():
                    attempt.state = INTERRUPTED
                    self.console.info("stopping every task (Ctrl-C again to kill at once)")
                    return attempt
                for key, handle in self._handles.items():
                    if exits.get(key) is None:
                        code = handle.poll()
                        if code is not None:
                            exits[key] = code
                            order.append(key)
                            self.record.event(Event.EXIT, task=key, attempt=number, code=code, how=describe_exit(code))
                verdict = assess(self.plan.strategy, self.plan.success_task, exits, order)
                for key in verdict.sidecar_failed:
                    if key not in warned_sidecars:
                        warned_sidecars.add(key)
                        self.console.error(f"{key} (sidecar) failed: {describe_exit(exits[key])}; training goes on")
                        self.record.event(Event.SIDECAR_FAILED, task=key, code=exits[key])
                if verdict.state == SUCCEEDED:
                    attempt.state = SUCCEEDED
                    return attempt
                if verdict.state == FAILED:
                    self._fail_exit(attempt, verdict.failed, exits, started)
                    grace = 0  # the group is the unit of failure: kill it at once
                    return attempt
                for key in verdict.restart_alone:
                    if key in self._left_out:
                        continue  # its host is gone; the coordinator trains on without it
                    if not self._restart_alone(attempt, key, exits, order):
                        grace = 0
                        return attempt
                now = self.clock()
                # (Runs once even when no task serves a port, e.g. single-host strategies.)
                if attempt.ready_after is None and now >= next_ready_check:
                    next_ready_check = now + _READY_CHECK_EVERY
                    for task in self.plan.tasks:
                        if task.key not in ready and exits.get(task.key) is None and self.backend.port_open(task):
                            ready.add(task.key)
                            self.record.event(Event.READY, task=task.key, attempt=number, after=round(now - started, 3))
                    if len(ready) == len(self.plan.tasks):
                        attempt.ready_after = now - started
                        self.record.event(Event.ATTEMPT_READY, attempt=number, after=round(attempt.ready_after, 3))
                        if self.on_ready is not None:
                            on_ready, self.on_ready = self.on_ready, None
                            on_ready()
                        if self.restart.warm_standby and number < self.restart.max_restarts:
                            self._start_standby(number + 1)
                    elif now - started > self.watchdog.startup_timeout:
                        missing = [t.key for t in self.plan.tasks if t.key not in ready]
                        ports = ", ".join(f"{k} ({self.plan.task(k).endpoint})" for k in missing)
                        self._fail(
                            attempt, missing[0],
                            f"never came up: no TF server listening within watchdog.startup_timeout="
                            f"{self.watchdog.startup_timeout:g} s: {ports}",
                            None, others=tuple(missing[1:]),
                        )
                        grace = 0
                        return attempt
                # The hang clock starts once every task is up: until then startup_timeout
                # governs, and importing TensorFlow can be silent for many seconds.
                if self.watchdog.hang_timeout > 0 and attempt.ready_after is not None:
                    hung = self._hung(now, exits, since=started + attempt.ready_after)
                    if hung:
                        note = self._handles[hung].state_note()
                        self._fail(
                            attempt, hung,
                            f"hung: no progress for {self.watchdog.hang_timeout:g} s (watchdog.hang_timeout)"
                            + (f"; {note}" if note else ""),
                            None,
                        )
                        grace = 0
                        return attempt
                # Elastic: lost hosts that came back (checked about once a second, once every task
                # is up: a group stopped while it starts would save nothing).
                if self.elastic and attempt.ready_after is not None and now >= next_back_check:
                    next_back_check = now + 1.0
                    if self.poller is not None and self._discovered(attempt):
                        return attempt  # REGROW: hosts gone; stopped with the usual grace (a graceful save)
                    if self.down and self._hosts_back(attempt):
                        return attempt  # REGROW: stopped with the usual grace (a graceful save)
                time.sleep(self.poll_interval)
        finally:
            attempt.ended = time.time()
            if self.hurry_event.is_set():
                grace = 0
            self._stop_all(grace)

    def _launch(self, key: str, number: int, standby_ok: bool = True) -> None:
        task = self.plan.task(key)
        with self._lock:
            self._tails[key] = collections.deque(maxlen=_TAIL_KEPT)
            self._activity[key] = self.clock()
        handle = self._promote_standby(key) if standby_ok else None
        if handle is None:
            handle = self.backend.start(task, self._env(number), self._drain_line)
        self._handles[key] = handle
        self.record.task_started(key, attempt=number, **handle.info())
        self.record.event(Event.START, task=key, attempt=number, host=task.host, endpoint=task.endpoint,
                          **handle.info(), **self.record.log_offsets(key))

    def _env(self, number: int) -> dict[str, str]:
        return {envnames.RESTART_COUNT: str(number), envnames.RUN_ID: self.record.run_id}

    def _start_standby(self, number: int) -> None:
        """Start attempt ``number``'s processes now; they import TensorFlow and wait for SIGUSR1."""
        if self._standby:
            return
        self._standby_at = self.clock()
        for task in self.plan.tasks:
            active = [False]

            def sink(key: str, line: str, active=active) -> None:
                if active[0]:
                    self._on_line(key, line)
                else:
                    self.record.log_line(key, f"(standby) {line}")
                    self.console.task_line(key, f"(standby) {line}")

            handle = self.backend.start(task, {**self._env(number), envnames.STANDBY: "1"},
                                        lambda key, line, sink=sink: self._drain_line(key, line, sink))
            self._standby[task.key] = handle
            self._standby_active[task.key] = active
        self.record.event(Event.STANDBY_START, attempt=number,
                          pids={k: h.info().get("pid") for k, h in self._standby.items()})

    def _promote_standby(self, key: str) -> Optional[TaskHandle]:
        """Hand over the waiting standby for ``key``, or None (none, dead, or too young to have
        blocked SIGUSR1 yet: then it is stopped and a fresh process starts instead)."""
        handle = self._standby.pop(key, None)
        active = self._standby_active.pop(key, None)
        if handle is None:
            return None
        if handle.poll() is not None or self.clock() - self._standby_at < _STANDBY_MIN_AGE:
            self.backend.stop([handle], grace=0)
            return None
        active[0] = True
        handle.signal(signal.SIGUSR1)
        self.record.event(Event.STANDBY_PROMOTED, task=key, **handle.info())
        return handle

    def _drop_standby(self) -> None:
        if self._standby:
            self.backend.stop(list(self._standby.values()), grace=0)
            self.record.event(Event.STANDBY_STOPPED, tasks=list(self._standby))
            self._standby.clear()
            self._standby_active.clear()

    def _restart_alone(self, attempt: Attempt, key: str, exits: dict, order: list) -> bool:
        """ParameterServer: relaunch one dead worker on its address while training goes on.
        Elastic runs first ask whether its host still answers: if not, the worker is left out
        while at least tasks.worker.min workers remain and no spare can take it (the coordinator
        tolerates a lost worker), else the attempt fails so that the host's loss moves the task
        to a spare (a whole-cluster restart: every task's TF_CONFIG names the new address)."""
        code = exits[key]
        if self.elastic:
            host = self.plan.task(key).host
            if self.backend.lost_hosts([host], 0.0, self.stop_event):
                return self._worker_host_lost(attempt, key, host, code)
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
        self._launch(key, attempt.number, standby_ok=False)  # standbys wait for the next group attempt
        exits[key] = None
        order.remove(key)
        return True

    def _worker_host_lost(self, attempt: Attempt, key: str, host: str, code: Optional[int]) -> bool:
        """A parameter_server worker's host does not answer. True: go on without the worker."""
        assert self.spec is not None
        workers = [t.key for t in self.plan.tasks if t.type == "worker" and t.key not in self._left_out]
        left = len(workers) - 1
        group_min = self.spec.tasks.worker.min
        spare = spare_hosts(self.spec, [t.host for t in self.plan.tasks], self.down)
        if spare or group_min is None or left < group_min:
            # A spare takes it (whole-cluster restart), or the run cannot go on without it: the
            # attempt fails and the membership check after it decides.
            self._fail(attempt, key, f"{describe_exit(code) if code is not None else 'gone'}; its host {host} "
                       "does not answer", code)
            return False
        self._left_out.add(key)
        if host not in self.down:
            self.down.append(host)
        self.record.event(Event.HOST_LOST, host=host, how="unreachable", attempt=attempt.number, task=key)
        self.console.info(f"{host} lost (unreachable); {key} left out: {left} worker{'s' if left != 1 else ''} "
                          f"train on (tasks.worker.min={group_min}; the coordinator tolerates a lost worker)")
        return True

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

    def _peer_notes(self, key: str, exits: dict, since: Optional[float]) -> dict[str, str]:
        """Every other group member's state for root-cause attribution: "" when healthy, else
        stopped, hung (the hang watchdog's view, before its timeout), unreachable, or dead."""
        now = self.clock()
        notes: dict[str, str] = {}
        for other, handle in self._handles.items():
            if other == key or not hang_watched(other):
                continue
            code = exits.get(other)
            if code is not None:
                notes[other] = describe_exit(code) if code != 0 else ""
                continue
            note = handle.state_note()
            hang = self.watchdog.hang_timeout
            if since is not None and hang > 0:
                with self._lock:
                    idle = now - max(since, self._activity.get(other, now))
                if note and idle > hang:  # what the hang watchdog would have said
                    note = f"hung: no progress for {hang:g} s (watchdog.hang_timeout); {note}"
                elif not note and not silent_by_design(self.plan.strategy, other) and idle > min(hang, 10.0):
                    note = f"hung: no progress for {idle:.0f} s"
            notes[other] = note
        return notes

    def _fail_exit(self, attempt: Attempt, failed: tuple, exits: dict, started: float) -> None:
        """An exit failed the attempt: blame the root cause, which may be another task (stopped,
        hung, unreachable or dead) whose state made TensorFlow abort this one."""
        key = failed[0]
        with self._lock:
            tail = tuple(self._tails.get(key, ()))
        since = started + attempt.ready_after if attempt.ready_after is not None else None
        blame = root_cause(key, tail, self._peer_notes(key, exits, since))
        if not blame.consequence(key):
            # A backend's note on how the task ended ("host2: no word for 16 s ...") says more
            # than the exit code it had to make up.
            note = self._handles[key].state_note()
            self._fail(attempt, key, note or describe_exit(exits[key]), exits[key], others=failed[1:])
            return
        root = blame.root
        consequences = [(key, exits[key])]
        others = []
        for other in failed[1:]:
            if other == root:
                continue
            with self._lock:
                other_tail = tuple(self._tails.get(other, ()))
            (consequences.append((other, exits[other])) if peer_abort(other_tail) else others.append(other))
        root_code = exits.get(root)
        self._fail(attempt, root, blame.why, root_code, others=tuple(others), consequences=tuple(consequences))

    def _fail(self, attempt: Attempt, key: str, reason: str, code: Optional[int], others: tuple = (),
              consequences: tuple = (), final: bool = False) -> None:
        with self._lock:
            tail = tuple(self._tails.get(key, ()))
            tails = {k: tuple(self._tails.get(k, ())) for k, _ in consequences}
        attempt.state = FAILED
        attempt.failure = Failure(key=key, reason=reason, code=code, last_lines=tail[-_TAIL:], others=tuple(others),
                                  consequences=tuple(consequences), final=final)
        of = f" (attempt {attempt.number + 1} of {self.restart.max_restarts + 1})"
        self.console.error(f"{key} failed: {reason}{of}")
        for other, other_code in consequences:
            self.console.info(f"{other} exited ({describe_exit(other_code)}) as a consequence of {key} "
                              f"(its last lines say a peer was lost)")
        report: list[str] = []
        for other in [key] + [k for k, _ in consequences]:
            report += self._report(other, tail if other == key else tails[other])
        if report:
            self.console.block(report)
        if others:
            self.console.info(f"also failed: {', '.join(others)}")
        self.record.event(Event.FAILURE, task=key, attempt=attempt.number, reason=reason, code=code,
                          last_lines=list(tail[-_TAIL:]), others=list(others),
                          consequences={k: c for k, c in consequences},
                          errors=list(exception_lines(tail)), hint=hint(tail))

    def _report(self, key: str, tail: tuple) -> list[str]:
        """The exception line(s) a task died of, a hint for a known signature, its last lines."""
        if not tail:
            return []
        lines = [f"  {key}: {line}" for line in exception_lines(tail)]
        known = hint(tail)
        if known:
            lines.append(f"  hint: {known}")
        lines.append(f"  last lines of {key} ({self.record.log_path(key)}):")
        shown = [line for line in tail if self.console.verbose or not is_noise(line)]  # the log has them all
        lines += [f"  | {line}" for line in shown[-_TAIL:]]
        return lines

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
                                       f"({type(exc).__name__}: {exc}); it is still read, and the run goes on")
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
        where = locations(self.record.state_dir, self.record.logs_dir)
        self.record.event(Event.OUTCOME, outcome=outcome, exit_code=code, attempts=len(self.attempts), reason=reason,
                          tasks=self.view.outcome_facts(), locations=where)
        self.console.report(task_table(self.view.snapshot()) + self._summary() + location_lines(where))
        if outcome == Outcome.SUCCEEDED:
            self.console.info(f"run succeeded after {len(self.attempts)} attempt(s); record: {self.record.dir}")
        elif outcome == Outcome.INTERRUPTED:
            self.console.info(f"interrupted; every task stopped; record: {self.record.dir}")
        else:
            self.console.info(f"run failed; record: {self.record.dir}")
        return code

    def _summary(self) -> list[str]:
        if not self.attempts:
            return []
        lines = []
        if self.replans:
            lines.append(f"  plans used: 1: {', '.join(sorted({t.host for t in self.first_plan.tasks}))}")
            changes = self.view.snapshot().host_changes
            for n, (change, how) in enumerate(self.replans, start=2):
                said = changes[n - 2].describe() if n - 2 < len(changes) else change.describe(how)
                lines.append(f"  {' ' * 12}{n}: {', '.join(sorted({t.host for t in change.plan.tasks}))} ({said})")
        lines.append("  attempt  started   duration  outcome")
        for a in self.attempts:
            dur = (a.ended or time.time()) - a.started
            what = a.state
            if a.failure:
                what = f"failed: {a.failure.key} {a.failure.reason}"
            lines.append(f"  {a.number + 1:>7}  {time.strftime('%H:%M:%S', time.localtime(a.started))}  "
                         f"{dur:>7.1f}s  {what}")
        return lines

