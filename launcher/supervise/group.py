"""The current attempt's tasks as the supervisor tracks them: a handle per task, the last lines
each printed, when each last printed, and its save marks (``tfcluster-saving``, then
``tfcluster-preempted``). The output readers' threads add lines and marks under ``lock``;
everything else reads and changes it on the supervisor's thread. One object, passed to the
supervisor's collaborators (phases.py, outcome.py) that read it."""

from __future__ import annotations

import collections
import threading
from typing import Callable

from launcher.backends.base import TaskHandle
from launcher.contract.progress import SAVED_LINE, SAVING_LINE

_TAIL_KEPT = 400  # lines kept, so the exception line above a long traceback or repr is found


class TaskGroup:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.handles: dict[str, TaskHandle] = {}
        self.tails: dict[str, collections.deque] = {}
        self.activity: dict[str, float] = {}
        self.saving: set[str] = set()  # tasks that said tfcluster-saving (their process: new_process clears)
        self.saved: set[str] = set()  # ... and tfcluster-preempted: the save is written
        self.lock = threading.Lock()

    def new_process(self, key: str) -> None:
        """``key`` starts (again): an empty tail, active now, its own save marks."""
        with self.lock:
            self.tails[key] = collections.deque(maxlen=_TAIL_KEPT)
            self.activity[key] = self.clock()
            self.saving.discard(key)  # a new process: its own save marks
            self.saved.discard(key)

    def line(self, key: str, line: str) -> None:
        """A line of ``key``'s output (a reader's thread): its tail, its activity, its save marks."""
        with self.lock:
            tail = self.tails.get(key)
            if tail is not None:
                tail.append(line)
            self.activity[key] = self.clock()
            if line.startswith(SAVING_LINE):
                self.saving.add(key)
            elif line.startswith(SAVED_LINE):
                self.saved.add(key)

    def tails_of(self, keys) -> dict[str, tuple[str, ...]]:
        with self.lock:
            return {k: tuple(self.tails.get(k, ())) for k in keys}
