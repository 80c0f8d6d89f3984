"""What a run record says about a run, as ``status`` and ``runs`` show it.

``tfcluster status`` and ``runs`` (and ``attach``, ``logs`` and ``up``'s check for a running run)
read a run's state through here, its files through launcher/record/reader.py. A ``RunStatus``
holds the run's ``RunView`` (launcher/record/view.py, the model behind the live panel and the
final report, replayed from the record by launcher/record/feed.py) and what only the record
says: the run's state (running, succeeded, failed, stopped, supervisor lost), its
attempts, the supervisor's pid, and per task the state the record says it is in and whether its
process is still alive. Its task rows (``TaskRow``) are the view's tasks with those added: the
figures (epoch, step, loss, ...) are read from the view, not copied. Nothing here writes; a damaged
file is reported by name (``RecordDamaged``), never with a traceback.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..policy import describe_exit
from ..procinfo import group_alive, is_same
from .events import Event
from .feed import replay
from .layout import PLAN_FILE
from .reader import RecordDamaged, read_events, read_json, read_launcher, runs_root
from .states import Outcome, RunState, TaskState
from .view import RunView, TaskView, suspect_lines

RUNNING, SUCCEEDED, FAILED, STOPPED, LOST = (RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED,
                                             RunState.LOST)


def _of_task(name: str, default: Any = None) -> property:
    """A TaskRow figure read from its view's task (``default`` when the row has none)."""
    return property(lambda self: getattr(self.task, name) if self.task is not None else default)


@dataclass
class TaskRow:
    """One task as ``status`` shows it: what the record says of it in events.jsonl and
    launcher.json (its state as the record says, where and in which attempt it last started,
    whether its process is alive), and its figures, read from the run's ``RunView`` task (None
    until the view has the task, or when the run was loaded without progress)."""

    key: str
    host: str
    state: str = TaskState.NOT_STARTED
    attempt: Optional[int] = None  # 0-based attempt of the task's last start
    restarts: int = 0  # starts after the first (group restarts and restarts alone)
    alive: Optional[bool] = None  # when the run's supervisor is gone: is its process still here?
    task: Optional[TaskView] = field(default=None, repr=False)  # the view's task: the figures

    # The figures are the view's task's (one run model: record/view.py), None/"" without one.
    epoch = _of_task("epoch")  # 1-based epoch in progress (or just completed), as the live panel shows
    step = _of_task("step")  # steps done in that epoch
    global_step = _of_task("global_step")
    loss = _of_task("loss")
    accuracy = _of_task("accuracy")
    examples_per_sec = _of_task("examples_per_sec")
    last_line = _of_task("last_line", "")
    has_result = _of_task("has_result", False)  # printed its final tfcluster-result line

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "host": self.host, "state": self.state, "attempt": self.attempt,
                "epoch": self.epoch, "step": self.step, "global_step": self.global_step, "loss": self.loss,
                "accuracy": self.accuracy, "examples_per_sec": self.examples_per_sec, "restarts": self.restarts,
                "last_line": self.last_line, "alive": self.alive, "has_result": self.has_result}


@dataclass
class RunStatus:
    run_id: str
    dir: Path
    name: str
    backend: str
    state: str
    started: Optional[float] = None
    ended: Optional[float] = None
    attempts: int = 0
    reason: str = ""
    supervisor_pid: Optional[int] = None
    supervisor_host: Optional[str] = None
    detached: bool = False
    tasks: list[TaskRow] = field(default_factory=list)
    # The run as the live panel saw it, replayed from the record (launcher/record/feed.py): the
    # tasks' figures, the spares and the membership changes. None when the run was loaded without
    # progress (no task log read: state only) and for a damaged record.
    view: Optional[RunView] = field(default=None, repr=False)

    @property
    def final_accuracy(self) -> Optional[float]:
        """The test accuracy of the first task that printed its result line."""
        finals = [t.accuracy for t in self.tasks if t.accuracy is not None and t.has_result]
        return finals[0] if finals else None

    @property
    def spares(self) -> list[str]:
        """Hosts no task uses now (elastic runs)."""
        return list(self.view.spares) if self.view is not None else []

    @property
    def suspects(self) -> list[str]:
        """Hosts whose session was lost, not used until they answer for elastic.settle s."""
        return suspect_lines(self.view) if self.view is not None else []

    @property
    def host_changes(self) -> list[str]:
        """One line per membership change."""
        return [c.describe() for c in self.view.host_changes] if self.view is not None else []

    def elapsed(self, now: Optional[float] = None) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else (now or time.time())) - self.started

    @property
    def finished(self) -> bool:
        return self.state in (SUCCEEDED, FAILED, STOPPED)

    def still_running(self) -> list[str]:
        """Tasks that may still run without a supervisor (alive, or not checkable from here)."""
        return [t.key for t in self.tasks
                if t.state in (TaskState.RUNNING, TaskState.STARTING) and t.alive is not False]


    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "dir": str(self.dir), "name": self.name, "backend": self.backend,
            "state": self.state, "started": self.started, "ended": self.ended, "elapsed": self.elapsed(),
            "attempts": self.attempts, "reason": self.reason, "supervisor_pid": self.supervisor_pid,
            "supervisor_host": self.supervisor_host, "detached": self.detached,
            "final_accuracy": self.final_accuracy, "tasks": [t.to_json() for t in self.tasks],
            "still_running": self.still_running() if self.state == LOST else [],
            "spares": self.spares, "suspects": self.suspects, "host_changes": self.host_changes,
        }


