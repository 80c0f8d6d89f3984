"""What a run record says about a run: the read side of launcher/record/writer.py.

``tfcluster status``, ``runs``, ``logs`` and ``attach`` read runs only through here: the run's
state (running, succeeded, failed, stopped, supervisor lost), its attempts, and one row per task
built from events.jsonl and launcher.json, with the figures of the ``RunView`` that
launcher/record/feed.py replays from the record (the model behind the live panel). Nothing here writes; a damaged file is reported by name
(``RecordDamaged``), never with a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import LaunchError
from ..policy import describe_exit
from ..procinfo import group_alive, is_same
from .events import Event
from .layout import EVENTS_FILE, LATEST, LAUNCHER_FILE, PLAN_FILE
from .states import Outcome, RunState, TaskState
from .writer import RecordDamaged, read_events
from .feed import replay
from .view import RunView

RUNNING, SUCCEEDED, FAILED, STOPPED, LOST = (RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED,
                                             RunState.LOST)


@dataclass
class TaskRow:
    key: str
    host: str
    state: str = TaskState.NOT_STARTED
    attempt: Optional[int] = None  # 0-based attempt of the task's last start
    epoch: Optional[int] = None  # 1-based epoch in progress (or just completed), as the live panel shows
    step: Optional[int] = None  # steps done in that epoch
    global_step: Optional[int] = None
    loss: Optional[float] = None
    accuracy: Optional[float] = None
    examples_per_sec: Optional[float] = None
    restarts: int = 0  # starts after the first (group restarts and restarts alone)
    last_line: str = ""
    alive: Optional[bool] = None  # when the run's supervisor is gone: is its process still here?
    has_result: bool = False  # printed its final tfcluster-result line (accuracy is the test accuracy)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
    final_accuracy: Optional[float] = None
    spares: list[str] = field(default_factory=list)  # hosts no task uses now (elastic runs)
    host_changes: list[str] = field(default_factory=list)  # one line per membership change

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
            "spares": self.spares, "host_changes": self.host_changes,
        }


# ------------------------------------------------------------------ finding runs


def runs_root(name_dir: Path) -> list[Path]:
    """Every run directory under ``<run_dir>/<name>/``, oldest first (run ids sort by time)."""
    if not name_dir.is_dir():
        return []
    return sorted(p for p in name_dir.iterdir()
                  if p.is_dir() and not p.is_symlink() and (p / EVENTS_FILE).exists())


def find_run(name_dir: Path, run_id: Optional[str]) -> Path:
    """The run ``run_id`` (or the latest) under ``name_dir``; LaunchError naming the fix if none."""
    if run_id:
        run = name_dir / run_id
        if not (run / EVENTS_FILE).exists() and not (run / LAUNCHER_FILE).exists():
            known = [p.name for p in runs_root(name_dir)][-5:]
            raise LaunchError(f"--run: no run {run_id} under {name_dir}"
                              + (f"; recent runs: {', '.join(known)}" if known else "; no runs there yet"))
        return run
    link = name_dir / LATEST
    if link.exists():
        return link.resolve()
    runs = runs_root(name_dir)
    if runs:
        return runs[-1]
    raise LaunchError(f"no run of this spec under {name_dir}; start one with `tfcluster up FILE`")


# ------------------------------------------------------------------ reading files


def read_json(path: Path, required: bool = False) -> Optional[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            raise RecordDamaged(f"run record incomplete: {path} is missing") from None
        return None
    except OSError as exc:
        raise RecordDamaged(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordDamaged(f"run record damaged: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise RecordDamaged(f"run record damaged: {path} is not a JSON object")
    return data


def read_launcher(run_dir: Path, required: bool = False) -> Optional[dict]:
    """The run's launcher.json (the supervisor's pid, host and start time, each task's pid/pgid,
    the backend's ``allocation``): the one reader of it (``status``, ``runs``, ``up``'s check
    for a running run, ``down``). None when it is missing, unless ``required``; RecordDamaged
    when it cannot be read or is not a JSON object."""
    return read_json(Path(run_dir) / LAUNCHER_FILE, required=required)


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
    view = RunStatus(run_id=run_dir.name, dir=run_dir, name=plan.get("name", run_dir.parent.name),
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
            view.started = e.get("time")
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
    view.attempts = attempt + 1 if events and any(e.get("event") == Event.START for e in events) else 0
    if outcome is not None:
        view.state = {Outcome.SUCCEEDED: SUCCEEDED, Outcome.INTERRUPTED: STOPPED, Outcome.STOPPED: STOPPED}.get(
            outcome.get("outcome"), FAILED)
        view.ended = outcome.get("time")
        view.reason = outcome.get("reason", "")
        view.attempts = int(outcome.get("attempts", view.attempts) or view.attempts)
        for t in rows.values():
            if t.state in (TaskState.RUNNING, TaskState.STARTING):
                t.state = TaskState.STOPPED
    else:
        pid = view.supervisor_pid
        here = view.supervisor_host in (None, socket.gethostname())
        if not here:
            view.reason = f"the supervisor runs on {view.supervisor_host}; whether it is alive cannot be checked from here"
        elif pid is None or not alive(int(pid), launcher.get("start_time")):
            view.state = LOST
            view.reason = (f"supervisor {pid} is gone and the run has no outcome" if pid
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
                view.ended = events[-1].get("time")
    if progress:
        replayed = replay(run_dir)
        _fill_progress(rows, replayed)
        view.spares = list(replayed.spares)
        view.host_changes = [c.describe() for c in replayed.host_changes]
    view.tasks = list(rows.values())
    finals = [t.accuracy for t in view.tasks if t.accuracy is not None and t.has_result]
    view.final_accuracy = finals[0] if finals else None
    return view


def _fill_progress(rows: dict[str, TaskRow], view: RunView) -> None:
    """Each row's figures from the run's view (launcher/record/feed.py replays it from the record):
    the numbers the live panel of ``up`` and ``attach`` show."""
    for key, row in rows.items():
        t = view.tasks.get(key)
        if t is None:
            continue
        row.epoch, row.step, row.global_step = t.epoch, t.step, t.global_step
        row.loss, row.accuracy, row.examples_per_sec = t.loss, t.accuracy, t.examples_per_sec
        row.last_line, row.has_result = t.last_line, t.has_result


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
