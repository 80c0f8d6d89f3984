"""The one interface every backend implements (like torchelastic's PContext).

A backend only executes: it never decides what to run (that is the plan) nor what a
failure means (that is the supervisor and its policy).
"""

from __future__ import annotations

import abc
import signal
import time
from typing import Callable, Mapping, Optional, Sequence

from ..plan import Plan, PlannedTask

# Called with (task key, one line of output without its newline) from reader threads.
LineSink = Callable[[str, str], None]


def normalize_exit(returncode: int) -> int:
    """Popen's -N for "killed by signal N" becomes 128+N, as shells, SSH and Docker report it."""
    return 128 - returncode if returncode < 0 else returncode


class TaskHandle(abc.ABC):
    """One running task (its whole process group, container or remote session)."""

    def __init__(self, task: PlannedTask) -> None:
        self.task = task
        self.key = task.key
        self.started = time.monotonic()

    @abc.abstractmethod
    def poll(self) -> Optional[int]:
        """The exit code (128+N for signal N) once the task has ended, else None."""

    @abc.abstractmethod
    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the task and everything it started; no error if already gone."""

    def info(self) -> dict:
        """What the run record keeps about this task (pids, container ids) for ``down``."""
        return {}

    def state_note(self) -> str:
        """A short remark on the task's state for reports (e.g. 'stopped by SIGSTOP')."""
        return ""


class Backend(abc.ABC):
    name = "abstract"

    def preflight(self, plan: Plan) -> None:
        """Check everything that can be checked before starting; raise LaunchError."""

    @abc.abstractmethod
    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> TaskHandle:
        """Start one task with the plan's env plus ``env``; stream its output to ``on_line``."""

    def port_open(self, task: PlannedTask) -> bool:
        """Whether the task's TF port accepts connections (startup watchdog)."""
        return True

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0) -> list[str]:
        """SIGTERM every task, SIGKILL what is left after ``grace`` seconds (at once if 0).

        Returns the keys still not confirmed dead after ``deadline`` more seconds.
        """
        alive = [h for h in handles if h.poll() is None]
        if grace > 0:
            for h in alive:
                h.signal(signal.SIGTERM)
            end = time.monotonic() + grace
            while alive and time.monotonic() < end:
                time.sleep(0.05)
                alive = [h for h in alive if h.poll() is None]
        for h in handles:
            # Also for tasks whose leader already exited: stragglers in their group die too.
            h.signal(signal.SIGKILL)
        end = time.monotonic() + deadline
        while alive and time.monotonic() < end:
            time.sleep(0.02)
            alive = [h for h in alive if h.poll() is None]
        return [h.key for h in alive]

    def prepare_attempt(self, number: int) -> None:
        """Called by the supervisor before it starts attempt ``number`` (0 = the first, also when
        ``up`` resumes an earlier run). E.g. the ssh backend copies the chief's latest backup to
        hosts that do not share its state dir. Raise LaunchError (one line per problem, naming
        the host) to fail the attempt."""

    def collect_results(self) -> None:
        """Called once after a successful run, every task stopped: bring results (the final
        model) back to this machine when they are elsewhere. Raise LaunchError on failure."""

    def close(self) -> None:
        """Release connections and other resources (after every task is stopped)."""
