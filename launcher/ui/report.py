"""The final report of ``tfcluster up``: how each task ended, and where the run's results are.

``task_table`` is pure (from a ``RunView``); ``locations`` looks at the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from launcher.contract import statedir
from launcher.record.view import RunView

_COLUMNS = ("task", "host", "state", "exit", "attempts", "steps", "examples/s", "loss", "accuracy")


def task_table(view: RunView) -> list[str]:
    """One row per task: final state, exit code, processes started, steps it ran in its last
    attempt, examples/s, and the final loss/accuracy it printed (its evaluation, else the last
    epoch's; blank when it printed none)."""
    rows = [_COLUMNS]
    for key, facts in view.outcome_facts().items():
        rows.append((
            key, view.tasks[key].host or "-", facts["state"], _opt(facts["exit_code"]), str(facts["attempts"]),
            _opt(facts["steps_run"]), _fmt(facts["examples_per_sec"], "{:.1f}"), _fmt(facts["loss"], "{:.4f}"),
            _fmt(facts["accuracy"], "{:.4f}"),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    left = {0, 1, 2}
    return ["  " + "  ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()
            for r in rows]


def gpu_peak_lines(view: RunView) -> list[str]:
    """Each GPU task's peak GPU memory, where nvidia-smi answered during the run."""
    peaks = [f"{key} {t.gpu_peak_mib} MiB" for key, t in view.tasks.items() if t.gpu_peak_mib is not None]
    return [f"  gpu memory peak: {', '.join(peaks)}"] if peaks else []


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
    width = max(len(label) for label in where) + 1
    return [f"  {(label + ':').ljust(width)} {path}" for label, path in where.items()]


def _opt(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


def _fmt(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
