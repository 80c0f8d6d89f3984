"""The hang watchdog (watchdog.hang_timeout): when the group stops progressing, which task stopped
it, with its stacks as the evidence.

Progress is a Python task's beat (launcher/contract/liveness.py: its count of TensorFlow function
calls, read by the task group, group.py), never its output. Once every task is up, a task that
counts is stuck when its count has not risen for ``policy.hang_limit`` (auto: max(120 s, 3 x its
longest gap so far)); before its first step it has ``watchdog.startup_timeout`` from the moment every
task was up. With hang_timeout in seconds, a task that reports no count (a command that is not
Python) is hung after that long without output, as before there was a count; under auto it is
never called hung for its silence.

On a stall every live task's stacks are taken (the stacks' signal, through the backend's
``TaskHandle.signal_process``: only the task's own process), with their native frames where py-spy
is installed where the task runs (``TaskHandle.native_stacks``: local, ssh), written to the record
(``stacks/<attempt>/<task>.txt``), and ``stuck.decide`` names the task that stopped the others (from
the Python stacks).

``HangWatch`` is a collaborator of ``AttemptPhases`` (phases.py); it is given what it reads.
"""

from __future__ import annotations

import json
import linecache
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.backends.base import Backend
from launcher.bounded import one_line
from launcher.plan.build import Plan
from launcher.record.layout import live_stacks_dir, stacks_path
from launcher.record.writer import RunRecord, write_atomic
from launcher.safefile import dir_within
from launcher.spec.model import Watchdog
from launcher.supervise.group import AttemptGroup
from launcher.supervise.policy import AUTO_FACTOR, AUTO_FLOOR, hang_limit, hang_watched, output_limit, silent_by_design
from launcher.supervise.stuck import Culprit, decide

# Seconds the stacks have to come back once asked (over ssh, docker, slurm: a round trip), and
# the quiet after a task's last stack line that says its text is complete.
STACKS_WAIT = 6.0
NATIVE_WAIT = 20.0  # seconds for one task's py-spy dump (its host's round trip included)
# faulthandler writes a dump in one burst, but the reader of the task's output can be starved: a
# quiet of 0.4 s cut a worker's dump after its first thread at load 5-10 on 2 cores.
STACKS_QUIET = 1.5
# How ``tfcluster stacks`` asks a run's supervisor for every live task's stacks (launcher/app/stacks.py):
# this signal to the supervisor's pid; it writes them to the record's live_stacks_dir, ``done`` last.
REQUEST_SIGNAL = signal.SIGUSR2


@dataclass(frozen=True)
class Stall:
    """The group stopped progressing: the tasks stuck, the one stuck longest, for how long, and
    the limit it passed (and under which setting)."""

    keys: tuple[str, ...]
    idle: float
    limit: float
    since: float  # the clock when the longest-stuck task last progressed
    what: str  # "watchdog.hang_timeout=auto", "watchdog.startup_timeout" ...


@dataclass(frozen=True)
class Finding:
    """What the watchdog says about a stall: the task to fail (None: the evidence does not
    decide), the failure's reason, and where the stacks went."""

    key: Optional[str]
    reason: str
    verdict: Culprit
    stacks: dict[str, str]
    hung_since: float  # wall-clock time of the last progress


