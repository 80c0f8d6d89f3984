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

``sinfo -N -o '%N|%G|%c'`` says how many GPUs (``gpu:2``, ``gpu:a100:4(S:0-1)``, several
types comma-separated) and CPUs each node of the partition has; a partition whose nodes have too
few GPUs for what the spec requires fails in preflight in one line.

CPUs: the job asks ``--cpus-per-task=C`` (``slurm.cpus_per_task``, or by default the partition's
smallest GPU node's CPUs divided among ``tasks_per_node``), so its node share is C x
tasks_per_node CPUs and each ``--exact`` GPU step gets its share of them (without it the job holds
one CPU per task and a GPU task's input pipeline runs on one CPU).

Typed GPUs: when ``slurm.sbatch`` asks for a type (``--gres=gpu:a100:4``, ``--gpus-per-node=a100:4``),
every step's request names it too (``--gpus-per-task=a100:N``, ``--gres=gpu:a100:K``): Slurm 23
refuses an untyped step request in a job whose GPUs are typed ("Step requested GRES
(gpu:(null)) not found in the job").

Shared ``auto`` (more auto tasks on a node than the GPUs left for them): every such step sees the
job's GPUs on the node (``--overlap --gres=gpu:K``) and its shell keeps the one the local backend
would give it (:func:`local_share`), so tasks are spread over the GPUs as on ``backend: local``
instead of each seeing every GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

from launcher.errors import LaunchError
from launcher.remote import gpuplace
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


def parse_nodes(text: str) -> dict[str, tuple[int, int]]:
    """``sinfo -h -N -o '%N|%G|%c'`` output -> node -> (GPUs, CPUs) (a node listed twice, once
    per partition, counts once; CPUs 0 where the line has none)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 2 or not parts[0]:
            continue
        cpus = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        had = out.get(parts[0], (0, 0))
        out[parts[0]] = (max(had[0], gres_gpus(parts[1])), max(had[1], cpus))
    return out


def partition_nodes(partition: Optional[str]) -> dict[str, tuple[int, int]]:
    """Each node of the partition (the default one when None) and its (GPUs, CPUs), from sinfo."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%G|%c"] + ([f"--partition={partition}"] if partition else [])
    proc = cli.run(argv)
    if proc.returncode != 0:
        raise LaunchError(f"slurm: cannot read the nodes' GPUs (sinfo): {cli.first_error(proc)}; "
                          "is slurmctld reachable? (try: sinfo)")
    return parse_nodes(proc.stdout)


# sbatch options that ask for CPUs themselves: tfcluster then adds no --cpus-per-task.
CPU_OPTIONS = ("--cpus-per-task", "--exclusive", "--mincpus", "--cpus-per-gpu", "--cores-per-socket")


def asks_cpus(options: Sequence[str]) -> bool:
    """The user's sbatch options ask for CPUs themselves (``-c4`` included)."""
    return any(o == own or o.startswith(own + "=") for o in options for own in CPU_OPTIONS) or any(
        o.startswith("-c") and not o.startswith("--") for o in options)


def default_cpus_per_task(node_cpus: Sequence[int], tasks_per_node: int,
                          max_per_node: Optional[int] = None) -> int:
    """The nodes' CPUs (Slurm's count; the smallest node decides, bounded by the partition's
    MaxCPUsPerNode) divided among ``tasks_per_node`` tasks; at least 1."""
    have = [c for c in node_cpus if c > 0]
    if not have:
        return 1
    per_node = min(have) if max_per_node is None else min(min(have), max_per_node)
    return max(1, per_node // max(1, tasks_per_node))


def user_gpus(options: Sequence[str]) -> tuple[Optional[str], Optional[int]]:
    """What the user's sbatch options ask of GPUs: (type, GPUs per node), each None where they
    do not say. ``--gres=gpu:a100:4`` -> ("a100", 4); ``--gres=gpu:4`` -> (None, 4);
    ``--gpus-per-node=a100:2`` -> ("a100", 2); ``--gpus=a100:8`` -> ("a100", None) (a job total)."""
    kind: Optional[str] = None
    per_node: Optional[int] = None
    for opt in options:
        name, _, value = opt.partition("=")
        if name == "--gres":
            for item in re.split(r",(?![^()]*\))", value):
                parts = item.split("(")[0].strip().split(":")
                if parts[0] != "gpu":
                    continue
                if len(parts) == 3 and parts[2].isdigit():
                    kind, per_node = parts[1], int(parts[2])
                elif len(parts) == 2:
                    if parts[1].isdigit():
                        per_node = int(parts[1])
                    else:
                        kind, per_node = parts[1], 1
                elif len(parts) == 1:
                    per_node = 1
        elif name in ("--gpus-per-node", "--gpus", "-G", "--gpus-per-task", "--gpus-per-socket"):
            parts = value.split(":")
            if len(parts) == 2 and not parts[0].isdigit():
                kind = parts[0]
            if name == "--gpus-per-node" and parts[-1].isdigit():
                per_node = int(parts[-1])
        elif opt.startswith("-G") and not opt.startswith("--") and ":" in opt:
            kind = opt[2:].lstrip("=").split(":")[0]
    return kind, per_node


def auto_counts(autos: Sequence[str], left: int) -> dict[str, int]:
    """The GPUs each auto task of one node gets of the ``left`` it divides, by the arithmetic every
    backend uses (gpuplace.shares: the trainers equal, a remainder to the evaluator or idle, never
    to the first workers). Only where there is a GPU for each; fewer are shared (local_share)."""
    if left < len(autos) or not autos:
        return {}
    trainers = [k for k in autos if not k.startswith("evaluator:")]
    others = [k for k in autos if k.startswith("evaluator:")]
    places, _idle = gpuplace.shares(left, len(trainers), len(others))
    return {key: len(positions) for key, (positions, _shared) in zip(trainers + others, places)}


def local_share(place: int, count: int, gpus: int) -> list[int]:
    """The GPUs (0-based positions among ``gpus``) that auto task ``place`` of ``count`` gets where
    they outnumber the GPUs: the local backend's division, the one place slurm asks for it."""
    req = gpuplace.parse_request(gpuplace.format_request("auto", place, count, 0, count))
    ids, _shared, _problem = gpuplace.resolve(req, list(range(gpus)))
    return ids


def pick_shell(positions: Sequence[int]) -> str:
    """The step shell's prefix keeping the GPUs at ``positions`` (0-based) of those Slurm showed
    the step (CUDA_VISIBLE_DEVICES, and SLURM_STEP_GPUS, the node's indices, alike)."""
    fields = ",".join(str(p + 1) for p in positions)
    return (f'CUDA_VISIBLE_DEVICES=$(echo "$CUDA_VISIBLE_DEVICES" | cut -d, -f{fields}); '
            'export CUDA_VISIBLE_DEVICES; '
            'if [ -n "${SLURM_STEP_GPUS:-}" ]; then '
            f'SLURM_STEP_GPUS=$(echo "$SLURM_STEP_GPUS" | cut -d, -f{fields}); fi; ')


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
          cpus_per_node: int, gpu_type: Optional[str] = None, cpus_per_task: Optional[int] = None
          ) -> dict[str, Step]:
    """Each task's Step (pure). ``takes``: task key -> its GPU request; ``nodes``: task key ->
    node; ``per_node``: the GPUs the job holds on each node; ``cpus_per_node``: its CPUs there;
    ``gpu_type``: the type the job's GPUs were asked with (the steps name it too);
    ``cpus_per_task``: slurm.cpus_per_task (else a GPU step gets its share of the node's CPUs)."""
    on_node: dict[str, list[str]] = {}
    for key in takes:
        on_node.setdefault(nodes[key], []).append(key)
    typed = f"{gpu_type}:" if gpu_type else ""
    out: dict[str, Step] = {}
    for node, keys in on_node.items():
        gpu_keys = [k for k in keys if _uses(takes[k])]
        cpus = cpus_per_task or max(1, cpus_per_node // max(1, len(keys)))
        autos = [k for k in gpu_keys if takes[k] == "auto"]
        fixed = sum(t for k in gpu_keys if isinstance(t := takes[k], int))
        left = per_node - fixed  # what the auto tasks divide
        counts = auto_counts(autos, left)
        for key in keys:
            take = takes[key]
            if not _uses(take) or per_node == 0:
                out[key] = CPU_STEP if per_node else Step(shell="export CUDA_VISIBLE_DEVICES=-1; "
                                                          if not _uses(take) else "")
                continue
            if isinstance(take, int):
                n = take
            elif take == "auto" and left >= len(autos):
                n = counts[key]
            elif take == "auto" and left > 0:
                # More auto tasks than GPUs: each sees the job's GPUs and keeps its share of
                # those after the fixed counts' (as local divides them).
                keep = [fixed + p for p in local_share(autos.index(key), len(autos), left)]
                out[key] = Step(srun=("--overlap", f"--gres=gpu:{typed}{per_node}"), shell=pick_shell(keep),
                                gpus=0, shared=True)
                continue
            else:  # all: every one sees the job's GPUs
                out[key] = Step(srun=("--overlap", f"--gres=gpu:{typed}{per_node}"), gpus=0,
                                shared=len(gpu_keys) > 1)
                continue
            out[key] = Step(srun=("--exact", f"--cpus-per-task={cpus}", f"--gpus-per-task={typed}{n}"), gpus=n)
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
