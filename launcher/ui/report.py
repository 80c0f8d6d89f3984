"""The final report of ``tfcluster up``: how each task ended, and where the run's results are.

``task_table`` is pure (from a ``RunModel``); ``locations`` looks at the disk.
"""

from __future__ import annotations

from pathlib import Path

from launcher.contract import statedir
from launcher.record.view import RunModel
from launcher.ui.columns import REPORT, Row, plain
from launcher.ui.table import render


def task_table(view: RunModel) -> list[str]:
    """One row per task (the report's columns: launcher/ui/columns.py): final state, exit code,
    processes started, steps it ran in its last attempt, examples/s, and the final loss/accuracy it
    printed (its evaluation, else the last epoch's; "-" when it printed none)."""
    return plain(REPORT, [Row.of_view(t) for t in view.tasks.values()])


def gpu_peak_lines(view: RunModel) -> list[str]:
    """Each GPU task's peak GPU memory, where nvidia-smi answered during the run."""
    peaks = [f"{key} {t.gpu_peak_mib} MiB" for key, t in view.tasks.items() if t.gpu_peak_mib is not None]
    return [f"  gpu memory peak: {', '.join(peaks)}"] if peaks else []


def goodput_lines(view: RunModel, now: float) -> list[str]:
    """The run's goodput line (launcher/record/goodput.py) at its end (``now`` while it runs)."""
    g = view.goodput(view.ended_at if view.ended_at is not None else now)
    return [f"  {g.line()}"] if g is not None and g.elapsed > 0 else []


def locations(state_dir: Path, logs_dir: Path) -> dict[str, str]:
    """Where the final model, checkpoints and TensorBoard logs are (those that exist on this
    machine), the state dir, and the task logs."""
    where: dict[str, str] = {}
    for label, name in (("final model", statedir.FINAL_MODEL), ("checkpoints", statedir.CHECKPOINTS),
                        ("TensorBoard logs", statedir.TENSORBOARD)):
        path = state_dir / name
        if path.exists():
            where[label] = str(path)
    where["state dir"] = str(state_dir)
    where["task logs"] = str(logs_dir)
    return where


def location_lines(where: dict[str, str]) -> list[str]:
    return render(None, [[f"{label}:", path] for label, path in where.items()], gap=" ")


