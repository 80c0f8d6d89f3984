"""Failure blame, pure: functions of data that return a verdict. The supervisor gathers the data
(each task's last lines, exit codes, state notes) and records the verdict (a failure event);
launcher/ui/failurelines.py says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from launcher.supervise.diagnose import (diagnosis, leader_gone, mismatch, peer_abort, port_taken, root_cause,
                                         waited_for)
from launcher.system.procinfo import describe_exit
from launcher.supervise.policy import hang_watched, silent_by_design

from launcher.record.noise import TAIL  # noqa: F401 (lines of a task's output a failure's report shows)


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
