"""TensorBoard scalars per configuration under one logdir, so ``tensorboard --logdir`` overlays
them: written from the figures the comparison read (train loss/accuracy per progress line,
examples/s per interval, test loss/accuracy per epoch), stamped with the worker's own times.
Uses the tensorboard package's event writer (no TensorFlow in the launcher)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Optional


def no_tensorflow() -> None:
    """tensorboard imports all of TensorFlow for its writer unless ``tensorboard.compat.notf``
    is importable (its documented switch to the stub): the launcher stays TensorFlow-free."""
    import types

    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


def available() -> bool:
    no_tensorflow()
    try:
        import tensorboard.summary.writer.event_file_writer  # noqa: F401
    except ImportError:
        return False
    return True


def write_run(logdir: Path, run: dict, worker_logs: Optional[Path] = None) -> None:
    """One configuration's (one run's) scalars into ``logdir``; the worker's own TensorBoard
    logs (``<state>/tensorboard``), if it wrote any, are copied beside them."""
    no_tensorflow()
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(logdir))

    def scalar(tag: str, value: Optional[float], step: Optional[int], when: Optional[float]) -> None:
        if value is None or step is None or when is None:
            return
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
        writer.add_event(event_pb2.Event(wall_time=when, step=int(step), summary=summary))

    try:
        for p in run.get("trace", []):
            scalar("train/loss", p["loss"], p["global_step"], p["time"])
            scalar("train/accuracy", p["accuracy"], p["global_step"], p["time"])
        for p in run.get("rates", []):
            scalar("train/examples_per_sec", p["examples_per_sec"], p["global_step"], p["time"])
        batch = run.get("global_batch") or 0
        start = run.get("started_at") or 0.0
        for c in run.get("curve", []):
            step = c["examples"] // batch if batch else c["epoch"]
            scalar("test/accuracy", c["test_accuracy"], step, start + c["elapsed_s"])
            scalar("test/loss", c["test_loss"], step, start + c["elapsed_s"])
    finally:
        writer.close()
    if worker_logs is not None and worker_logs.is_dir():
        shutil.copytree(worker_logs, logdir / "worker", dirs_exist_ok=True)
