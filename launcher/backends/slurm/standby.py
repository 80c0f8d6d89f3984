"""Warm standby on ``backend: slurm`` (restart.warm_standby; the protocol: launcher/supervise/standby.py).

A standby is one more job step in the run's allocation on its task's node, like the task's own
(step.py), always ``--overlap``, with TFCLUSTER_STANDBY=1 and TFCLUSTER_STANDBY_ENV naming its
promotion file in the run's record dir (``<run dir>/<name>/<run id>/standby/``: beside the state
dir, which shared.py checks every node sees). A promotion writes the next attempt's environment
there, then sends SIGUSR1 to the standby's local ``taskwrap -- srun`` group: taskwrap survives it
and srun forwards it to every process of its step, which is the task itself (the step's shell
``exec``s it). Not ``scancel --signal=USR1 JOB.STEP``: Slurm 22.05 delivers that too, but in a job
of several nodes it then fails ("Kill job error on job step id J: Invalid job id specified",
exit 225), as the nodes without the step answer.

GPUs, as Slurm 22.05 has them (checked in tests/labs/slurm.py's lab, whose nodes have 2): while a
task's step holds its GPUs (``--exact --gpus-per-task=N``), a second such step is not created:
its srun waits, a pending step, until they are free; an ``--overlap`` step is created at once
and given the first N of the job's GPUs on the node, whichever steps hold them.
So a standby has its task's GPUs when that task is the only one on its node with GPUs of its own
(it has all the job's GPUs there) or shares the job's GPUs (``gpus_per_task: all``); where
several tasks of a node divide its GPUs, a standby would get another task's GPUs, and those tasks
keep none (``refusal`` before the job runs, ``dividing`` once the steps are known: ``plan`` and
the run say so; every restart of the run starts cold).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Set

from launcher.errors import LaunchError
from launcher.plan import gpus as plan_gpus
from launcher.plan.build import task_keys
from launcher.backends.slurm import alloc, cli
from launcher.backends.standbyfile import write_promotion
from launcher.backends.slurm.gpus import Step

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.slurm.step import SlurmStep
    from launcher.spec.model import Spec

STANDBY_DIR = "standby"  # in the run's record dir: the promotion files
GONE_WAIT = 10.0  # s a promotion waits for its task's stopped step to end (wait_gone)


def refusal(spec: "Spec") -> Optional[str]:
    """Why this spec's run keeps no standby on slurm (pure, before the nodes are known), or None:
    some node would hold two or more tasks that each ask Slurm for GPUs of their own (a count, or
    ``auto``, which divides a node's GPUs among its GPU tasks when there are enough)."""
    if plan_gpus.placement_off(spec):
        return None
    keys = [f"{t}:{i}" for t, i in task_keys(spec)]
    o = spec.slurm
    names = [f"node{n}" for n in range(1, alloc.nodes_needed(len(keys), o.tasks_per_node, o.nodes) + 1)]
    slots = alloc.placement(keys, names, {n: n for n in names}, o.tasks_per_node)
    own = {k: slots[k][0] for k in keys if plan_gpus.take_of(spec, k.split(":")[0])[0] not in (0, "all")}
    why = dividing(own, o.tasks_per_node)
    return why and why + " (a partition without GPUs: set devices.gpus: 0)"


def dividing(own: Mapping[str, str], tasks_per_node: int) -> Optional[str]:
    """``own``: the tasks whose steps ask for GPUs of their own -> their node. Why they keep no
    standby (two or more on one node), or None."""
    on_node: dict[str, list[str]] = {}
    for key, node in own.items():
        on_node.setdefault(node, []).append(key)
    split = next((ks for ks in on_node.values() if len(ks) > 1), None)
    if split is None:
        return None
    return (f"GPU tasks {' and '.join(split[:2])} divide their node's GPUs (slurm.tasks_per_node "
            f"{tasks_per_node}), and Slurm gives a standby's step (srun --overlap) the node's first GPUs, not "
            "its task's (an --exact step waits until they are free); every restart starts cold")


def prepare(step: Step, per_node: int, run_dir: Optional[Path], step_name: str) -> Optional[Path]:
    """A standby's start: its promotion file (none without a run record), which the backend names
    in its TFCLUSTER_STANDBY_ENV (``StartRequest.told``); LaunchError where its step would not get
    its task's GPUs (the run keeps none there: ``dividing``; this guards a start all the same)."""
    if step.exclusive and step.gpus < per_node:
        raise LaunchError(f"slurm gives a standby's step (srun --overlap) the first {step.gpus} of the "
                          f"node's {per_node} GPUs, not necessarily its task's")
    return promotion_path(run_dir, step_name) if run_dir is not None else None


def promotion_path(run_dir: Path, step_name: str) -> Path:
    return run_dir / STANDBY_DIR / f"{step_name}.json"


def wait_gone(job_id: str, names: Set[str], timeout: float = GONE_WAIT) -> None:
    """Until none of the steps ``names`` is listed by squeue (their processes have ended), at most
    ``timeout`` s. A stopped task's local srun ends at once (SIGKILL), its step on the node a moment
    later: a standby promoted before then finds its task's port still held (TensorFlow: "Could not
    start gRPC server"); a cold start takes longer than that moment to reach the node."""
    deadline = time.monotonic() + timeout
    while names:
        try:
            if not names & set(cli.step_ids(job_id)):
                return
        except LaunchError:
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def promote(handle: "SlurmStep", path: Optional[Path], env: Mapping[str, str]) -> None:
    """Write ``env`` to the standby's promotion file, then SIGUSR1 to its srun, which forwards it
    to the step; LaunchError if either fails (the task then starts cold)."""
    key = handle.task.key
    if path is not None:
        try:
            write_promotion(path, env)
        except OSError as exc:
            raise LaunchError(f"slurm: cannot write the promotion file {path} of {key}'s standby: "
                              f"{exc.strerror}") from None
    if handle.poll() is not None:
        raise LaunchError(f"slurm: {key}'s standby step {handle.step_id or handle.step_name} has ended")
    try:
        os.killpg(handle.proc.pid, signal.SIGUSR1)
    except (ProcessLookupError, PermissionError) as exc:
        raise LaunchError(f"slurm: cannot signal the srun of {key}'s standby (pid {handle.proc.pid}): "
                          f"{exc.strerror}") from None


MEMORY_STEP = "tfcluster-free-memory"
# One line per node: its name and /proc/meminfo's MemAvailable line.
_MEMORY_SCRIPT = 'echo "$SLURMD_NODENAME $(grep MemAvailable: /proc/meminfo)"'


def memory_argv(job_id: str, nodes: "list[str]") -> "list[str]":
    """One step over ``nodes`` that says each node's MemAvailable."""
    return [*cli.step_on_each_node(job_id, nodes, MEMORY_STEP), "/bin/sh", "-c", _MEMORY_SCRIPT]


def parse_memory(stdout: str, nodes: "list[str]") -> dict[str, int]:
    """Bytes available per node from the step's output (pure); a node that said nothing usable is left out."""
    out: dict[str, int] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in nodes and parts[1] == "MemAvailable:" and parts[2].isdigit():
            out[parts[0]] = int(parts[2]) * 1024
    return out


def free_memory(job_id: Optional[str], nodes: "list[str]", timeout: float = 10.0) -> dict[str, int]:
    """MemAvailable of each node, read on the node itself (Slurm's FreeMem counts the page cache
    as used); {} before the job runs or when the step fails: memory unknown keeps the standby."""
    if job_id is None or not nodes:
        return {}
    try:
        proc = cli.run(memory_argv(job_id, nodes), timeout=timeout)
    except LaunchError:
        return {}
    return parse_memory(proc.stdout, nodes)
