"""``slurm:`` -- the options block of ``backend: slurm`` (validated here, opaque to spec.py)."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, field_validator

from launcher.spec.model import OptionsModel, PosInt, Seconds

_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^(unlimited|infinite|UNLIMITED|INFINITE)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
# Options tfcluster sets itself on sbatch/srun; a spec must not pass them through.
OWN_OPTIONS = ("--jobid", "--nodelist", "--nodes", "--ntasks-per-node", "--ntasks", "--job-name", "--parsable",
               "--wrap", "--output", "--export", "--chdir", "--input", "--comment")


class SlurmOptions(OptionsModel):
    """``slurm:`` -- the allocation ``backend: slurm`` asks for and how its steps run."""

    partition: Optional[str] = Field(None, json_schema_extra={"pattern": _NAME_RE.pattern})
    """Partition (sbatch --partition); default: the cluster's default partition."""
    time: Optional[str] = Field(None, json_schema_extra={"pattern": _TIME_RE.pattern})
    """Time limit of the allocation (sbatch --time): "MM", "HH:MM:SS", "D-HH:MM:SS", ..."""
    account: Optional[str] = Field(None, json_schema_extra={"pattern": _NAME_RE.pattern})
    """Account to charge (sbatch --account)."""
    nodes: Optional[PosInt] = None
    """Nodes to allocate; default: enough for every task at tasks_per_node tasks per node."""
    tasks_per_node: PosInt = 1
    """At most this many tasks on one node."""
    cpus_per_task: Optional[PosInt] = None
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
    queue_timeout: Seconds = Field(default=600.0, gt=0)
    """Seconds the allocation may stay pending before it is cancelled and reported with Slurm's reason."""

    @field_validator("time")
    @classmethod
    def _time(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _TIME_RE.fullmatch(str(v).strip()):
            raise ValueError(f"'{v}' is not a Slurm time limit; use MM, HH:MM:SS or D-HH:MM:SS (quoted: \"02:00:00\")")
        return v

    @field_validator("partition", "account")
    @classmethod
    def _name(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not _NAME_RE.fullmatch(v):
            raise ValueError(f"'{v}' is not a Slurm name (letters, digits, _ . + -); fix the name")
        return v

    @field_validator("sbatch", "srun")
    @classmethod
    def _options(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        value_next = False  # the item before was an option whose value may be the next item
        for item in v:
            item = str(item)
            if not item.startswith("-"):
                if value_next:
                    value_next = False
                    continue
                raise ValueError(f"'{item}' is not an option; give each as one string starting with -, "
                                 "e.g. \"--gres=gpu:4\"")
            own, value_next = own_option(item)
            if own:
                raise ValueError(f"'{item}': tfcluster sets {own} itself; remove it (use slurm.nodes / "
                                 "slurm.tasks_per_node for the shape)")
        return v


# sbatch's and srun's short forms of OWN_OPTIONS, and the short options that take a value (the rest
# of a bundle such as -vo, or the next item, is then that value): as getopt parses them.
OWN_SHORT = {"w": "--nodelist", "N": "--nodes", "n": "--ntasks", "J": "--job-name", "o": "--output",
             "D": "--chdir", "i": "--input"}
SHORT_WITH_VALUE = set("AabCcDdeGiJLMmNnopqSTtwx")


def own_option(item: str) -> tuple[Optional[str], bool]:
    """(the option of OWN_OPTIONS that ``item`` sets as sbatch/srun parse it, or None; whether its
    value may be the next item). Long options count by any prefix that could name one of them
    (getopt takes a unique prefix: ``--outp=x`` is --output, ``--expor`` --export; a prefix that
    names several is refused by sbatch anyway), ``--opt value`` as ``--opt=value``; short options
    in any bundle (``-o x``, ``-ox``, ``-vo x``)."""
    if item.startswith("--"):
        name, eq, _ = item[2:].partition("=")
        if not name:
            return None, False
        for own in OWN_OPTIONS:
            if own[2:].startswith(name):
                return own, False
        return None, not eq
    for i, c in enumerate(item[1:]):
        if c in OWN_SHORT:
            return OWN_SHORT[c], False
        if c in SHORT_WITH_VALUE:
            return None, i == len(item) - 2  # (-p alone: the value is the next item)
    return None, False
