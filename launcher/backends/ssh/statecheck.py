"""Is the state dir shared? In preflight, with ``state.sync: auto``, the chief's host agent writes
a marker file into its state dir and every other host's agent looks for it (over the agents'
channels: no extra remote shell); shared if every host sees it, else ``copy``. And the rule
``copy`` adds: an evaluator runs where the chief writes its checkpoints."""

from __future__ import annotations

import json
import posixpath
from typing import TYPE_CHECKING

from launcher.plan.build import Plan
from launcher.backends.ssh.runner import BadReply, parse_reply

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool


def marker_name(run_id: str) -> str:
    return f".tfcluster-shared-marker-{run_id}"


def placement_problems(plan: Plan, mode: str, chief: str) -> list[str]:
    """With copy, an evaluator must run where the chief writes its checkpoints."""
    if mode != "copy":
        return []
    return [f"{t.key} is on host {t.host} but with state.sync: copy the chief's checkpoints are only on "
            f"{chief}; put it there (tasks.evaluator.hosts: [{chief}]) or use shared storage"
            for t in plan.tasks if t.type == "evaluator" and t.host != chief]


def markers(pool: "HostPool", chief: str, hosts: list[str], sessions: dict,
            run_id: str) -> tuple[dict[str, bool], list[str]]:
    """Which hosts see the marker written through ``chief`` (host -> bool), or the problem lines."""
    path = {h: posixpath.join(pool.hosts[h].state_dir, marker_name(run_id)) for h in hosts}
    problems: list[str] = []
    try:
        ok = ask(sessions[chief], "write", path[chief])
        if ok is not True:
            return {}, [f"host {chief}: cannot write in the state dir {pool.hosts[chief].state_dir}: {ok}; "
                        "fix state.dir or its permissions"]
        others = [h for h in hosts if h != chief]
        with pool.executor(len(others)) as ex:  # all hosts at once: the slowest one, not the sum
            answers = list(ex.map(lambda h: ask(sessions[h], "check", path[h]) is True, others))
        return {chief: True, **dict(zip(others, answers))}, problems
    finally:
        try:
            ask(sessions[chief], "remove", path[chief])
        except Exception:  # noqa: BLE001 - a leftover marker is harmless (run-unique name)
            pass


def ask(chan, op: str, path: str):
    from launcher.backends.ssh.runner import readline as _readline

    chan.sendall(json.dumps({"marker": {"op": op, "path": path}}).encode() + b"\n")
    try:
        reply = parse_reply(_readline(chan) or b"{}")
    except BadReply as exc:
        return f"the agent answered {exc}"
    return reply.get("marker") if not reply.get("error") else reply["error"]
