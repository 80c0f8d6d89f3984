"""The run's Slurm job as both seams of the slurm backend see it (``SlurmHosts`` submits and
cancels it, ``SlurmTasks`` starts its steps): the request (nodes, GPUs and CPUs per node, from
the partition as sinfo shows it), the job id and its nodes once it runs, each task's GPU part of
its step, and a task's srun line and environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from launcher.backends.slurm import alloc, cli, gpus
from launcher.backends.slurm.options import SlurmOptions
from launcher.backends.slurm.step import srun_argv as step_argv
from launcher.contract import envnames
from launcher.errors import LaunchError
from launcher.notices import Notices, PlainNotices
from launcher.plan import gpus as plan_gpus
from launcher.plan.build import Plan, PlannedTask
from launcher.remote import gpuplace
from launcher.spec.model import LoadedSpec


class SlurmJob:
    """One run's job: what the probe decided it asks for, and, once allocated, its id, each
    task's node and each task's GPU part of its step."""

    def __init__(self, loaded: LoadedSpec, record: Any = None, console: Optional[Notices] = None) -> None:
        spec = loaded.spec
        self.spec = spec
        self.opts: SlurmOptions = spec.slurm
        self.workdir: Path = (loaded.base_dir / spec.workdir).resolve()
        self.record = record
        self.console = console or PlainNotices()
        self.stop_grace = spec.watchdog.stop_grace
        self.job_id: Optional[str] = None
        self._node_gpus: Optional[dict[str, int]] = None  # the partition's nodes' GPUs (sinfo), when asked
        self.node_cpus: dict[str, int] = {}  # and their CPUs (Slurm's count), read with them
        self._max_cpus: Optional[int] = None  # the partition's MaxCPUsPerNode
        self._partition = ""
        self.cpus_per_task: Optional[int] = None  # what the job asks each task for (the probe decides)
        self.gpus_per_node = 0  # what the job asks each node for (the probe decides)
        self.steps: dict[str, gpus.Step] = {}  # task key -> its GPU part of the step, once allocated
        self.placed: dict[str, str] = {}  # task key -> its node, once allocated

    def takes(self, keys) -> dict[str, gpus.Take]:
        """Task key -> its GPU request (0 for all when the spec's env sets CUDA_VISIBLE_DEVICES:
        then tfcluster asks Slurm for nothing)."""
        if plan_gpus.placement_off(self.spec):
            return {k: 0 for k in keys}
        return {k: plan_gpus.take_of(self.spec, k.split(":")[0])[0] for k in keys}

    def _by_node(self, takes: Mapping[str, gpus.Take], nodes: Mapping[str, str]) -> dict[str, list]:
        out: dict[str, list] = {}
        for key, take in takes.items():
            out.setdefault(nodes[key], []).append(take)
        return out

    def _read_nodes(self) -> None:
        """The partition's nodes' GPUs and CPUs (sinfo), read once."""
        if self._node_gpus is None:
            part = cli.partition(self.opts.partition)  # one line if there is none
            self._partition, self._max_cpus = part.name, part.max_cpus_per_node
            facts = gpus.partition_nodes(self._partition)
            self._node_gpus = {n: g for n, (g, _) in facts.items()}
            self.node_cpus = {n: c for n, (_, c) in facts.items()}

    def gpu_request(self, plan_tasks) -> int:
        """GPUs per node the job asks for (0: none); reads sinfo once when a task uses GPUs.
        Where the spec's sbatch options ask for GPUs per node themselves, that count."""
        takes = self.takes([t.key for t in plan_tasks])
        if not any(t != 0 for t in takes.values()):
            return 0
        self._read_nodes()
        asked = gpus.user_gpus(self.opts.sbatch)[1]
        if asked is not None:
            return asked
        # devices.gpus as a count or list: that many of a node's GPUs (Slurm picks which).
        use = self.spec.devices.gpus
        cap = None if use == "all" else use if isinstance(use, int) else len(use)
        return gpus.job_gpus(self._by_node(takes, {t.key: t.host for t in plan_tasks}),
                             list(self._node_gpus.values()), cap)

    def check_gpus(self, plan: Plan, per_node: int) -> None:
        """Preflight: enough GPU nodes in the partition, no shared GPU under NCCL; says once
        when the partition has no GPU and the tasks run on CPU."""
        takes = self.takes([t.key for t in plan.tasks])
        if not any(t != 0 for t in takes.values()):
            return
        node_gpus = self._node_gpus or {}
        nodes = {t.key: t.host for t in plan.tasks}
        by_node = self._by_node(takes, nodes)
        sources = sorted({"devices." + t.gpus.source if t.gpus.source == "gpus_per_task" else t.gpus.source
                          for t in plan.tasks if t.gpus.required}) or ["devices.gpus_per_task"]
        name = self._partition
        problem = gpus.check_partition(name, node_gpus, by_node, len(by_node), " / ".join(sources))
        if problem:
            raise LaunchError(problem)
        if per_node == 0:
            self.console.info(f"slurm: partition '{name}' has no GPU (sinfo Gres); the tasks run on CPU")
            return
        if self.spec.collective.implementation == "nccl":
            shared = [k for k, st in gpus.steps(takes, nodes, per_node, 1).items() if st.shared]
            if shared:
                raise LaunchError(f"slurm: {', '.join(shared[:3])} would share GPUs ({per_node} per node for "
                                  f"{len(shared)} GPU tasks), and NCCL refuses two ranks on one GPU; lower "
                                  "slurm.tasks_per_node or set collective.implementation: ring")

    def cpu_request(self, per_node: int) -> Optional[int]:
        """CPUs per task the job asks for (``--cpus-per-task``): slurm.cpus_per_task; else, when
        the job holds GPUs, the partition's GPU nodes' CPUs (Slurm's count) divided among
        tasks_per_node; None (Slurm's default, 1) for a CPU run or when slurm.sbatch asks for
        CPUs itself (--exclusive, --cpus-per-task, ...)."""
        if gpus.asks_cpus(self.opts.sbatch):
            return None
        if self.opts.cpus_per_task is not None:
            return self.opts.cpus_per_task
        if per_node == 0:
            return None
        self._read_nodes()
        gpu_nodes = [n for n, g in (self._node_gpus or {}).items() if g > 0]
        cpus = [self.node_cpus.get(n, 0) for n in gpu_nodes or list(self.node_cpus)]
        return gpus.default_cpus_per_task(cpus, self.opts.tasks_per_node, self._max_cpus)

    def steps_for(self, keys: Sequence[str], nodes: Mapping[str, str], cpus_per_node: int) -> dict[str, gpus.Step]:
        """Each task's GPU part of its step, once the job's GPUs per node are decided; {} for a
        run without GPU tasks (their steps are plain --overlap ones)."""
        takes = self.takes(keys)
        if not any(t != 0 for t in takes.values()):
            return {}
        return gpus.steps(takes, nodes, self.gpus_per_node, cpus_per_node, gpus.user_gpus(self.opts.sbatch)[0],
                          self.opts.cpus_per_task)

    def request(self, task_count: int, gpus_per_node: int = 0, cpus_per_task: Optional[int] = None) -> alloc.Request:
        o = self.opts
        extra = tuple(o.sbatch)
        # The GPUs the steps ask for, unless the spec's sbatch options ask for GPUs themselves.
        if gpus_per_node and not any(a.startswith(("--gres", "--gpus")) for a in extra):
            extra = (f"--gres=gpu:{gpus_per_node}",) + extra
        return alloc.Request(
            job_name=f"tfcluster-{self.spec.name}", nodes=alloc.nodes_needed(task_count, o.tasks_per_node, o.nodes),
            tasks_per_node=o.tasks_per_node, partition=o.partition, time=o.time, account=o.account, extra=extra,
            cpus_per_task=cpus_per_task,
            comment=alloc.job_comment(self.spec.name, self.record.run_id) if self.record is not None else None,
        )

    def record_allocation(self, **extra) -> None:
        """The job id (then its nodes and their addresses) in the run record, for ``tfcluster
        down`` (``RecordedRun.allocation``): launcher.json's ``allocation`` and slurm.json."""
        if self.record is None or not self.record.dir.is_dir():
            return
        self.record.allocated(job_id=self.job_id, slurm_conf=os.environ.get("SLURM_CONF"), **extra)

    def task_env(self, task: PlannedTask, extra: Mapping[str, str]) -> dict[str, str]:
        env = cli.client_env()
        env.update(task.env)
        step = self.steps.get(task.key)
        if step is not None:
            self._gpu_env(env, task, step)
        path = env.get("PATH", "")
        if os.path.isabs(self.opts.python):
            path = os.pathsep.join([os.path.dirname(self.opts.python), path])
        env["PATH"] = path
        if self.record is not None:
            env[envnames.RUN_DIR] = str(self.record.dir)
            env[envnames.STATE_DIR] = str(self.record.state_dir)
        env.update(extra)
        return env

    def _gpu_env(self, env: dict, task: PlannedTask, step: gpus.Step) -> None:
        """A step's environment for its GPUs: Slurm sets CUDA_VISIBLE_DEVICES, so the request
        marker goes; the memory setting is made as the plan makes it where it knows the GPUs.
        A step that has CPUs of its own (--exact) makes its thread budget from them alone."""
        req = gpuplace.parse_request(env.pop(envnames.GPUS, ""))
        if req is not None and (step.gpus or step.shared):
            env.update(gpuplace.memory_env(req["mem"], step.shared, {**self.spec.env, **env}))
            if req["mem"].isdigit() and envnames.GPU_MEMORY not in self.spec.env:
                env.setdefault(envnames.GPU_MEMORY, req["mem"])
            env.setdefault(gpuplace.ORDER_VAR, gpuplace.ORDER)
        if step.exclusive and envnames.THREADS in env:
            env[envnames.THREADS] = "0/1"

    def srun_argv(self, task: PlannedTask, step_name: str, standby: bool = False) -> list[str]:
        assert self.job_id is not None, "start before allocate"
        return step_argv(self.job_id, task, step_name, self.steps.get(task.key, gpus.Step()), self.workdir,
                         self.opts.srun, standby=standby, python=self.opts.python)
