"""What a run looks like right now: the model behind the live panel and the final report.

Pure: no IO, no clock. A ``RunModel`` is fed two things, in order,

* the run's events, as record/events.py reads them from ``events.jsonl`` (``run_start``, ``start``, ``ready``,
  ``exit``, ``stopped``, ``restart``, ``task_restart``, ``failure``, ``outcome``), and
* each task's output lines with the time they arrived (a sign of life, and its last line), and
  its progress records, apart (its control channel's lines, launcher/remote/taskstream.py: read
  through ``progress.parse``; a line it printed is never one),

so the same view can be driven live by the supervisor or later from a run's record on disk
(``events.jsonl`` + ``logs/``: each task's log and its progress file). A task's state and phase follow the one machine of
launcher/record/fold.py (``status`` folds the same events); the rendering (launcher/ui/panel.py)
only reads ``snapshot()``.

Beside it: taskview.py (TaskView, a task's figures, and its JSON form in a snapshot), hosts.py
(the membership events of elastic runs: lost and suspect hosts, spares, HostChange).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Optional, Sequence

from launcher.contract import progress
from launcher.contract.progress import Throughput, parse, step_shape
from launcher.record import events as ev, fold, hosts
from launcher.record.goodput import Goodput, Marks, measure
from launcher.record.events import RecordEvent, parse_event
from launcher.record.hosts import HostChange
from launcher.record.run import RunFacts
from launcher.record.states import TaskPhase, TaskState
from launcher.record.taskview import TaskView, task_from_json, task_json

# A task's states and phases (record/states.py; the machine: record/fold.py).
STARTING, RUNNING, RESTARTING = TaskState.STARTING, TaskState.RUNNING, TaskState.RESTARTING
SUCCEEDED, FAILED, STOPPED, GONE = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.GONE
IMPORTING, TRAINING, EVALUATING = TaskPhase.IMPORTING, TaskPhase.TRAINING, TaskPhase.EVALUATING




@dataclass
class RunModel:
    name: str = ""
    strategy: str = ""
    backend: str = ""
    run_id: str = ""
    run_dir: str = ""
    max_attempts: Optional[int] = None
    attempt: Optional[int] = None  # the 0-based index of the last attempt a task started in (the panel says "attempt N+1")
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    outcome: str = ""
    exit_code: Optional[int] = None
    tasks: dict[str, TaskView] = field(default_factory=dict)
    workers_lost: int = 0
    workers_recovered: int = 0
    ps_lost: int = 0
    spares: list[str] = field(default_factory=list)  # hosts no task uses (elastic runs)
    host_changes: list[HostChange] = field(default_factory=list)
    # Hosts whose session was lost (host_lost events with a suspect ``how``) and that have not
    # answered for elastic.settle s since (host_added): not used meanwhile. host -> settle (s).
    suspects: dict[str, float] = field(default_factory=dict)
    _lost: dict[str, str] = field(default_factory=dict, repr=False)  # host_lost events not yet replanned
    # The run's own facts (record/run.py, the one run fold): started_at, ended_at, outcome and
    # exit_code above are read from it as each event is applied.
    run: RunFacts = field(default_factory=RunFacts, repr=False)
    # A worker group with a min (run_start's ``group``): its size attempt by attempt, each
    # {"attempt", "size", "of", "why"} (launcher/record/hosts.py's sizes_line).
    group_sizes: list[dict] = field(default_factory=list)
    # What the run's goodput is folded from (launcher/record/goodput.py): a few numbers per attempt.
    marks: Marks = field(default_factory=Marks, repr=False)
    # The task consistently behind the others, now (straggler events): {"task", "why"}; None: none.
    straggler: Optional[dict] = None
    # The final report's rows: each attempt that ended (attempt_ended events: attempt, began,
    # ended, state, task, reason), and the hosts each plan of the run used (run_start's, then
    # each replan's).
    attempt_ends: list[dict] = field(default_factory=list)
    plan_hosts: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # -------------------------------------------------------------- feeding

    def event(self, record: Mapping[str, Any]) -> None:
        """Apply one run event (record/events.py; a plain dict as events.jsonl holds it is read
        through ``parse_event`` first: RunRecordDamaged for one tfcluster never writes)."""
        if not isinstance(record, RecordEvent):
            record = parse_event(dict(record))
        with self._lock:
            self._event(record)

    def line(self, key: str, text: str, now: float) -> None:
        """Apply one line task ``key`` printed, which arrived at ``now`` (seconds since the epoch)."""
        with self._lock:
            self._line(key, text, now)

    def lines(self, key: str, texts: Sequence[str], now: float) -> None:
        """Apply many lines ``key`` printed that all arrived at ``now`` (a replay from the record)."""
        if not texts:
            return
        shown = next((text for text in reversed(texts) if text.strip()), "")
        with self._lock:
            self._line(key, shown, now)

    def progress(self, key: str, text: str, now: float) -> None:
        """Apply one progress record of ``key``'s (a line of its control channel), come at ``now``."""
        with self._lock:
            self._progress(key, text, now)

    def progress_lines(self, key: str, texts: Sequence[str], now: float) -> None:
        """Apply many progress records of ``key``'s that all came at ``now`` (a replay from the record):
        the same view as ``progress`` on each, without the cost of the ones that cannot change it.

        A step line between two others (the worker's own format, every value well formed)
        changes nothing the next one does not overwrite: its position, loss, accuracy and
        last line are the next one's to set; the throughput is the rate between the attempt's
        first mark (made by the line before at the latest) and its last. Its rate can only
        outlast the next line's when the next goes back in global step or time, so those are
        applied. What is left costs about 2.5 µs a line (bench/status_replay.py). A step line
        in any other format (a user's own, a changed worker) is applied like every other line."""
        shapes = [step_shape(text) for text in texts]
        last = len(texts) - 1
        with self._lock:
            for i, text in enumerate(texts):
                shape = shapes[i]
                if shape is not None and 0 < i < last and shapes[i - 1] is not None:
                    after = shapes[i + 1]
                    if after is not None and after[0] == shape[0] and after[1] >= shape[1] and after[2] >= shape[2]:
                        self.marks.step(key, shape[1], shape[2])  # (goodput's gaps see every line)
                        continue
                self._progress(key, text, now)

    def snapshot(self) -> "RunModel":
        """A copy to render from while the view goes on changing."""
        with self._lock:
            copied = copy.copy(self)
            copied.tasks = {k: copy.copy(t) for k, t in self.tasks.items()}
            copied.spares = list(self.spares)
            copied.suspects = dict(self.suspects)
            copied.host_changes = [copy.copy(c) for c in self.host_changes]
            copied.group_sizes = list(self.group_sizes)
            copied.attempt_ends = [dict(a) for a in self.attempt_ends]
            copied.plan_hosts = [list(h) for h in self.plan_hosts]
            copied.marks = self.marks.copy()
        copied._lock = threading.Lock()
        return copied

    def to_json(self) -> dict[str, Any]:
        """Everything the view holds, as JSON values: ``from_json`` gives the same view back (the
        elastic fields and each task's throughput marks included). A run record's snapshot
        (launcher/record/feed.py) holds one, so ``status`` replays only what came after it."""
        with self._lock:
            out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)
                                   if f.name not in ("tasks", "host_changes", "run", "marks")}
            out["run"] = self.run.to_json()
            out["marks"] = self.marks.to_json()
            out["tasks"] = {key: task_json(t) for key, t in self.tasks.items()}
            out["host_changes"] = [asdict(c) for c in self.host_changes]
            return copy.deepcopy(out)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RunModel":
        """The view ``to_json`` gave ``data``."""
        data = copy.deepcopy(dict(data))
        tasks = {key: task_from_json(t) for key, t in data.pop("tasks", {}).items()}
        changes = [HostChange(**c) for c in data.pop("host_changes", [])]
        run = RunFacts.from_json(data.pop("run", {}))
        marks = Marks.from_json(data.pop("marks", None) or {})
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}, tasks=tasks, host_changes=changes, run=run,
                   marks=marks)

    # -------------------------------------------------------------- reading

    def elapsed(self, now: float) -> float:
        if self.started_at is None:
            return 0.0
        return max(0.0, (self.ended_at or now) - self.started_at)

    def goodput(self, now: float) -> Optional[Goodput]:
        """The run's goodput at ``now`` (at its end once it has one): launcher/record/goodput.py."""
        with self._lock:
            return measure(self.marks, now)

    def task(self, key: str) -> TaskView:
        view = self.tasks.get(key)
        if view is None:
            view = self.tasks[key] = TaskView(key)
        return view

    def chief(self) -> Optional[TaskView]:
        """The task whose steps are the run's progress (chief, else worker:0, else the first)."""
        for key in ("chief:0", "worker:0"):
            if key in self.tasks:
                return self.tasks[key]
        return next(iter(self.tasks.values()), None)

    def evaluator(self) -> Optional[TaskView]:
        return self.tasks.get("evaluator:0")

    def outcome_facts(self) -> dict[str, dict[str, Any]]:
        """Per task, how it ended: the ``outcome`` event's ``tasks`` (the report's table reads the view itself)."""
        out: dict[str, dict[str, Any]] = {}
        for key, t in self.tasks.items():
            out[key] = {
                "state": t.state, "exit_code": t.exit_code, "attempts": t.starts, "steps_run": t.steps_this_attempt(),
                "global_step": t.global_step, "examples_per_sec": t.examples_per_sec,
                "loss": t.final_loss if t.final_loss is not None else t.epoch_loss,
                "accuracy": t.final_accuracy if t.final_accuracy is not None else t.epoch_accuracy,
            }
            if t.last_checkpoint:
                out[key]["last_checkpoint"] = t.last_checkpoint
            if t.reason:
                out[key]["reason"] = t.reason
        return out

    # -------------------------------------------------------------- internals

    def _event(self, record: RecordEvent) -> None:
        at = record.time
        self.run.apply(record)
        self.marks.event(record, self.run)
        self._report_rows(record)
        if isinstance(record, ev.RunStart):
            self.name, self.strategy, self.backend = record.name, record.strategy, record.backend
            self.run_id, self.run_dir = record.run_id, record.run_dir
            if record.max_restarts is not None:
                self.max_attempts = record.max_restarts + 1
            self.started_at = self.run.started
            for k in record.tasks:
                self.task(k)
            self.spares = list(record.spares or ())
            hosts.started(self, record.group)
        elif isinstance(record, hosts.KINDS):
            hosts.apply(self, record, at)
        elif isinstance(record, fold.STATE_CLASSES):  # (the task state machine, record/fold.py)
            started = fold.step(self.tasks, record, TaskView)
            if started is not None:  # a new process: the figures of the previous one go
                self.attempt = started.attempt if self.attempt is None else max(self.attempt, started.attempt)
                t = started
                t.lost = False
                t.throughput = None
                t.examples_per_sec = None
                t.steps_run = None
                t.start_global_step = None
                t.last_line_at = at
                t.loss = t.accuracy = None
                t.last_line = ""
                t.has_result = False
            if isinstance(record, ev.RunOutcome):
                self.outcome, self.exit_code, self.ended_at = self.run.outcome, self.run.exit_code, self.run.ended
            if isinstance(record, (ev.RunOutcome, ev.GroupRestart)):
                self.straggler = None  # (a new attempt finds its own)
        elif isinstance(record, ev.GpuUsage):
            for key, pair in record.tasks.items():
                if key in self.tasks and len(pair) == 2:
                    t = self.tasks[key]
                    t.gpu_mib, t.gpu_util = _int(pair[0]), _int(pair[1])
                    t.gpu_peak_mib = max(t.gpu_peak_mib or 0, t.gpu_mib or 0)
        elif isinstance(record, ev.Straggler):
            self.straggler = {"task": record.task, "why": record.why} if record.why else None
        elif isinstance(record, ev.TaskGpus) and record.task:
            if all(isinstance(i, int) for i in record.gpus):
                t = self.task(record.task)
                t.gpus = tuple(record.gpus)
                t.gpus_visible, t.collective = record.visible, record.collective

    def _report_rows(self, record: RecordEvent) -> None:
        if isinstance(record, (ev.RunStart, ev.Replan)) and record.hosts is not None:
            self.plan_hosts.append(list(record.hosts))
        elif isinstance(record, ev.AttemptEnded) and record.began is not None and record.ended is not None:
            self.attempt_ends.append({"attempt": record.attempt, "began": record.began, "ended": record.ended,
                                      "state": record.state, "task": record.task, "reason": record.reason})

    def _line(self, key: str, text: str, now: float) -> None:
        t = self.task(key)
        t.last_line_at = now
        if text.strip():
            t.last_line = text.strip()[:200]
        fold.on_line(t, None)

    def _progress(self, key: str, text: str, now: float) -> None:
        p = parse(text)
        if p is None:
            return
        t = self.task(key)
        t.last_line_at = now
        fold.on_line(t, p)
        self.marks.line(key, p)
        if isinstance(p, (progress.StepLine, progress.EpochLine, progress.ResultLine, progress.EvalLine)):
            if p.loss is not None:
                t.loss = p.loss
            if p.accuracy is not None and 0.0 <= p.accuracy <= 1.0:
                t.accuracy = p.accuracy
        handler = _HANDLERS.get(type(p))
        if handler is not None:
            handler(self, t, p, now)

    def _on_start(self, t: TaskView, p: progress.StartLine, now: float) -> None:
        t.epochs = p.epochs or t.epochs
        t.steps_per_epoch = p.steps_per_epoch or t.steps_per_epoch
        self._position(t, p.epoch, p.step, p.global_step)
        t.start_global_step = t.global_step
        hosts.resumed(self, t)
        t.throughput = Throughput(p.global_batch) if p.global_batch else None

    def _on_step(self, t: TaskView, p: progress.StepLine, now: float) -> None:
        self._stepped(t, p.epoch, p.step, p.global_step, p.time, now)

    def _on_first_step(self, t: TaskView, p: progress.FirstStepLine, now: float) -> None:
        """Its ``step`` is the index of the step that just ended (the others count steps done)."""
        self._stepped(t, p.epoch, p.step + 1 if p.step is not None else None, p.global_step, p.time, now)

    def _stepped(self, t: TaskView, epoch: Optional[int], step: Optional[int], global_step: Optional[int],
                 at: Optional[float], now: float) -> None:
        self._position(t, epoch, step, global_step)
        if t.throughput is not None and t.global_step is not None:
            t.throughput.mark(t.global_step, at or now)
            rate = t.throughput.rate()
            if rate > 0:
                t.examples_per_sec = rate

    def _on_preempted(self, t: TaskView, p: progress.PreemptedLine, now: float) -> None:
        """It saved at ``global_step`` on a stop request."""
        if p.global_step is not None:
            t.global_step = p.global_step

    def _on_epoch(self, t: TaskView, p: progress.EpochLine, now: float) -> None:
        if p.epoch is not None:
            t.epoch = p.epoch
            if t.steps_per_epoch:
                t.step = t.steps_per_epoch
        if p.global_step is not None:
            t.global_step = p.global_step
            if t.throughput is not None:
                t.throughput.mark(t.global_step, p.time or now)
                t.examples_per_sec = t.throughput.rate() or t.examples_per_sec
        t.epoch_loss = p.loss
        t.epoch_accuracy = p.accuracy

    def _on_result(self, t: TaskView, p: progress.ResultLine, now: float) -> None:
        t.has_result = True
        if p.steps_run is not None:
            t.steps_run = p.steps_run
        if p.global_step is not None:
            t.global_step = p.global_step
        if p.examples_per_sec is not None:
            t.examples_per_sec = p.examples_per_sec
        t.final_loss = p.loss
        t.final_accuracy = p.accuracy

    def _on_eval(self, t: TaskView, p: progress.EvalLine, now: float) -> None:
        t.last_checkpoint = (p.checkpoint if p.checkpoint is not None else t.last_checkpoint) or ""
        if p.global_step is not None:
            t.global_step = p.global_step
        t.final_loss = p.loss
        t.final_accuracy = p.accuracy

    def _on_worker_lost(self, t: TaskView, p: progress.WorkerLostLine, now: float) -> None:
        self.workers_lost += 1
        if p.task:
            self.task(p.task).lost = True

    def _on_worker_recovered(self, t: TaskView, p: progress.WorkerRecoveredLine, now: float) -> None:
        self.workers_recovered += 1
        if p.task:
            self.task(p.task).lost = False

    def _on_ps_lost(self, t: TaskView, p: progress.PsLostLine, now: float) -> None:
        self.ps_lost += 1
        if p.task:
            self.task(p.task).lost = True

    @staticmethod
    def _position(t: TaskView, epoch: Optional[int], step: Optional[int], global_step: Optional[int]) -> None:
        """Step lines carry the 0-based epoch in progress and the steps done in it."""
        if epoch is not None:
            t.epoch = epoch + 1
        if step is not None:
            t.step = step
        if global_step is not None:
            t.global_step = global_step


# What each kind of progress line does to the view (a kind without a handler: its loss and
# accuracy above, its phase in fold.on_line).
_HANDLERS = {progress.StartLine: RunModel._on_start, progress.StepLine: RunModel._on_step,
             progress.FirstStepLine: RunModel._on_first_step, progress.PreemptedLine: RunModel._on_preempted,
             progress.EpochLine: RunModel._on_epoch, progress.ResultLine: RunModel._on_result,
             progress.EvalLine: RunModel._on_eval, progress.WorkerLostLine: RunModel._on_worker_lost,
             progress.WorkerRecoveredLine: RunModel._on_worker_recovered, progress.PsLostLine: RunModel._on_ps_lost}


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

