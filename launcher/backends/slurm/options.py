"""``slurm:`` -- the options block of ``backend: slurm`` (validated here, opaque to spec.py)."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator

from launcher.spec.model import OptionsModel

_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^(unlimited|infinite|UNLIMITED|INFINITE)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
# Options tfcluster sets itself on sbatch/srun; a spec must not pass them through.
OWN_OPTIONS = ("--jobid", "--nodelist", "--nodes", "--ntasks-per-node", "--ntasks", "--job-name", "--parsable",
               "--wrap", "--output", "--export", "--chdir", "--input")


class SlurmOptions(OptionsModel):
    """``slurm:`` -- the allocation ``backend: slurm`` asks for and how its steps run."""

    partition: Optional[str] = None
    """Partition (sbatch --partition); default: the cluster's default partition."""
    time: Optional[str] = None
    """Time limit of the allocation (sbatch --time): "MM", "HH:MM:SS", "D-HH:MM:SS", ..."""
    account: Optional[str] = None
    """Account to charge (sbatch --account)."""
    nodes: Optional[int] = Field(default=None, ge=1, strict=True)
    """Nodes to allocate; default: enough for every task at tasks_per_node tasks per node."""
    tasks_per_node: int = Field(default=1, ge=1, strict=True)
    """At most this many tasks on one node."""
    cpus_per_task: Optional[int] = Field(default=None, ge=1, strict=True)
    """CPUs of each task's step (the job asks sbatch --cpus-per-task for them). Default: on a run
    whose tasks use GPUs, the CPUs of the partition's nodes (Slurm's own count, sinfo) divided among
    tasks_per_node, so a GPU task's input pipeline is not left one CPU; otherwise Slurm's default
    (1). Not added when slurm.sbatch asks for CPUs itself (--cpus-per-task, --exclusive, ...)."""
    sbatch: tuple[str, ...] = ()
    """Extra sbatch options, passed through (e.g. ["--gres=gpu:4", "--exclusive"])."""
    srun: tuple[str, ...] = ()
    """Extra srun options for every task's step (e.g. ["--mem=0"])."""
    python: str = "python3"
    """Interpreter on the nodes (an absolute path is put first on the tasks' PATH)."""
    queue_timeout: float = Field(default=600.0, gt=0)
    """Seconds the allocation may stay pending before it is cancelled and reported with Slurm's reason."""

    @field_validator("time")
    @classmethod
    def _time(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _TIME_RE.match(str(v).strip()):
            raise ValueError(f"'{v}' is not a Slurm time limit; use MM, HH:MM:SS or D-HH:MM:SS (quoted: \"02:00:00\")")
        return v

    @field_validator("partition", "account")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a Slurm name (letters, digits, _ . + -); fix the name")
        return v

    @field_validator("sbatch", "srun")
    @classmethod
    def _options(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            if not str(item).startswith("-"):
                raise ValueError(f"'{item}' is not an option; give each as one string starting with -, "
                                 "e.g. \"--gres=gpu:4\"")
            for own in OWN_OPTIONS:
                if item == own or item.startswith(own + "="):
                    raise ValueError(f"'{item}': tfcluster sets {own} itself; remove it (use slurm.nodes / "
                                     "slurm.tasks_per_node for the shape)")
        return v
