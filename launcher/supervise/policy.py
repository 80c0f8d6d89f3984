"""What task exits mean for the run: pure functions the supervisor applies every tick.

* MultiWorkerMirrored: the group is the unit of failure. Any chief/worker failure fails the
  attempt (TF cannot re-admit a single restarted worker: "different incarnation"); success is
  every chief/worker exiting 0.
* ParameterServer: success follows the chief; the servers (ps, worker) never exit on their
  own, so any ps exit loses the job, while a dead worker is restarted alone on its address.
* Single-host strategies (mirrored, central_storage, one_device, default, tpu) run one task:
  success is that task exiting 0, any other exit fails the attempt (the MWMS rule for one member).
* The evaluator is a sidecar: its failure does not fail training (phases.py restarts it alone
  where its exit is not permanent and restarts are left, else reports it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from launcher.contract.portcheck import TASK_EXIT_PORT_TAKEN
from launcher.supervise.diagnose import peer_abort
from launcher.record.states import AttemptState
from launcher.system.procinfo import describe_exit

RUNNING, SUCCEEDED, FAILED = AttemptState.RUNNING, AttemptState.SUCCEEDED, AttemptState.FAILED


@dataclass(frozen=True)
class Verdict:
    state: str  # RUNNING | SUCCEEDED | FAILED
    failed: tuple[str, ...] = ()  # keys that failed the attempt, root cause first
    restart_alone: tuple[str, ...] = ()  # PSS workers to relaunch without stopping the rest
    sidecar_failed: tuple[str, ...] = ()  # evaluator exits that do not fail training


def task_type(key: str) -> str:
    return key.split(":", 1)[0]


def assess(strategy: str, success_task: str, exits: Mapping[str, Optional[int]], order: Sequence[str] = ()) -> Verdict:
    """Reduce per-task exit codes (None = running) to the attempt's state.

    ``order`` lists keys in the order their exits were noticed, so the first failure is
    reported as the root cause.
    """
    ranked = [k for k in order if k in exits] + [k for k in exits if k not in order]
    sidecars = tuple(k for k in ranked if task_type(k) == "evaluator" and exits[k] not in (None, 0))
    if strategy == "parameter_server":
        chief = exits.get(success_task)
        failed = [
            k
            for k in ranked
            if (task_type(k) == "ps" and exits[k] is not None) or (k == success_task and exits[k] not in (None, 0))
        ]
        if failed:
            return Verdict(FAILED, failed=tuple(failed), sidecar_failed=sidecars)
        if chief == 0:
            return Verdict(SUCCEEDED, sidecar_failed=sidecars)
        restart = tuple(k for k in ranked if task_type(k) == "worker" and exits[k] is not None)
        return Verdict(RUNNING, restart_alone=restart, sidecar_failed=sidecars)

    members = [k for k in ranked if task_type(k) != "evaluator"]
    failed = tuple(k for k in members if exits[k] not in (None, 0))
    if failed:
        return Verdict(FAILED, failed=failed, sidecar_failed=sidecars)
    if members and all(exits[k] == 0 for k in members):
        return Verdict(SUCCEEDED, sidecar_failed=sidecars)
    return Verdict(RUNNING, sidecar_failed=sidecars)


def stopped_too_long(stopped_since: Mapping[str, float], now: float, limit: float) -> Optional[str]:
    """The task whose process has been stopped by a signal (state T, said by its wrapper) for
    ``limit`` seconds or more (watchdog.stopped_timeout; 0: never), the one stopped longest: it
    does nothing, and a peer waiting on it in a collective waits with it (TensorFlow's own
    heartbeats end the group 8-11 s in). None: no such task."""
    if limit <= 0:
        return None
    over = [(since, k) for k, since in stopped_since.items() if now - since >= limit]
    return min(over)[1] if over else None


def fails_group_alone(strategy: str, success_task: str, exits: Mapping[str, Optional[int]], key: str) -> bool:
    """Whether ``key``'s death (were it killed now) fails the attempt, or is restarted alone (a
    parameter_server worker, the evaluator: ``assess``'s rules)."""
    return assess(strategy, success_task, {**exits, key: 137}, [key]).state == FAILED


def silent_by_design(strategy: str, key: str) -> bool:
    """Tasks that print nothing for as long as training runs: under ParameterServer the ps and
    worker tasks sit in ``tf.distribute.Server(...).join()``. The hang watchdog may only name
    them when they are stopped (SIGSTOP), never for their silence."""
    return strategy == "parameter_server" and task_type(key) in ("ps", "worker")


# watchdog.hang_timeout: auto. A task that counts its TensorFlow calls is stuck once it has not
# progressed for max(AUTO_FLOOR, AUTO_FACTOR x the longest gap between its rises so far). The floor
# lets a legitimate pause (a callback's upload, a long evaluation, a large model's save) pass, and
# still finds a stall of a run whose steps take seconds within 2 minutes of its last step; a run
# that has shown long pauses gets that much more room.
AUTO_FLOOR = 120.0
AUTO_FACTOR = 3.0


def hang_limit(setting, longest_gap: float) -> float:
    """Seconds without progress after which a counting task is stuck: watchdog.hang_timeout's
    seconds, or for ``auto`` max(AUTO_FLOOR, AUTO_FACTOR x ``longest_gap``); 0: never."""
    if setting == "auto":
        return max(AUTO_FLOOR, AUTO_FACTOR * longest_gap)
    return float(setting)


