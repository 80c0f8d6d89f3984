"""What a run record says about a run, as ``status`` and ``runs`` show it.

``tfcluster status`` and ``runs`` (and ``attach``, ``logs`` and ``up``'s check for a running run)
read a run's state through here, its files through launcher/record/reader.py. A ``RunStatus``
holds the run's ``RunModel`` (launcher/record/view.py, the model behind the live panel and the
final report, replayed from the record by launcher/record/feed.py) and what only the record
says: the run's state (running, succeeded, failed, stopped, supervisor lost), its
attempts, the supervisor's pid, and per task the state the record says it is in and whether its
process is still alive. Its task rows (``TaskRow``) are the view's tasks with those added: the
figures (epoch, step, loss, ...) are read from the view, not copied. Nothing here writes; a damaged
file is reported by name (``RecordDamaged``), never with a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from launcher.plan.gputext import env_collective as gpu_env_collective, env_text as gpu_env_text, said_text as gpu_said_text
from launcher.system.procinfo import describe_exit
from launcher.system.procinfo import group_alive, is_same
from launcher.errors import exc_text
from launcher.record.feed import DAMAGE, replay
from launcher.record.layout import EVENTS_FILE, LAUNCHER_FILE, LOGS_DIR, OUTPUT_FILE, PLAN_FILE, SNAPSHOT_FILE, SUPERVISOR_LOG
from launcher.record.reader import RecordDamaged, read_events, read_json, read_launcher, runs_root
from launcher.record.fold import TaskLife, fold, lose
from launcher.record.goodput import Goodput
from launcher.record.run import fold_run
from launcher.record.states import Outcome, RunState, TaskState
from launcher.record.hosts import suspect_lines
from launcher.record.taskview import TaskView
from launcher.record.view import RunModel

RUNNING, SUCCEEDED, FAILED, STOPPED, LOST = (RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED,
                                             RunState.LOST)


def _of_task(name: str, default: Any = None) -> property:
    """A TaskRow figure read from its view's task (``default`` when the row has none)."""
    return property(lambda self: getattr(self.task, name) if self.task is not None else default)


