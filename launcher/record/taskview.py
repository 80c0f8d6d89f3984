"""A task as the run view holds it: its state (``TaskLife``, record/fold.py) and the figures
its output gave; and its JSON form in a run record's snapshot (launcher/record/feed.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional

from launcher.contract.progress import Throughput
from launcher.record.fold import TaskLife
from launcher.record.states import TaskPhase, TaskState


@dataclass
class TaskView(TaskLife):
    """A task as the live panel shows it: its state (``TaskLife``: key, host, state, phase,
    attempt, starts, exit_code, reason; record/fold.py) and the figures its output gave."""

    epoch: Optional[int] = None  # 1-based epoch in progress (or just completed)
    epochs: Optional[int] = None
    step: Optional[int] = None  # steps done in that epoch
    steps_per_epoch: Optional[int] = None
    global_step: Optional[int] = None
    start_global_step: Optional[int] = None  # where this attempt started
    epoch_loss: Optional[float] = None  # the last completed epoch's
    epoch_accuracy: Optional[float] = None
    examples_per_sec: Optional[float] = None
    last_line_at: Optional[float] = None
    steps_run: Optional[int] = None  # from its result line
    final_loss: Optional[float] = None  # from its result (evaluation) or eval line
    final_accuracy: Optional[float] = None
    last_checkpoint: str = ""  # the evaluator's last evaluated checkpoint
    lost: bool = False  # PSS: the coordinator reported this worker/ps lost (until recovered)
    # This attempt's latest figures, whatever line carried them (step, epoch, result, eval), and
    # its last non-empty line: what ``tfcluster status`` shows per task.
    loss: Optional[float] = None
    accuracy: Optional[float] = None  # only a value within [0, 1]
    last_line: str = ""
    has_result: bool = False  # printed its final tfcluster-result line (accuracy is the test accuracy)
    # Where nvidia-smi answers (gpu_usage events): its GPU memory (MiB) and utilisation (%) now, its peak memory.
    gpu_mib: Optional[int] = None
    gpu_util: Optional[int] = None
    gpu_peak_mib: Optional[int] = None
    # The GPU indices it got where it started (task_gpus events: Slurm's, the ssh wrapper's); None: not said.
    gpus: Optional[tuple[int, ...]] = None
    gpus_visible: str = ""  # its CUDA_VISIBLE_DEVICES there where that names UUIDs (a MIG device); "" otherwise
    collective: str = ""  # the all-reduce set for it there (the ssh wrapper's collective auto); "" none
    throughput: Optional[Throughput] = field(default=None, repr=False)

    @property
    def total_steps(self) -> Optional[int]:
        if self.epochs is None or self.steps_per_epoch is None:
            return None
        return self.epochs * self.steps_per_epoch

    @property
    def training_done(self) -> bool:
        """Its training is over: it printed its result, or its global step reached epochs x
        steps per epoch (fit has then ended: the backup is gone and the final evaluation and save
        run). Unknown for a script that prints neither: False."""
        if self.has_result:
            return True
        total = self.total_steps
        return total is not None and self.global_step is not None and self.global_step >= total

    def steps_this_attempt(self) -> Optional[int]:
        if self.steps_run is not None:
            return self.steps_run
        if self.global_step is not None and self.start_global_step is not None:
            return self.global_step - self.start_global_step
        return None


def task_json(t: TaskView) -> dict[str, Any]:
    out = {f.name: getattr(t, f.name) for f in fields(t) if f.name != "throughput"}
    out["throughput"] = t.throughput.to_json() if t.throughput is not None else None
    return out


# A snapshot written before the phases were apart from the state (a run started by an older
# tfcluster, read by this one): its state word -> (state, phase).
_OLD_WORDS = {"importing": (TaskState.STARTING, TaskPhase.IMPORTING), "ready": (TaskState.RUNNING, ""),
              "training": (TaskState.RUNNING, TaskPhase.TRAINING), "evaluating": (TaskState.RUNNING, TaskPhase.EVALUATING)}


def task_from_json(data: Mapping[str, Any]) -> TaskView:
    data = dict(data)
    if data.get("state") in _OLD_WORDS:
        data["state"], data["phase"] = _OLD_WORDS[data["state"]]
    throughput = data.pop("throughput", None)
    known = {f.name for f in fields(TaskView)}
    t = TaskView(**{k: v for k, v in data.items() if k in known})
    t.throughput = Throughput.from_json(throughput) if throughput is not None else None
    return t