def output_limit(setting) -> float:
    """Seconds without output after which a task that reports no count is hung: the seconds
    given; never under ``auto`` (0)."""
    return 0.0 if setting == "auto" else float(setting)


def hang_watched(key: str) -> bool:
    """The evaluator is a sidecar (silent between checkpoints; its failure does not fail
    training), so the hang watchdog ignores it."""
    return task_type(key) != "evaluator"


@dataclass(frozen=True)
class AttemptFailure:
    """Why an attempt failed, attributed to one task (the root cause)."""

    key: str
    reason: str  # "exit code 3", "killed by SIGKILL (exit 137)", "no progress for 30 s"
    code: Optional[int] = None  # the exit code; None for watchdog failures
    last_lines: tuple[str, ...] = ()
    others: tuple[str, ...] = field(default=())  # further keys that failed in the same attempt
    # Exits of other tasks caused by this one ((key, exit code), e.g. TF aborting the survivors
    # of a stopped peer): reported as consequences, and never what decides a retry.
    consequences: tuple[tuple[str, int], ...] = field(default=())
    # The backend cannot run another attempt (errors.AttemptImpossible): never retried.
    final: bool = False
    # The hang watchdog's failure: the task stopped the group's progress (it is killed; the
    # others are stopped with the usual grace, so they save where they can).
    hung: bool = False


@dataclass
class Attempt:
    """One attempt of the group, as the supervisor runs it and the report tells it."""

    number: int  # 0-based; TFCLUSTER_RESTART_COUNT
    started: float = field(default_factory=time.time)
    ended: Optional[float] = None
    state: str = AttemptState.RUNNING
    failure: Optional[AttemptFailure] = None
    ready_after: Optional[float] = None  # seconds until every task's port was open
    # Hosts whose tasks' sessions were lost in this attempt (host -> when, time.time()): the
    # infrastructure failed, not the training (launcher/supervise/membership.py, elastic runs).
    sessions_lost: dict[str, float] = field(default_factory=dict)


def retry_decision(failure: AttemptFailure, permanent_exit_codes: Sequence[int]) -> tuple[bool, str]:
    """(retryable, explanation). Exit codes listed as permanent (by default 1-127: a Python
    error, bad usage, a missing module) are not retried; signals and watchdog failures are.

    A failure whose root cause is another task's state (stopped, hung, unreachable: ``code`` is
    None) is retryable even if the survivors it took down exited with a permanent code: their
    exits are consequences. A task that exits with a permanent code on its own, every peer
    healthy, is the root cause itself and stays permanent, unless its own last lines show
    TensorFlow aborting it for a lost peer (diagnose.peer_abort: both sides of a partition). A
    ``final`` failure (the backend can run no further attempt) is never retried."""
    code = failure.code
    if failure.final:
        return False, f"not retried: {failure.reason}"
    if code is None:
        if failure.consequences:
            exits = ", ".join(f"{k} ({describe_exit(c)})" for k, c in failure.consequences)
            return True, f"{exits} followed from {failure.key}'s state ({failure.reason}); retryable"
        return True, "watchdog failures are retryable"
    if code in permanent_exit_codes and peer_abort(failure.last_lines):
        # A partition cuts both ways: the task cut off exits 1 too, TensorFlow having given up on
        # the peers or the coordination service it can no longer reach. Not an error of the task.
        return True, (f"{failure.key}'s {describe_exit(code)} was TensorFlow aborting it for a lost peer "
                      "(its last lines); retryable")
    if code in permanent_exit_codes:
        hint = {
            1: "an uncaught error in the task (exit 1) fails the same way every time",
            2: "a usage error (exit 2) fails the same way every time",
            126: "the command is not executable (exit 126)",
            127: "the command was not found (exit 127)",
            TASK_EXIT_PORT_TAKEN: (f"a port another process holds (exit {TASK_EXIT_PORT_TAKEN}) stays taken until "
                                   "it lets go"),
        }.get(code, f"exit code {code} is listed in restart.permanent_exit_codes")
        return False, f"not retried: {hint}; fix the cause, or remove {code} from restart.permanent_exit_codes"
    return True, f"{describe_exit(code)} is retryable"


def preempted(failure: AttemptFailure, codes: Sequence[int]) -> bool:
    """The attempt ended because its tasks saved for a preemption and asked to be restarted: the
    root cause exited with one of ``codes`` (restart.preemption_exit_codes: TensorFlow's
    PreemptionCheckpointHandler exits 42 once its save is written; the others it took with it, in
    the same agreement, exit so too). Not a failure of the training: restarted without spending
    restart.max_restarts."""
    return failure.code is not None and failure.code in codes and not failure.final


def too_many_preemptions(count: int, most: int) -> str:
    return (f"gave up after {count} preemptions ({most} restarted: restart.max_preemptions); raise it, or look "
            "at why the tasks keep exiting with a code of restart.preemption_exit_codes")


def backoff_delay(attempt: int, backoff: float, max_backoff: float) -> float:
    """Seconds to wait before relaunch ``attempt`` (1-based): backoff * 2**(attempt-1), capped."""
    if backoff <= 0 or attempt <= 0:
        return 0.0
    return min(max_backoff, backoff * (2 ** (attempt - 1)))