class HangWatch:
    def __init__(self, *, group: AttemptGroup, backend: Backend, record: RunRecord, plan: Callable[[], Plan],
                 watchdog: Watchdog, clock: Callable[[], float]) -> None:
        self.group, self.backend, self.record, self.plan = group, backend, record, plan
        self.watchdog, self.clock = watchdog, clock

    def stalled(self, now: float, exits: dict, since: float) -> Optional[Stall]:
        """The stuck counting tasks, if any is past its limit (``since``: when every task was up).
        Before any of them made a first step, the group has ``watchdog.startup_timeout`` from
        ``since``; once one has, a task that never progressed (a PSS server, a task that runs no
        TensorFlow function) is not watched."""
        setting = self.watchdog.hang_timeout
        if setting == 0:
            return None
        strategy = self.plan().strategy
        with self.group.lock:
            keys = [k for k in self.group.handles if exits.get(k) is None and hang_watched(k)
                    and k in self.group.counting and not silent_by_design(strategy, k)]
            progress = {k: self.group.progress[k] for k in keys if k in self.group.progress}
            gaps = {k: self.group.gaps.get(k, 0.0) for k in keys}
        if keys and not progress:  # not one step yet: the first step's tracing is start-up
            limit = self.watchdog.startup_timeout
            idle = now - since
            if idle <= limit:
                return None
            return Stall(tuple(keys), idle, limit, since, "watchdog.startup_timeout, before a first step")
        named = setting if setting == "auto" else format(setting, "g")
        stuck = []
        for key, last in progress.items():
            limit = hang_limit(setting, gaps[key])
            at = max(since, last)
            if now - at > limit:
                stuck.append((at, key, now - at, limit))
        if not stuck:
            return None
        at, _, idle, limit = min(stuck)
        return Stall(tuple(k for _, k, *_ in sorted(stuck)), idle, limit, at, f"watchdog.hang_timeout={named}")

    def silent(self, now: float, exits: dict, since: float) -> Optional[str]:
        """With hang_timeout in seconds, a task that reports no count and has been silent that long
        (a stopped one first; PSS servers only when stopped): the hang as output tells it."""
        limit = output_limit(self.watchdog.hang_timeout)
        if limit <= 0:
            return None
        with self.group.lock:
            stale = [(max(since, self.group.activity[k]), k) for k in self.group.handles
                     if exits.get(k) is None and hang_watched(k)
                     and now - max(since, self.group.activity.get(k, now)) > limit]
        # A task that counts (it imported TensorFlow) is watched by its count (``stalled``), unless stopped.
        notes = self.group.state_notes([k for _, k in stale])
        stale = [(t, k) for t, k in stale if k not in self.group.counting or notes[k]]
        for _, key in sorted(stale):
            if notes[key]:
                return key
        quiet = [(t, k) for t, k in stale if not silent_by_design(self.plan().strategy, k)]
        return sorted(quiet)[0][1] if quiet else None

    def find(self, attempt: int, exits: dict, stall: Stall) -> Finding:
        """Take every live task's stacks, write them to the record, and decide the culprit."""
        live = [k for k in self.group.handles if exits.get(k) is None]
        stopped = {k: note for k, note in self.group.state_notes(live).items() if note}
        stacks = self.take_stacks([k for k in live if k not in stopped])  # (a stopped one would answer late)
        stacks = self.with_native(stacks)  # (the native frames and TensorFlow's threads tell where inside it)
        for key, text in stacks.items():
            try:
                path = stacks_path(self.record.dir, attempt + 1, key)
                dir_within(self.record.dir, path.parent)  # (never through a link planted in the record)
                write_atomic(path, text + "\n")
            except OSError:
                pass  # the report still shows the culprit's
        with self.group.lock:
            counts = {k: self.group.counts.get(k) for k in live}
        verdict = decide(live, stacks, counts, stopped)
        hung_since = time.time() - (self.clock() - stall.since)
        return Finding(verdict.key, self.reason(verdict, stall, stopped), verdict, stacks, hung_since)

    def snapshot(self, exits: dict) -> None:
        """Every live task's stacks now, for ``tfcluster stacks``: into the record's live stacks dir,
        with ``done`` (the time, each task's note) written last."""
        where = live_stacks_dir(self.record.dir)
        live = [k for k in self.group.handles if exits.get(k) is None]
        stopped = {k: note for k, note in self.group.state_notes(live).items() if note}
        stacks = self.take_stacks([k for k in live if k not in stopped])
        notes = {}
        for key in live:
            if key in stacks:
                notes[key] = ""
            elif key in stopped:
                notes[key] = f"no stacks: {stopped[key]}"
            elif not self.backend.capabilities.stacks:
                notes[key] = f"no stacks: the {self.backend.name} backend cannot signal a task's own process"
            elif key not in self.group.takes_stacks:
                notes[key] = "no stacks: it never said it takes the stacks' signal (not a Python task under tfcluster)"
            else:
                notes[key] = f"no stacks: none came within {STACKS_WAIT:g} s"
        try:
            dir_within(self.record.dir, where)  # (a planted link would have us remove another dir's files)
            for old in where.glob("*.txt"):
                old.unlink()
            for key, text in self.with_native(stacks).items():
                write_atomic(where / (key.replace(":", "-") + ".txt"), text + "\n")
            write_atomic(where / "done", json.dumps({"time": time.time(), "tasks": notes}) + "\n")
        except OSError:
            pass  # (the command waiting for them says none came)

    def with_native(self, stacks: dict[str, str]) -> dict[str, str]:
        """Each task's Python stacks, followed by its native frames where the backend takes them
        (py-spy where it is installed: ``TaskHandle.native_stacks``), every task's at once."""
        if not stacks or not self.backend.capabilities.native_stacks:
            return stacks
        with ThreadPoolExecutor(max_workers=min(16, len(stacks)), thread_name_prefix="native-stacks") as pool:
            native = dict(zip(stacks, pool.map(self._native, stacks)))
        return {k: text + ("\n\n" + native[k] if native[k] else "") for k, text in stacks.items()}

    def _native(self, key: str) -> str:
        try:
            return self.group.handles[key].native_stacks(NATIVE_WAIT)
        except Exception as exc:  # noqa: BLE001 - the Python stacks stand without them
            return f"native frames: none ({one_line(repr(exc), 200)})"

    def take_stacks(self, keys) -> dict[str, str]:
        """Every one of ``keys`` that takes the stacks' signal is sent it; their faulthandler text,
        as it comes back on their output within STACKS_WAIT seconds."""
        if not self.backend.capabilities.stacks:
            return {}
        with self.group.lock:
            asked = [k for k in keys if k in self.group.takes_stacks]
        if not asked:
            return {}
        self.group.collect(asked)
        self.group.signal_processes(asked)
        deadline = self.clock() + STACKS_WAIT
        while self.clock() < deadline:
            with self.group.lock:
                now = self.clock()
                done = all(k in self.group.stacks_at and now - self.group.stacks_at[k] > STACKS_QUIET for k in asked)
            if done:
                break
            time.sleep(0.05)
        return self.group.collected()

    def reason(self, verdict: Culprit, stall: Stall, stopped: dict) -> str:
        """The failure's words: ``stuck 41 s at train.py:88 in examples(): time.sleep(5) (...)``."""
        limit = f"(limit {stall.limit:g} s: {stall.what})"
        if verdict.key is None:
            return (f"the group stopped progressing {stall.idle:.0f} s ago {limit}; the stacks do not say which "
                    f"task stopped the others: {verdict.why}")
        if verdict.why == "stopped":
            return f"hung: no progress for {stall.limit:g} s (watchdog.hang_timeout); {stopped[verdict.key]}"
        if verdict.why == "inside TensorFlow":
            at = f" at {verdict.frame.where()}" if verdict.frame is not None and not verdict.detail else ""
            detail = f": {verdict.detail}" if verdict.detail else ""
            return (f"stuck {stall.idle:.0f} s inside TensorFlow, in {verdict.place}{at}{detail}, while the others "
                    f"wait in {verdict.others} {limit}")
        if verdict.frame is None:
            counted = f" ({verdict.detail})" if verdict.detail else ""
            return f"stuck {stall.idle:.0f} s, behind the others in its count of TensorFlow calls{counted} {limit}"
        code = code_at(verdict.frame.file, verdict.frame.line)
        return f"stuck {stall.idle:.0f} s at {verdict.frame.where()}" + (f": {code}" if code else "") + f" {limit}"


