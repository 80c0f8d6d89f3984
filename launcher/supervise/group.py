"""The current attempt's tasks as the supervisor tracks them: a handle per task, the last lines
each printed, when each last printed or spoke, and its save marks (``tfcluster-saving``, then
``tfcluster-preempted``). The output readers' threads add lines and marks under ``lock``;
everything else reads and changes it on the supervisor's thread. One object, passed to the
supervisor's parts (output.py, starts.py, phases.py, outcome.py) that read it.

What a task prints (``line``) is only its tail and a sign of life. What it says on its control
channel (``control``; launcher/remote/taskstream.py: nothing it prints gets there) is read: a
Python task beats (launcher/contract/liveness.py): ``tfcluster-beat n=COUNT``, its TensorFlow
function calls completed, which is its progress once it imported TensorFlow (``counting``;
``progress``: when its count last rose). Its first beat says it takes the stacks' signal
(``takes_stacks``: the one signal tfcluster chose, liveness.STACKS_SIGNAL, is all that is ever
sent; a beat naming another is not believed); while ``collect`` asks for them, the lines of
faulthandler's text it writes are kept aside (``stacks``); its save marks and progress records."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from launcher.backends.base import TaskHandle
from launcher.contract.liveness import BEAT as BEAT_LINE, STACKS_SIGNAL
from launcher.contract.progress import SAVED_LINE, SAVING_LINE
from launcher.supervise.stuck import is_stack_line

# What a control line was (``AttemptGroup.control``): a beat (progress, not output), a line of
# stacks (kept while the hang watchdog or ``tfcluster stacks`` asks for them), or a record
# (progress, the standby protocol: into the task's progress file).
BEAT, STACK, RECORD = "beat", "stack", "record"
_TAIL_KEPT = 400  # lines kept, so the exception line above a long traceback or repr is found


class AttemptGroup:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.handles: dict[str, TaskHandle] = {}
        self.tails: dict[str, collections.deque] = {}
        self.activity: dict[str, float] = {}
        self.saving: set[str] = set()  # tasks that said tfcluster-saving (their process: new_process clears)
        self.saved: set[str] = set()  # ... and tfcluster-preempted: the save is written
        self.ended: set[str] = set()  # tasks whose end the record has (an exit or stopped event; this process's)
        self.counts: dict[str, int] = {}  # key -> its last beat's count (this process's)
        self.progress: dict[str, float] = {}  # key -> when its count last rose (or it first beat)
        self.gaps: dict[str, float] = {}  # key -> the longest time between two rises of its count
        self.inside: dict[str, float] = {}  # key -> seconds its process spent inside TensorFlow's calls
        # key -> its ParameterServerStrategy coordinator's calls by worker index (the chief's beat's w=)
        self.closures: dict[str, dict[int, int]] = {}
        self.takes_stacks: set[str] = set()  # tasks that said they take the stacks' signal (STACKS_SIGNAL)
        self.counting: set[str] = set()  # tasks that imported TensorFlow: their count is their progress
        self.stacks: dict[str, list[str]] = {}  # key -> its stack lines since ``collect`` asked
        self.stacks_at: dict[str, float] = {}  # key -> when its last stack line came
        self.lock = threading.Lock()

    def state_notes(self, keys) -> dict[str, str]:
        """``keys``' state notes (``TaskHandle.state_note``), asked all at once (at most 64 at a
        time): on ssh each is a command on the task's host, and asked one after another they put
        the group's size in round trips between a death and its restart, or a hang and its finding
        (7 on 8 hosts: 0.23 s of a 2.5 s warm recovery here)."""
        return self._each(list(keys), lambda k: self.handles[k].state_note(), "state-note")

    def signal_processes(self, keys) -> None:
        """Each task's own process sent the stacks' signal (``TaskHandle.signal_process``), all at
        once, as ``state_notes``; the one tfcluster chose (liveness.STACKS_SIGNAL), whatever a task said."""
        self._each(list(keys), lambda k: self.handles[k].signal_process(STACKS_SIGNAL), "signal")

    @staticmethod
    def _each(keys: list, ask, name: str) -> dict:
        """``ask(key)`` for each of ``keys`` (its answer; "" where asking it failed: a task gone
        meanwhile, a host's garbage answer, never the supervisor's end)."""
        def safe(key):
            try:
                return ask(key)
            except Exception:  # noqa: BLE001
                return ""
        if len(keys) < 2:
            return {k: safe(k) for k in keys}
        with ThreadPoolExecutor(max_workers=min(len(keys), 64), thread_name_prefix=name) as pool:
            return dict(zip(keys, pool.map(safe, keys)))

    def new_process(self, key: str) -> None:
        """``key`` starts (again): an empty tail, active now, its own save marks."""
        with self.lock:
            self.tails[key] = collections.deque(maxlen=_TAIL_KEPT)
            self.activity[key] = self.clock()
            self.saving.discard(key)  # a new process: its own save marks
            self.saved.discard(key)
            self.ended.discard(key)
            for beats in (self.counts, self.progress, self.gaps, self.inside, self.closures, self.stacks, self.stacks_at):
                beats.pop(key, None)
            self.counting.discard(key)
            self.takes_stacks.discard(key)

    def line(self, key: str, line: str) -> None:
        """A line ``key`` printed (a reader's thread): its tail and its activity, nothing more."""
        with self.lock:
            tail = self.tails.get(key)
            if tail is not None:
                tail.append(line)
            self.activity[key] = self.clock()

    def control(self, key: str, line: str) -> str:
        """A line of ``key``'s control channel (a reader's thread): BEAT (its count), STACK (a line
        of its stacks: kept while asked for) or RECORD (its save marks read; a progress record or
        the standby protocol, for its progress file). Each is a sign of life."""
        if line.startswith(BEAT_LINE + " "):
            self._beat(key, line)
            return BEAT
        with self.lock:
            self.activity[key] = self.clock()
            if is_stack_line(line) or not line.strip():
                if key in self.stacks:
                    self.stacks[key].append(line)
                    self.stacks_at[key] = self.clock()
                return STACK
            if line.startswith(SAVING_LINE):
                self.saving.add(key)
            elif line.startswith(SAVED_LINE):
                self.saved.add(key)
        return RECORD

    def _beat(self, key: str, line: str) -> None:
        fields = dict(w.partition("=")[::2] for w in line.split()[1:])
        try:
            n = int(fields.get("n", ""))
        except ValueError:
            return
        if not 0 <= n < 2**63:
            return
        now = self.clock()
        with self.lock:
            if n > self.counts.get(key, 0):  # (a count that rises: its clock starts at the first step)
                if key in self.progress:
                    self.gaps[key] = max(self.gaps.get(key, 0.0), now - self.progress[key])
                self.progress[key] = now
            self.counts[key] = n
            inside = _seconds(fields.get("in", ""))
            if inside is not None:
                self.inside[key] = inside
            if fields.get("w"):
                self.closures[key] = _by_worker(fields["w"])
            if fields.get("stacks") == str(int(STACKS_SIGNAL)):  # (another number: not tfcluster's liveness)
                self.takes_stacks.add(key)
            if fields.get("tf") == "1" or n > 0:
                self.counting.add(key)

    def collect(self, keys) -> None:
        """From now on keep the stack lines of ``keys`` (their earlier ones dropped)."""
        with self.lock:
            for key in keys:
                self.stacks[key] = []
                self.stacks_at.pop(key, None)

    def collected(self) -> dict[str, str]:
        """The stacks kept since ``collect``, as text, and no more kept."""
        with self.lock:
            out = {k: "\n".join(v) for k, v in self.stacks.items() if v}
            self.stacks.clear()
            return out

    def tails_of(self, keys) -> dict[str, tuple[str, ...]]:
        with self.lock:
            return {k: tuple(self.tails.get(k, ())) for k in keys}


def _seconds(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value < 1e12 else None


def _by_worker(text: str, limit: int = 4096) -> dict[int, int]:
    """``0:120,1:118`` (a beat's w=, from the task's own process: bounded, malformed pairs passed over)."""
    out: dict[int, int] = {}
    for pair in text.split(",")[:limit]:
        index, _, count = pair.partition(":")
        if index.isdigit() and count.isdigit() and len(index) < 7 and len(count) < 19:
            out[int(index)] = int(count)
    return out
