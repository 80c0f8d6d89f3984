"""Starting a task: its standby promoted, else a cold start (under the stub for a Python
entrypoint), its log offsets fixed first, the start recorded, and the environment of an attempt.

``Starter`` is a part of the supervisor (loop.py) that owns the tasks' starts, given the run's
context, the task group, the membership (for the plan in use), the standbys and the output sink.
The supervisor starts an attempt's tasks with it, and the parts that start a task in the middle of
an attempt (phases.py: a parameter_server worker restarted alone; prewarm.py: a standby that never
took its promotion, started cold) are given it as a collaborator: starting a task is this object's
work, not the supervisor's, so no part reaches back into the supervisor for it, and the supervisor
learns of those starts from the group's handles, as of its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from launcher.backends.base import StartRequest, TaskHandle
from launcher.contract import envnames
from launcher.record import events as ev
from launcher.supervise.context import RunContext
from launcher.supervise.group import AttemptGroup
from launcher.supervise.membership import Membership
from launcher.supervise.output import TaskOutput
from launcher.supervise.standby import WarmStandby, stub_command


class Starter:
    def __init__(self, ctx: RunContext, group: AttemptGroup, members: Membership, standby: WarmStandby,
                 output: TaskOutput) -> None:
        """A cold start asks for the host's warm parent as the standbys do (``standby.fork``,
        decided once for the run: standby.py's ``forks``)."""
        self.ctx, self.group, self.members, self.standby, self.output = ctx, group, members, standby, output

    def env(self, number: int) -> dict[str, str]:
        """What attempt ``number``'s tasks are told besides the plan's environment."""
        return {envnames.RESTART_COUNT: str(number), envnames.RUN_ID: self.ctx.record.run_id}

    def new_process(self, key: str) -> dict:
        """A new process of ``key`` is about to start: where this attempt's lines begin, fixed
        before the task (or the standby promoted for it) can write one: a task that prints at once
        would otherwise have lines before its offset, counted in the attempt before (`logs
        --attempt`, `status`, `attach` cut logs by them)."""
        self.group.new_process(key)
        return self.ctx.record.log_offsets(key)

    def launch(self, key: str, number: int, standby_ok: bool = True,
               ready: Optional[tuple[dict, Optional[TaskHandle]]] = None, alone: bool = False) -> None:
        """Start ``key`` for attempt ``number``: its standby promoted (unless not ``standby_ok``),
        else cold. ``ready``: its offsets (``new_process``) and its standby already promoted, or
        None (an attempt's start promotes every host's at once). ``alone``: the task restarts while
        the attempt goes on (a parameter_server worker): a standby promoted for it is replaced by
        a new one. Raises LaunchError when the backend cannot start it."""
        task = self.members.plan.task(key)
        if ready is not None:
            offsets, handle = ready
        else:
            offsets = self.new_process(key)
            handle = self.standby.promote(task, self.env(number)) if standby_ok else None
        warm = handle is not None
        if handle is None:
            stub = stub_command(task.command)  # a Python script or module: under the stub, for its liveness
            request = StartRequest(task if stub is None else replace(task, command=tuple(stub)), self.env(number),
                                   fork=self.standby.fork)
            handle = self.ctx.backend.tasks.start(request, self.output.sink())
        self.group.handles[key] = handle
        record, process = self.ctx.record, handle.info().to_json()
        record.task_started(key, attempt=number, **process)
        record.write(ev.Start(task=key, attempt=number, host=task.host, endpoint=task.endpoint,
                              process=process, **offsets))
        if warm and alone:
            self.standby.restock(number + 1, task, self.env(number + 1))