def code_at(path: str, line: int, limit: int = 120) -> str:
    """The statement at ``path``:``line`` as the failure line quotes it: its comment dropped, its
    spaces folded, control characters escaped and at most ``limit`` characters (the user's file
    is outside bytes); "" where the file cannot be read here."""
    import io
    import tokenize

    text = linecache.getline(path, line)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
        if comment is not None:
            text = text[:comment.start[1]]
    except (tokenize.TokenError, SyntaxError, IndentationError):  # (a line of a longer statement)
        pass
    return one_line(" ".join(text.split()), limit)


def plan_line(watchdog: Watchdog, commands, stacks: bool) -> str:
    """What the hang watchdog does for this plan, as ``tfcluster plan`` says it: how its limit is
    computed, which tasks count their progress, and whether stacks can be taken on this backend."""
    from launcher.supervise.standby import is_reference_worker, stub_command

    setting = watchdog.hang_timeout
    if setting == 0:
        return "hang watchdog: off (watchdog.hang_timeout: 0)"
    if setting == "auto":
        how = (f"auto: a task is stuck once its count of TensorFlow calls has not risen for max({AUTO_FLOOR:g} s, "
               f"{AUTO_FACTOR:g} x its longest gap so far)")
    else:
        how = f"a task is stuck once its count of TensorFlow calls has not risen for {setting:g} s"
    line = f"hang watchdog: {how}; its clock starts at the first step (watchdog.startup_timeout before); output is not progress"
    if not all(is_reference_worker(c) or stub_command(c) is not None for c in commands):
        line += ("; a command that is not a Python entrypoint counts nothing (nor Python without TensorFlow): " +
                 ("never called hung by auto" if setting == "auto" else f"hung after {setting:g} s without output"))
    return line + ("; at a stall every task's stacks are taken" if stacks else
                   "; this backend cannot take stacks: a stall names a stopped task or the one behind")