# ------------------------------------------------------------------ the view


def load_run(run_dir: Path, alive: Callable[[int, Optional[int]], bool] = is_same,
             group_alive: Callable[[int], bool] = group_alive, progress: bool = True) -> RunStatus:
    """Everything the record says about the run in ``run_dir`` (without reading the task logs
    when ``progress`` is false: enough for the state, cheap enough to poll)."""
    plan = read_json(run_dir / PLAN_FILE, required=True) or {}
    launcher = read_launcher(run_dir) or {}
    events = read_events(run_dir, strict=True)
    hosts = {f"{t['type']}:{t['index']}": t.get("host", "") for t in plan.get("tasks", [])
             if isinstance(t, dict) and "type" in t and "index" in t}
    status = RunStatus(run_id=run_dir.name, dir=run_dir, name=plan.get("name", run_dir.parent.name),
                       backend=plan.get("backend", launcher.get("backend", "")), state=RUNNING,
                       supervisor_pid=launcher.get("pid"), supervisor_host=launcher.get("host"),
                       detached=bool(launcher.get("detached")))
    rows = {key: TaskRow(key, host) for key, host in hosts.items()}
    outcome = None
    attempt = 0
    for e in events:
        kind = e.get("event")
        task = rows.get(e.get("task", ""))
        if kind == Event.RUN_START:
            status.started = e.get("time")
        elif kind == Event.START and task is not None:
            task.host = e.get("host") or task.host  # where it runs now (tasks move when hosts are lost)
            if task.attempt is not None:
                task.restarts += 1
            task.attempt = e.get("attempt")
            task.state = TaskState.STARTING
            attempt = max(attempt, int(e.get("attempt", 0) or 0))
        elif kind == Event.READY and task is not None:
            task.state = TaskState.RUNNING
        elif kind == Event.ATTEMPT_READY:
            for t in rows.values():
                if t.state == TaskState.STARTING and t.attempt == e.get("attempt"):
                    t.state = TaskState.RUNNING
        elif kind == Event.EXIT and task is not None:
            code = e.get("code")
            task.state = (TaskState.SUCCEEDED if code == 0 else describe_exit(int(code)) if code is not None
                          else TaskState.EXITED)
        elif kind == Event.STOPPED and task is not None:
            if task.state in (TaskState.RUNNING, TaskState.STARTING):
                task.state = TaskState.STOPPED
        elif kind == Event.OUTCOME:
            outcome = e
    status.attempts = attempt + 1 if events and any(e.get("event") == Event.START for e in events) else 0
    if outcome is not None:
        status.state = {Outcome.SUCCEEDED: SUCCEEDED, Outcome.INTERRUPTED: STOPPED, Outcome.STOPPED: STOPPED}.get(
            outcome.get("outcome"), FAILED)
        status.ended = outcome.get("time")
        status.reason = outcome.get("reason", "")
        status.attempts = int(outcome.get("attempts", status.attempts) or status.attempts)
        for t in rows.values():
            if t.state in (TaskState.RUNNING, TaskState.STARTING):
                t.state = TaskState.STOPPED
    else:
        pid = status.supervisor_pid
        here = status.supervisor_host in (None, socket.gethostname())
        if not here:
            status.reason = (f"the supervisor runs on {status.supervisor_host}; whether it is alive cannot be "
                             "checked from here")
        elif pid is None or not alive(int(pid), launcher.get("start_time")):
            status.state = LOST
            status.reason = (f"supervisor {pid} is gone and the run has no outcome" if pid
                           else "no supervisor is recorded and the run has no outcome")
            for key, info in (launcher.get("tasks") or {}).items():
                row = rows.get(key)
                if row is None or row.state not in (TaskState.RUNNING, TaskState.STARTING):
                    continue
                pgid = info.get("pgid")  # a process group on this machine (local backend)
                if pgid:
                    row.alive = bool(alive(int(pgid), info.get("start_time")) and group_alive(int(pgid)))
                    if not row.alive:
                        row.state = TaskState.GONE
            if events:
                status.ended = events[-1].get("time")
    if progress:
        status.view = replay(run_dir)
        for key, row in rows.items():
            row.task = status.view.tasks.get(key)
    status.tasks = list(rows.values())
    return status


def list_runs(name_dir: Path) -> list[RunStatus]:
    out = []
    for run in runs_root(name_dir):
        try:
            out.append(load_run(run))
        except RecordDamaged as exc:
            out.append(RunStatus(run_id=run.name, dir=run, name=name_dir.name, backend="", state=RunState.DAMAGED,
                               reason=exc.lines[0]))
    return out


def running_runs(name_dir: Path) -> list[RunStatus]:
    """Runs of this name whose supervisor is alive and that have no outcome (``up`` refuses a second)."""
    out = []
    for run in runs_root(name_dir):
        launcher = None
        try:
            launcher = read_launcher(run)
        except RecordDamaged:
            continue
        if not launcher or launcher.get("host", socket.gethostname()) != socket.gethostname() \
                or launcher.get("pid") == os.getpid():
            continue  # (a run of this very process has ended: it is not "another run")
        if not is_same(int(launcher.get("pid", 0) or 0), launcher.get("start_time")):
            continue
        try:
            view = load_run(run, progress=False)  # the state is enough (no task logs read)
        except RecordDamaged:
            continue
        if view.state == RUNNING:
            out.append(view)
    return out
