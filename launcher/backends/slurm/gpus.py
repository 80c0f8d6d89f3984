"""GPUs on ``backend: slurm``: Slurm grants them, binds them and sets CUDA_VISIBLE_DEVICES.

The holding job asks for the GPUs its nodes' tasks need (``sbatch --gres=gpu:K``: K per node);
each GPU task's step asks for its own share (``srun --exact --gpus-per-task=N
--cpus-per-task=C``), so slurmd picks GPUs no other running step holds and sets the step's
CUDA_VISIBLE_DEVICES (and, with ``ConstrainDevices``, hides the others). Facts this relies on,
checked against Slurm 22.05 (tests/labs/slurm.py's nodes declare ``Gres=gpu:2``):

* steps started with ``--overlap`` share GRES as well as CPUs: two ``--overlap
  --gpus-per-task=1`` steps on one node both get GPU 0. A GPU step is therefore not
  ``--overlap`` but ``--exact`` (without it a step takes all of the job's CPUs on the node and
  the next step waits for them); its ``--cpus-per-task`` is its share of the job's CPUs there,
  and a step started while an earlier one still holds its GPUs waits for them (a restart);
* a step with no GPU request in a job that has GPUs sees all of them; with ``--gres=none``
  Slurm unsets CUDA_VISIBLE_DEVICES. A CPU task's step is ``--overlap --gres=none`` and its
  shell sets ``CUDA_VISIBLE_DEVICES=-1`` again;
* tasks that see the same GPUs (``gpus_per_task: all``, or ``auto`` with more GPU tasks on a
  node than it has GPUs) are ``--overlap --gres=gpu:K`` steps: every one sees the job's K.

``sinfo -N -o '%N|%G'`` says how many GPUs each node of the partition has (``gpu:2``,
``gpu:a100:4(S:0-1)``, several types comma-separated); a partition whose nodes have too few for
what the spec requires fails in preflight in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

from launcher.errors import LaunchError
from launcher.backends.slurm import cli

Take = Union[int, str]  # 0: no GPU; N; "auto"; "all"

_GRES_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gres_gpus(gres: str) -> int:
    """GPUs in a node's Gres string (``gpu:2``, ``gpu:a100:4(S:0-1)``, ``gpu:a:1,gpu:b:2``,
    ``mps:100``, ``(null)``)."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        m = _GRES_GPU.match(item.strip())
        if m:
            total += int(m.group(1))
    return total


def parse_sinfo(text: str) -> dict[str, int]:
    """``sinfo -h -N -o '%N|%G'`` output -> node -> GPUs (a node listed twice, once per
    partition, counts once)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        node, gres = line.split("|", 1)
        if node.strip():
            out[node.strip()] = max(out.get(node.strip(), 0), gres_gpus(gres.strip()))
    return out


def partition_gpus(partition: Optional[str]) -> dict[str, int]:
    """Each node of the partition (the default one when None) and its GPUs, from sinfo."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%G"] + ([f"--partition={partition}"] if partition else [])
    proc = cli.run(argv)
    if proc.returncode != 0:
        raise LaunchError(f"slurm: cannot read the nodes' GPUs (sinfo): {cli.first_error(proc)}; "
                          "is slurmctld reachable? (try: sinfo)")
    return parse_sinfo(proc.stdout)


@dataclass(frozen=True)
class Step:
    """One task's GPU part of its step: srun options and the shell's prefix."""

    srun: tuple[str, ...] = ()
    shell: str = ""  # run in the step's shell before the task (the CPU task's -1)
    gpus: int = 0  # GPUs it asked Slurm for (0: none / shares the job's)
    shared: bool = False  # sees GPUs other tasks on its node see too

    @property
    def exclusive(self) -> bool:
        return self.gpus > 0 and not self.shared


CPU_STEP = Step(srun=("--overlap", "--gres=none"), shell="export CUDA_VISIBLE_DEVICES=-1; ")


def _uses(take: Take) -> bool:
    return take != 0