@dataclass
class TaskRow:
    """One task as ``status`` shows it: its state as the record's events fold into it
    (``life``, launcher/record/fold.py: state, host, attempt, starts, exit code), whether its
    process is alive, and its figures, read from the run's ``RunModel`` task (None until the view
    has the task, or when the run was loaded without progress)."""

    key: str
    life: TaskLife
    alive: Optional[bool] = None  # when the run's supervisor is gone: is its process still here?
    task: Optional[TaskView] = field(default=None, repr=False)  # the view's task: the figures
    planned_gpus: str = ""  # its GPUs as the plan gave them (``gpu 1``, ``cpu``, ``1 gpu (at start)``; "" none said)
    planned_host: str = ""  # its host in the plan (where it runs until a start says otherwise)
    # Its all-reduce as planned where it has one (multi_worker_mirrored: ``nccl`` the plan's choice, else
    # ``ring``); "" under the other strategies.
    planned_collective: str = ""

    @property
    def host(self) -> str:
        """Where it runs now (tasks move when hosts are lost), else where the plan put it."""
        return self.life.host or self.planned_host

    @property
    def state(self) -> str:
        """Its state as ``status`` words it: a failed task's exit described (``exit code 3``)."""
        life = self.life
        if life.state == TaskState.FAILED and life.exit_code is not None:
            return describe_exit(life.exit_code)
        return life.state

    @property
    def attempt(self) -> Optional[int]:
        """0-based attempt of its last start (None: never started)."""
        return self.life.attempt

    @property
    def restarts(self) -> int:
        """Starts after the first (group restarts and restarts alone)."""
        return max(0, self.life.starts - 1)

    # The figures are the view's task's (one run model: record/view.py), None/"" without one.
    epoch = _of_task("epoch")  # 1-based epoch in progress (or just completed), as the live panel shows
    step = _of_task("step")  # steps done in that epoch
    global_step = _of_task("global_step")
    loss = _of_task("loss")
    accuracy = _of_task("accuracy")
    examples_per_sec = _of_task("examples_per_sec")
    last_line = _of_task("last_line", "")
    has_result = _of_task("has_result", False)  # printed its final tfcluster-result line
    gpu_mib = _of_task("gpu_mib")  # where nvidia-smi answered: its GPU memory (MiB), utilisation (%), peak
    gpu_util = _of_task("gpu_util")
    gpu_peak_mib = _of_task("gpu_peak_mib")

    @property
    def gpus(self) -> str:
        """Its GPUs: as the machine it started on said (a task_gpus event: its MIG device or UUIDs
        where it said those, and the collective set there, ssh's wrapper deciding collective auto on
        its host), else as planned."""
        t = self.task
        if t is None or t.gpus is None:
            return self.planned_gpus
        coll = (t.collective or self.planned_collective) if self.planned_collective else ""
        return gpu_said_text(t.gpus, t.gpus_visible, coll)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "host": self.host, "state": self.state, "attempt": self.attempt,
                "epoch": self.epoch, "step": self.step, "global_step": self.global_step, "loss": self.loss,
                "accuracy": self.accuracy, "examples_per_sec": self.examples_per_sec, "restarts": self.restarts,
                "last_line": self.last_line, "alive": self.alive, "has_result": self.has_result,
                "gpu_mib": self.gpu_mib, "gpu_util": self.gpu_util, "gpu_peak_mib": self.gpu_peak_mib,
                "gpus": self.gpus}


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
    view: Optional[RunModel] = field(default=None, repr=False)

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
    def group_sizes(self) -> str:
        """A worker group with a min: its size attempt by attempt, where it was ever smaller."""
        from launcher.record.hosts import sizes_line

        return sizes_line(self.view) if self.view is not None else ""

    @property
    def waiting(self) -> Optional[dict]:
        """Below tasks.worker.min, the wait for hosts under way (RunFacts.waiting), else None."""
        return self.view.run.waiting if self.view is not None and not self.finished else None

    @property
    def host_changes(self) -> list[str]:
        """One line per membership change."""
        return [c.describe() for c in self.view.host_changes] if self.view is not None else []

    @property
    def straggler(self) -> Optional[dict]:
        """The task consistently behind the others while the run goes on ({"task", "why"}), else None."""
        return self.view.straggler if self.view is not None and not self.finished else None

    def goodput(self, now: Optional[float] = None) -> Optional[Goodput]:
        """The run's goodput (launcher/record/goodput.py) until its end, or ``now`` while it runs;
        None without the view (loaded without progress) or before it started."""
        if self.view is None:
            return None
        at = self.ended if self.ended is not None else (now or time.time())
        return self.view.goodput(at)

    def elapsed(self, now: Optional[float] = None) -> Optional[float]:
        if self.started is None:
            return None
        return (self.ended if self.ended is not None else (now or time.time())) - self.started

    @property
    def finished(self) -> bool:
        return self.state in (SUCCEEDED, FAILED, STOPPED)

    def still_running(self) -> list[str]:
        """Tasks that may still run without a supervisor (alive, or not checkable from here)."""
        return [t.key for t in self.tasks if t.life.live and t.alive is not False]


    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "dir": str(self.dir), "name": self.name, "backend": self.backend,
            "state": self.state, "started": self.started, "ended": self.ended, "elapsed": self.elapsed(),
            "attempts": self.attempts, "reason": self.reason, "supervisor_pid": self.supervisor_pid,
            "supervisor_host": self.supervisor_host, "detached": self.detached,
            "final_accuracy": self.final_accuracy, "tasks": [t.to_json() for t in self.tasks],
            "still_running": self.still_running() if self.state == LOST else [],
            "spares": self.spares, "suspects": self.suspects, "host_changes": self.host_changes,
            "group_sizes": list(self.view.group_sizes) if self.view is not None else [],
            "waiting": self.waiting,
            "straggler": self.straggler,
            "goodput": _goodput_json(self.goodput()),
        }


# ------------------------------------------------------------------ the view


def load_run(run_dir: Path, alive: Callable[[int, Optional[int]], bool] = is_same,
             group_alive: Callable[[int], bool] = group_alive, progress: bool = True) -> RunStatus:
    """Everything the record says about the run in ``run_dir`` (without reading the task logs
    when ``progress`` is false: enough for the state, cheap enough to poll). A record whose files
    hold values tfcluster never writes (a damaged or foreign one) is RecordDamaged, one line."""
    try:
        return _load_run(run_dir, alive, group_alive, progress)
    except DAMAGE as exc:
        raise RecordDamaged(f"run record damaged: {run_dir} holds values tfcluster cannot read ({exc_text(exc)}); "
                            "move it away (or delete the run) to read the others") from None


