"""What the slurm lab's tests share (the lab itself is tests/labs/slurm.py): the environment of a
TensorFlow task, the run's record and Slurm job, and the check that a run left nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.waits import wait_for


def tf_env(tfds_dir) -> dict:
    """A TensorFlow task's env: this checkout's worker, the test datasets, TensorFlow's quiet logs."""
    return {"PYTHONPATH": str(ROOT), "TFDS_DATA_DIR": str(tfds_dir), "TF_CPP_MIN_LOG_LEVEL": "2"}


def latest_run(spec: Path) -> Path:
    """The record of the spec's latest run (its name is ``slurmtest``, as the lab's specs have it)."""
    return (spec.parent / "runs" / "slurmtest" / "latest").resolve()


def job_id(spec: Path) -> str:
    return json.loads((latest_run(spec) / "slurm.json").read_text())["job_id"]


def assert_clean(lab, spec: Path) -> None:
    """The run's job is gone and no process is left on any node."""
    job = job_id(spec)
    wait_for(lambda: job not in lab.jobs(), 30, what=f"slurm job {job} to end")
    for node in lab.nodes:
        wait_for(lambda node=node: not lab.node_pids(node), 20, what=f"no process left on {node}")