def node_need(takes: Sequence[Take]) -> int:
    """GPUs a node must have for these tasks' fixed counts (auto/all need none)."""
    return sum(t for t in takes if isinstance(t, int))


def job_gpus(takes_by_node: Mapping[str, Sequence[Take]], node_gpus: Sequence[int], cap: Optional[int] = None) -> int:
    """GPUs per node the holding job asks for: the most any node's fixed counts need; with auto
    or all tasks, every GPU the partition's smallest GPU node has (at least that need), or at
    most ``cap`` (a ``devices.gpus`` count: the GPUs of a node the run may use)."""
    need = max((node_need(t) for t in takes_by_node.values()), default=0)
    flexible = any(isinstance(t, str) for takes in takes_by_node.values() for t in takes)
    if not flexible:
        return need
    have = [g for g in node_gpus if g > 0]
    if not have:
        return need
    return max(need, min(min(have), cap) if cap is not None else min(have))


def steps(takes: Mapping[str, Take], nodes: Mapping[str, str], per_node: int,
          cpus_per_node: int) -> dict[str, Step]:
    """Each task's Step (pure). ``takes``: task key -> its GPU request; ``nodes``: task key ->
    node; ``per_node``: the GPUs the job holds on each node; ``cpus_per_node``: its CPUs there."""
    on_node: dict[str, list[str]] = {}
    for key in takes:
        on_node.setdefault(nodes[key], []).append(key)
    out: dict[str, Step] = {}
    for node, keys in on_node.items():
        gpu_keys = [k for k in keys if _uses(takes[k])]
        cpus = max(1, cpus_per_node // max(1, len(keys)))
        autos = [k for k in gpu_keys if takes[k] == "auto"]
        fixed = sum(t for k in gpu_keys if isinstance(t := takes[k], int))
        left = per_node - fixed  # what the auto tasks divide
        for key in keys:
            take = takes[key]
            if not _uses(take) or per_node == 0:
                out[key] = CPU_STEP if per_node else Step(shell="export CUDA_VISIBLE_DEVICES=-1; "
                                                          if not _uses(take) else "")
                continue
            if isinstance(take, int):
                n = take
            elif take == "auto" and left >= len(autos):
                n = left // len(autos)
            else:  # all, or auto with more tasks than GPUs: every one sees the job's GPUs
                out[key] = Step(srun=("--overlap", f"--gres=gpu:{per_node}"), gpus=0, shared=len(gpu_keys) > 1)
                continue
            out[key] = Step(srun=("--exact", f"--cpus-per-task={cpus}", f"--gpus-per-task={n}"), gpus=n)
    return out


def check_partition(partition: str, node_gpus: Mapping[str, int], takes_by_node: Mapping[str, Sequence[Take]],
                    nodes_needed: int, sources: str) -> Optional[str]:
    """None if enough of the partition's nodes have the GPUs the spec requires on each of its
    nodes, else the one-line problem (pure). ``sources``: which keys asked (for the fix)."""
    need = max((node_need(t) for t in takes_by_node.values()), default=0)
    if need == 0:
        return None
    fit = [n for n, g in node_gpus.items() if g >= need]
    if len(fit) >= nodes_needed:
        return None
    busiest = max(takes_by_node.values(), key=node_need)
    counted = [t for t in busiest if isinstance(t, int) and t > 0]
    how = (f"{len(counted)} task(s) x {counted[0]} GPU(s)" if len(set(counted)) == 1
           else " + ".join(str(t) for t in counted) + " GPUs")
    have = ", ".join(f"{n} {g}" for n, g in sorted(node_gpus.items())[:4]) + (" ..." if len(node_gpus) > 4 else "")
    return (f"slurm: partition '{partition}' has {len(fit)} node(s) with {need} GPUs, the run needs {nodes_needed} "
            f"({how} per node; GPUs per node: {have or 'none'}); lower {sources} or slurm.tasks_per_node, or "
            "choose a GPU partition (slurm.partition)")