def _load_run(run_dir: Path, alive: Callable[[int, Optional[int]], bool], group_alive: Callable[[int], bool],
              progress: bool) -> RunStatus:
    plan = read_json(run_dir / PLAN_FILE, required=True) or {}
    launcher = read_launcher(run_dir) or {}
    hosts = {f"{t['type']}:{t['index']}": _text(t.get("host", "")) for t in plan.get("tasks", [])
             if isinstance(t, dict) and "type" in t and "index" in t}
    status = RunStatus(run_id=run_dir.name, dir=run_dir, name=_text(plan.get("name", run_dir.parent.name)),
                       backend=_text(plan.get("backend", launcher.get("backend", ""))), state=RUNNING,
                       supervisor_pid=launcher.get("pid"), supervisor_host=launcher.get("host"),
                       detached=bool(launcher.get("detached")))
    # The events are folded once: with progress, by the replay into the run's view (its tasks are
    # the task fold's TaskLife, its ``run`` the run fold); without, by the two folds here.
    if progress:
        status.view = replay(run_dir)
        lives: dict[str, TaskLife] = dict(status.view.tasks)
        run, last_event = status.view.run, status.view.run.last
    else:
        events = read_events(run_dir, strict=True)
        lives, run = fold(events, hosts), fold_run(events)
        last_event = run.last
    rows = {key: TaskRow(key, lives.get(key) or TaskLife(key), planned_host=host) for key, host in hosts.items()}
    for key, row in rows.items():
        row.task = status.view.tasks.get(key) if status.view is not None else None
    for t in plan.get("tasks", []):
        if isinstance(t, dict) and "type" in t and "index" in t:
            row = rows[f"{t['type']}:{t['index']}"]
            row.planned_gpus, row.planned_collective = _planned_gpus(plan, t)
    status.started = run.started
    status.attempts = run.attempts
    if run.state is not None:
        status.state = run.state
        status.ended = run.ended  # (`down` of a lost run writes its outcome later, with "ended")
        status.reason = run.reason
    else:
        pid = status.supervisor_pid
        here = status.supervisor_host in (None, socket.gethostname())
        if not here:
            status.reason = (f"the supervisor runs on {status.supervisor_host}; whether it is alive cannot be "
                             "checked from here")
        elif pid is None or not alive(pid, launcher.get("start_time")):
            status.state = LOST
            status.reason = (f"supervisor {pid} is gone and the run has no outcome" if pid
                             else "no supervisor is recorded and the run has no outcome")
            for key, info in (launcher.get("tasks") or {}).items():
                row = rows.get(key)
                if row is None or not row.life.live:
                    continue
                pgid = info.get("pgid")  # a process group on this machine (local backend)
                if pgid:
                    row.alive = bool(alive(pgid, info.get("start_time")) and group_alive(pgid))
                    lose(row.life, row.alive)
            status.ended = last_sign_of_life(run_dir, last_event)
    status.tasks = list(rows.values())
    return status


def _planned_gpus(plan: dict, row: dict) -> tuple[str, str]:
    """A task's GPUs and its all-reduce (``planned_collective``) from plan.json (either shape: its
    own env, or the shared one with its ``env_extra``/``env_drop``), without expanding the plan."""
    shared = row.get("env", plan.get("env")) or {}
    extra, drop = row.get("env_extra") or {}, row.get("env_drop") or ()
    drop = drop if isinstance(drop, (list, tuple)) else ()  # (a damaged record's: ignored, as its env)

    def value(name: str) -> Optional[str]:
        if name in drop:
            return None
        got = extra.get(name, shared.get(name))
        return None if got is None else str(got)

    if not (isinstance(shared, dict) and isinstance(extra, dict)):
        return "", ""
    return gpu_env_text(value), gpu_env_collective(value)


def last_sign_of_life(run_dir: Path, last_event: Optional[float]) -> Optional[float]:
    """When a run whose supervisor was lost last showed it was alive: its last event's time
    (``last_event``: RunFacts.last), or the last write to its record -- a task's output in its
    log, its progress file or output.log, the supervisor's snapshot (every few seconds while it runs),
    launcher.json, supervisor.log -- whichever came last. (Events alone stop at the last start
    or ready: a run that trained for minutes after that would look seconds long.) None for a
    record with none of it."""
    times = [last_event] if last_event is not None else []
    paths = [run_dir / name for name in (EVENTS_FILE, OUTPUT_FILE, SNAPSHOT_FILE, LAUNCHER_FILE, SUPERVISOR_LOG)]
    try:
        paths += list((run_dir / LOGS_DIR).glob("*.log")) + list((run_dir / LOGS_DIR).glob("*.progress"))
    except OSError:
        pass
    for path in paths:
        try:
            times.append(path.lstat().st_mtime)  # (a link planted there: its own time, not its target's)
        except OSError:
            continue
    return max(times) if times else None


def _goodput_json(g: Optional[Goodput]) -> Optional[dict[str, Any]]:
    return g.to_json() if g is not None else None


def _text(value: Any) -> str:
    """A string of the record as it should be one (a damaged record's number or list: its JSON)."""
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)[:200]



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
        if not is_same(launcher.get("pid") or 0, launcher.get("start_time")):
            continue
        try:
            view = load_run(run, progress=False)  # the state is enough (no task logs read)
        except RecordDamaged:
            continue
        if view.state == RUNNING:
            out.append(view)
    return out
