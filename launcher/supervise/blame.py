"""Failure blame and report text, pure: functions of data that return a verdict or lines. The
supervisor gathers the data (each task's last lines, exit codes, state notes) and says the lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from launcher.supervise.diagnose import (diagnosis, exception_lines, hint, leader_gone, mismatch, peer_abort,
                                         port_taken, root_cause, waited_for)
from launcher.ui.noise import is_noise
from launcher.system.procinfo import describe_exit
from launcher.supervise.policy import Attempt, hang_watched, silent_by_design
from launcher.supervise.stuck import in_user_code, parse
from launcher.ui.table import render

if TYPE_CHECKING:
    from launcher.plan.elastic import PlanChange
    from launcher.plan.build import Plan
    from launcher.record.hosts import HostChange

TAIL = 15  # lines of a task's output shown in failure reports
STACK_DEPTH = 12  # frames of each thread shown in a hang's report (the record keeps them all)


@dataclass(frozen=True)
class Fault:
    """Who failed an attempt and why: the root cause, the tasks that died as its consequence
    (with their exit codes), and the others that failed too."""

    key: str
    reason: str
    code: Optional[int]
    others: tuple[str, ...] = ()
    consequences: tuple[tuple[str, Optional[int]], ...] = ()


def peers_to_ask(key: str, keys: Sequence[str], exits: Mapping[str, Optional[int]]) -> list[str]:
    """The group members whose state note ``peer_notes`` reads for ``key``'s failure: the others
    the hang watchdog watches that have not exited."""
    return [k for k in keys if k != key and hang_watched(k) and exits.get(k) is None]


def peer_notes(key: str, keys: Sequence[str], exits: Mapping[str, Optional[int]], state_note: Callable[[str], str],
               *, now: float, since: Optional[float], activity: Mapping[str, float], hang_timeout: float,
               strategy: str) -> dict[str, str]:
    """Every other group member's state for root-cause attribution: "" when healthy, else
    stopped, hung (the hang watchdog's view, before its timeout), unreachable, or dead.
    ``since``: when the hang clock started (every task ready), None before."""
    notes: dict[str, str] = {}
    for other in keys:
        if other == key or not hang_watched(other):
            continue
        code = exits.get(other)
        if code is not None:
            notes[other] = describe_exit(code) if code != 0 else ""
            continue
        note = state_note(other)  # (the ones ``peers_to_ask`` names: the caller may have asked them all at once)
        if since is not None and hang_timeout > 0:
            idle = now - max(since, activity.get(other, now))
            if note and idle > hang_timeout:  # what the hang watchdog would have said
                note = f"hung: no progress for {hang_timeout:g} s (watchdog.hang_timeout); {note}"
            elif not note and not silent_by_design(strategy, other) and idle > min(hang_timeout, 10.0):
                note = f"hung: no progress for {idle:.0f} s"
        notes[other] = note
    return notes


def blame_exit(failed: Sequence[str], exits: Mapping[str, Optional[int]], tails: Mapping[str, Sequence[str]],
               notes: Mapping[str, str], state_note: Callable[[str], str],
               read: Optional[Callable[[str], Optional[str]]] = None,
               counts: Optional[Mapping[str, Optional[int]]] = None) -> Fault:
    """An exit failed the attempt (``failed[0]`` first): blame the root cause, which may be
    another task (stopped, hung, unreachable or dead) whose state made TensorFlow abort this one.
    ``read``: the text of the task's script at a path its traceback names (diagnose.diagnosis);
    ``counts``: each task's count of TensorFlow calls (a collective that timed out waited for the
    live peer behind the others: diagnose.waited_for)."""
    key = failed[0]
    lines = tuple(tails.get(key, ()))
    gone = leader_gone(key, lines, exits) or mismatch(lines)  # (the program's failure, not a peer's state)
    if gone is not None:
        return Fault(key, f"{gone} ({describe_exit(exits[key])})" if exits[key] is not None else gone, exits[key],
                     others=tuple(failed[1:]))
    blame = root_cause(key, lines, notes)
    waited = waited_for(key, lines, exits, counts or {}) if not blame.consequence(key) or not notes.get(blame.root) \
        else None
    if waited is not None:
        blame = waited
    if not blame.consequence(key):
        # A backend's note on how the task ended ("host2: no word for 16 s ...") says more
        # than the exit code it had to make up.
        # A port another process took before the task's server could bind it: the port and its
        # holder, as the task's own line named them, not a TF crash's exit code.
        reason = port_taken(tuple(tails.get(key, ())), exits[key])
        found = None if reason else diagnosis(tuple(tails.get(key, ())), read)
        if found:  # the cause and its fix, where TensorFlow's words hide them
            reason = f"{found} ({describe_exit(exits[key])})" if exits[key] is not None else found
        return Fault(key, reason or state_note(key) or describe_exit(exits[key]), exits[key],
                     others=tuple(failed[1:]))
    root = blame.root
    consequences = [(key, exits[key])]
    others = []
    for other in failed[1:]:
        if other == root:
            continue
        (consequences.append((other, exits[other])) if peer_abort(tuple(tails.get(other, ())))
         else others.append(other))
    return Fault(root, blame.why, exits.get(root), others=tuple(others), consequences=tuple(consequences))


def failed_line(key: str, reason: str, number: int, max_restarts: int) -> str:
    return f"{key} failed: {reason} (attempt {number + 1} of {max_restarts + 1})"


def consequence_lines(key: str, consequences: Sequence[tuple[str, Optional[int]]]) -> list[str]:
    return [f"{other} exited ({describe_exit(code)}) as a consequence of {key} (its last lines say a peer was lost)"
            for other, code in consequences]


def also_failed_line(others: Sequence[str]) -> str:
    return f"also failed: {', '.join(others)}"


def report_lines(key: str, tail: Sequence[str], log_path: object, verbose: bool, gpus: bool = False,
                 port: Optional[int] = None) -> list[str]:
    """The exception line(s) a task died of, a hint for a known signature (``gpus``: the task was
    given GPUs), its last lines (without TF's known harmless lines unless ``verbose``: the log at
    ``log_path`` has them all)."""
    if not tail:
        return []
    lines = [f"  {key}: {line}" for line in exception_lines(tail)]
    known = hint(tail, gpus, port)
    if known:
        lines.append(f"  hint: {known}")
    lines.append(f"  last lines of {key} ({log_path}):")
    shown = [line for line in tail if verbose or not is_noise(line)]
    lines += [f"  | {line}" for line in shown[-TAIL:]]
    return lines


def stack_lines(key: str, stack: str, path: object) -> list[str]:
    """A hung task's stacks as the report shows them: the threads in code of the user's own first
    (launcher/supervise/stuck.py), each innermost frame first."""
    threads = parse(stack)
    threads.sort(key=lambda t: in_user_code(t) is None)
    lines = [f"  stacks of {key} ({path}):"]
    for t in threads:
        if not t.frames:
            continue
        lines.append(f"  | thread {t.ident}" + (" (in user code)" if in_user_code(t) is not None else ""))
        lines += [f"  |   {f.file}:{f.line} in {f.func}" for f in t.frames[:STACK_DEPTH]]
        if len(t.frames) > STACK_DEPTH:
            lines.append(f"  |   ... {len(t.frames) - STACK_DEPTH} more")
    return lines


def summary_lines(attempts: Sequence[Attempt], first_plan: Plan, replans: Sequence[tuple[PlanChange, dict[str, str]]],
                  host_changes: Sequence[HostChange]) -> list[str]:
    """The final report's plans (when hosts changed) and one line per attempt."""
    if not attempts:
        return []
    lines = []
    if replans:
        lines.append(f"  plans used: 1: {', '.join(sorted({t.host for t in first_plan.tasks}))}")
        for n, (change, how) in enumerate(replans, start=2):
            said = host_changes[n - 2].describe() if n - 2 < len(host_changes) else change.describe(how)
            lines.append(f"  {' ' * 12}{n}: {', '.join(sorted({t.host for t in change.plan.tasks}))} ({said})")
    rows = []
    for a in attempts:
        dur = (a.ended or time.time()) - a.started
        what = a.state
        if a.failure:
            what = f"failed: {a.failure.key} {a.failure.reason}"
        rows.append((str(a.number + 1), time.strftime('%H:%M:%S', time.localtime(a.started)), f"{dur:.1f}s", what))
    return lines + render(("attempt", "started", "duration", "outcome"), rows, right={0, 2})
