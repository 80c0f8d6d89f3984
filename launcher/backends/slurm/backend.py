"""``backend: slurm``: one gang allocation per run, every task a job step inside it.

* allocate: ``sbatch --parsable`` of a job that only holds the nodes (alloc.py), wait until
  it runs (or cancel it after ``slurm.queue_timeout`` with Slurm's reason), check that every
  node sees the workdir and the state dir (shared.py), then place the tasks on its nodes in
  Slurm's order at each node's ``NodeAddr``;
* start: ``srun --jobid=JOB --nodelist=NODE --overlap`` per task, under taskwrap (so the step
  is stopped if this launcher dies); a restart is a new step in the same allocation, or the
  warm standby's step promoted (standby.py). GPU tasks'
  steps ask Slurm for their GPUs instead (``--exact --gpus-per-task=N``, gpus.py): Slurm picks
  them, binds them and sets CUDA_VISIBLE_DEVICES; the job holds the GPUs its nodes need
  (``sbatch --gres=gpu:K``);
* signal: ``scancel --signal=SIG JOB.STEP``, the step found by its unique name; never by name
  for a whole job;
* close / ``tfcluster down``: ``scancel JOB`` of this run's job id (recorded with
  ``RunRecord.allocated``: launcher.json's ``allocation`` and ``slurm.json`` of the run record)
  and wait until Slurm reports it gone.

Success is judged per task from each step's own exit status (srun returns the task's exit
code, 128+N for signal N), as on every other backend.

Beside this module: step.py (a task's srun command line and its handle), alloc.py (the holding
job), cli.py (Slurm's commands and their output), gpus.py (GPUs per node and per step),
shared.py (every node sees the workdir and the state dir), standby.py (warm standby),
options.py (the ``slurm:`` block).
"""

from __future__ import annotations

import os
import pwd
import re
import signal as signals
import subprocess
import sys
import threading
import time
from typing import Any, Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.plan import gpus as plan_gpus
from launcher.bounded import shown
from launcher.notices import Notices, PlainNotices
from launcher.errors import AttemptImpossible, LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, task_keys
from launcher.system.procinfo import group_alive, is_same, kill_group, not_own
from launcher.record import events as ev
from launcher.remote import gpuplace, taskwrap_path
from launcher.spec.model import LoadedSpec, Spec
from launcher.backends.slurm import alloc
from launcher.backends.slurm import gpus
from launcher.backends.slurm import cli
from launcher.backends.slurm import shared
from launcher.backends.slurm import standby
from launcher.backends.base import Backend, Capabilities, LaunchLines, LineSink, RecordedRun, TaskHandle, accepts
from launcher.backends.slurm.step import SlurmStep
from launcher.backends.slurm.step import srun_argv as step_argv
from launcher.backends.slurm.options import SlurmOptions

COMPLETING_WAIT = 15.0  # s: how long prepare_attempt waits for an ending job's final state


class SlurmBackend(Backend):
    name = "slurm"
    options_key = "slurm"
    Options = SlurmOptions
    # Nodes are known only once the job runs; the launcher dials the nodes' addresses for the
    # startup watchdog; ports are not checked before (the nodes are not known then). A warm
    # standby is one more step on its task's node (standby.py).
    capabilities = Capabilities(warm_standby=True, port_probe=True, static_placement=False,
                                fresh_ports_per_restart=True, stacks=True)
    detach_note = ("the supervisor and its srun steps run on this machine: keep it on; if it stops, the steps "
                   "stop and the allocation stays until `tfcluster down` or slurm.time")

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """Placeholder nodes (``node1``, ...) laid out as allocate() will lay out the real ones."""
        keys = [f"{t}:{i}" for t, i in task_keys(spec)]
        o = spec.slurm
        count = alloc.nodes_needed(len(keys), o.tasks_per_node, o.nodes)
        names = [f"node{n}" for n in range(1, count + 1)]
        slots = alloc.placement(keys, names, {n: n for n in names}, o.tasks_per_node)
        return Placement({k: Slot(*v) for k, v in slots.items()}, placeholder=True,
                         note="slurm assigns the nodes when the job starts")

    @classmethod
    def standby_off(cls, spec: Spec) -> Optional[str]:
        return standby.refusal(spec)

    def free_memory(self, hosts: Sequence[str]) -> dict[str, int]:
        return standby.free_memory(self.job_id, sorted(hosts))

    def _standby_off_now(self, spec: Spec) -> Optional[str]:
        """Once the job runs, from the steps' GPUs as the partition has them (none: no reason)."""
        if self.job_id is None:
            return standby.refusal(spec)
        own = {k: self.placed[k] for k, st in self._steps.items() if st.exclusive and k in self.placed}
        return standby.dividing(own, self.opts.tasks_per_node)

    @classmethod
    def check_spec(cls, spec: Spec) -> list[tuple[tuple, str]]:
        o = spec.slurm
        total = len(task_keys(spec))
        if o.nodes is not None and total > o.nodes * o.tasks_per_node:
            return [(("slurm", "nodes"), f"{o.nodes} node(s) x {o.tasks_per_node} task(s) per node hold "
                     f"{o.nodes * o.tasks_per_node} tasks, the spec has {total}; raise slurm.nodes or "
                     "slurm.tasks_per_node, or drop slurm.nodes for the default")]
        return []

    def __init__(self, loaded: LoadedSpec, record: Any = None, console: Optional[Notices] = None) -> None:
        spec = loaded.spec
        self.spec = spec
        self.opts: SlurmOptions = spec.slurm
        self.workdir = (loaded.base_dir / spec.workdir).resolve()
        self.record = record
        self.console = console or PlainNotices()
        self.stop_grace = spec.watchdog.stop_grace
        self.job_id: Optional[str] = None
        self._launches = 0
        self._handles: list[SlurmStep] = []
        self._lock = threading.Lock()
        self._node_gpus: Optional[dict[str, int]] = None  # the partition's nodes' GPUs (sinfo), when asked
        self._node_cpus: dict[str, int] = {}  # and their CPUs (Slurm's count), read with them
        self._max_cpus: Optional[int] = None  # the partition's MaxCPUsPerNode
        self._partition = ""
        self._cpus_per_task: Optional[int] = None  # what the job asks each task for (preflight decides)
        self._gpus_per_node = 0  # what the job asks each node for (preflight decides)
        self._steps: dict[str, gpus.Step] = {}  # task key -> its GPU part of the step, once allocated
        self.placed: dict[str, str] = {}  # task key -> its node, once allocated
        self.standby_off = self._standby_off_now  # type: ignore[method-assign]  # the run's: its steps known

    # -------------------------------------------------------------- GPUs

    def _takes(self, keys) -> dict[str, gpus.Take]:
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
            self._node_cpus = {n: c for n, (_, c) in facts.items()}

    def _gpu_request(self, plan_tasks) -> int:
        """GPUs per node the job asks for (0: none); reads sinfo once when a task uses GPUs.
        Where the spec's sbatch options ask for GPUs per node themselves, that count."""
        takes = self._takes([t.key for t in plan_tasks])
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

    def _check_gpus(self, plan: Plan, per_node: int) -> None:
        """Preflight: enough GPU nodes in the partition, no shared GPU under NCCL; says once
        when the partition has no GPU and the tasks run on CPU."""
        takes = self._takes([t.key for t in plan.tasks])
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

    def _cpu_request(self, per_node: int) -> Optional[int]:
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
        cpus = [self._node_cpus.get(n, 0) for n in gpu_nodes or list(self._node_cpus)]
        return gpus.default_cpus_per_task(cpus, self.opts.tasks_per_node, self._max_cpus)

    def _steps_for(self, keys: Sequence[str], nodes: Mapping[str, str], cpus_per_node: int) -> dict[str, gpus.Step]:
        """Each task's GPU part of its step, once the job's GPUs per node are decided; {} for a
        run without GPU tasks (their steps are plain --overlap ones)."""
        takes = self._takes(keys)
        if not any(t != 0 for t in takes.values()):
            return {}
        return gpus.steps(takes, nodes, self._gpus_per_node, cpus_per_node, gpus.user_gpus(self.opts.sbatch)[0],
                          self.opts.cpus_per_task)

    # -------------------------------------------------------------- allocation

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

    def preflight(self, plan: Plan) -> None:
        """Commands found, partition exists and is UP, request satisfiable (nothing submitted)."""
        if not self.workdir.is_dir():
            raise LaunchError(f"workdir: {self.workdir} is not a directory; create it or fix workdir in the spec")
        self._gpus_per_node = per_node = self._gpu_request(plan.tasks)
        self._cpus_per_task = self._cpu_request(per_node)
        self._check_gpus(plan, per_node)
        alloc.check_satisfiable(self.request(len(plan.tasks), per_node, self._cpus_per_task))

    def allocate(self, spec: Spec) -> Placement:
        """Submit the holding job, record its id, wait until it runs; place the tasks on its nodes."""
        keys = [f"{t}:{i}" for t, i in task_keys(spec)]
        req = self.request(len(keys), self._gpus_per_node, self._cpus_per_task)
        self.job_id = alloc.submit(req)
        self._record_allocation()
        self.console.info(f"slurm job {self.job_id}: {req.nodes} node(s) x {req.tasks_per_node} task(s)"
                          + (f" in partition {req.partition}" if req.partition else ""))
        if self.record is not None:
            self.record.write(ev.SlurmSubmitted(job=self.job_id, nodes=req.nodes,
                                                 tasks_per_node=req.tasks_per_node))
        t0 = time.monotonic()
        # Ctrl-C, SIGTERM and SIGHUP interrupt the wait (execution.stoppable); close() cancels the job.
        nodes = alloc.wait_running(self.job_id, self.opts.queue_timeout, self.console.info)
        addresses = cli.node_addresses(nodes)
        slots = alloc.placement(keys, nodes, addresses, req.tasks_per_node)
        self.placed = {k: v[0] for k, v in slots.items()}
        if any(t != 0 for t in self._takes(keys).values()):
            self._steps = self._steps_for(keys, self.placed, cli.job_cpus(self.job_id) // max(1, len(nodes)))
        if self.record is not None:
            self.record.write(ev.SlurmRunning(job=self.job_id, nodes=list(nodes), addresses=dict(addresses),
                                               waited=round(time.monotonic() - t0, 3)))
        self._record_allocation(nodes=nodes, addresses=addresses)
        if self.record is not None:  # every node sees the code and the checkpoints (else close() cancels)
            shared.check(self.job_id, nodes, self.workdir, self.record.state_dir)
        return Placement({k: Slot(*v) for k, v in slots.items()})

    def _record_allocation(self, **extra) -> None:
        """The job id (then its nodes and their addresses) in the run record, for ``tfcluster
        down`` (``RecordedRun.allocation``): launcher.json's ``allocation`` and slurm.json."""
        if self.record is None or not self.record.dir.is_dir():
            return
        self.record.allocated(job_id=self.job_id, slurm_conf=os.environ.get("SLURM_CONF"), **extra)

    def prepare_attempt(self, number: int) -> None:
        """Before a restart: the allocation must still run (Slurm may have ended it: the time
        limit, an admin's scancel) and must not be preempted. A preemption sends every step
        SIGTERM at once (the workers save the agreed step and exit 143) and cancels or requeues
        the job after the partition's GraceTime: a restart inside it would only be killed, so
        the run ends here, and close() gives the nodes back at once. AttemptImpossible: no
        restart is spent on it; ``tfcluster up`` again resumes from the saved step."""
        if number == 0 or self.job_id is None:
            return
        st = cli.job_state(self.job_id)
        # An ended job is COMPLETING while its steps are torn down (seconds): wait for the
        # state that says why it ended (CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL ...).
        deadline = time.monotonic() + COMPLETING_WAIT
        while st.state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.5)
            st = cli.job_state(self.job_id)
        if st.state != "RUNNING":
            raise AttemptImpossible(
                f"slurm: allocation job {self.job_id} is no longer running ({st.state or 'gone'}"
                + (f", reason {st.reason}" if st.reason and st.reason != "None" else "")
                + "); what the tasks saved is kept: run tfcluster up again to resume")
        when = cli.preempted_at(self.job_id)
        if when is not None:
            raise AttemptImpossible(
                f"slurm: allocation job {self.job_id} was preempted at {when} (a higher-priority job needs its "
                "nodes); the tasks saved at Slurm's SIGTERM: run tfcluster up again to resume")

    # -------------------------------------------------------------- tasks

    def task_env(self, task: PlannedTask, extra: Mapping[str, str]) -> dict[str, str]:
        env = cli.client_env()
        env.update(task.env)
        step = self._steps.get(task.key)
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

    @classmethod
    def launch_lines(cls, loaded: LoadedSpec, plan: Plan) -> LaunchLines:
        """The ``sbatch`` line preflight would submit and each task's first ``srun`` line, from
        the partition as sinfo shows it now (read only: nothing is submitted). The job id
        (``JOB``) and the nodes (``node1``, ...) are stand-ins until the job runs."""
        self = cls(loaded)
        per_node = self._gpus_per_node = self._gpu_request(plan.tasks)
        cpus = self._cpu_request(per_node)
        req = self.request(len(plan.tasks), per_node, cpus)
        if cpus is not None:
            held = cpus * self.opts.tasks_per_node
        else:  # the user's own CPU options (--exclusive ...): a node's CPUs; else 1 per task
            known = [c for c in self._node_cpus.values() if c > 0] if gpus.asks_cpus(self.opts.sbatch) else []
            held = min(known) if known else self.opts.tasks_per_node
        steps = self._steps_for([t.key for t in plan.tasks], {t.key: t.host for t in plan.tasks}, held)
        lines = {t.key: tuple(step_argv("JOB", t, f"{t.slug}.{n}", steps.get(t.key, gpus.Step()), self.workdir,
                                        self.opts.srun)) for n, t in enumerate(plan.tasks, 1)}
        return LaunchLines(tuple(req.sbatch_argv()), lines,
                           note="JOB: the id sbatch prints; node1...: the job's nodes in Slurm's order")

    def srun_argv(self, task: PlannedTask, step_name: str, standby: bool = False) -> list[str]:
        assert self.job_id is not None, "start before allocate"
        return step_argv(self.job_id, task, step_name, self._steps.get(task.key, gpus.Step()), self.workdir,
                         self.opts.srun, standby=standby)

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> SlurmStep:
        with self._lock:
            self._launches += 1
            step_name = f"{task.slug}.{self._launches}"
        promotion = None
        is_standby = env.get(envnames.STANDBY) == "1"
        if is_standby:  # a warm standby: its own step, --overlap, and its promotion file (standby.py)
            env, promotion = standby.prepare(self._steps.get(task.key, gpus.Step()), self._gpus_per_node, env,
                                             self.record.dir if self.record is not None else None, step_name)
        argv = [sys.executable, str(taskwrap_path()), "--grace", f"{self.stop_grace:g}", "--",
                *self.srun_argv(task, step_name, standby=is_standby)]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=self.workdir, env=self.task_env(task, env), start_new_session=True,
                                close_fds=True)
        handle = SlurmStep(task, proc, on_line, self.job_id or "", step_name, task.host, self._step_gpus)
        handle.promotion = promotion
        with self._lock:
            self._handles.append(handle)
        return handle

    def promote(self, handle: TaskHandle, task: PlannedTask, env: Mapping[str, str]) -> None:
        """The environment a cold start of ``task`` would add to the Slurm client's (the plan's
        task env, its GPU settings, the run/state dirs, ``env``) into the standby's promotion
        file, then SIGUSR1 to its srun, which forwards it to the step (standby.py)."""
        assert isinstance(handle, SlurmStep)
        client = cli.client_env()
        overlay = {k: v for k, v in self.task_env(task, env).items() if client.get(k) != v}
        with self._lock:  # the task's earlier steps (the attempt just stopped) on its port: gone from its node
            # first. A restart's tasks are on fresh ports (Capabilities.fresh_ports_per_restart): none then.
            earlier = {h.step_name for h in self._handles if h.key == task.key and h is not handle
                       and h.proc.poll() is not None and h.task.port == task.port}
        if self.job_id:
            standby.wait_gone(self.job_id, earlier)
        standby.promote(handle, getattr(handle, "promotion", None), overlay)

    def _step_gpus(self, key: str, ids: list) -> None:
        """The GPUs Slurm gave a task's step, as its node numbers them: a task_gpus event (status)."""
        if self.record is not None:
            self.record.write(ev.TaskGpus(task=key, gpus=ids))

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        return accepts(task.address, task.port)

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0) -> list[str]:
        left = super().stop(handles, grace, deadline)
        # A step whose srun was killed before it reported could outlive it: cancel by id what
        # squeue still lists under these tasks' step names.
        names = {h.step_name for h in handles if isinstance(h, SlurmStep)}
        if self.job_id and names:
            try:
                for name, sid in cli.step_ids(self.job_id).items():
                    if name in names:
                        cli.scancel(sid, "KILL")
            except LaunchError:
                pass
        return left

    def close(self) -> None:
        """Cancel this run's allocation (by job id) and wait until Slurm reports it gone."""
        with self._lock:
            handles = list(self._handles)
        for h in handles:
            if h.poll() is None:
                try:
                    os.killpg(h.proc.pid, signals.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if self.job_id is None:
            return
        job, self.job_id = self.job_id, None
        try:
            alloc.cancel(job)
        except LaunchError as exc:
            sys.stderr.write(f"tfcluster: error: {exc.lines[0]}\n")
        else:
            if self.record is not None:
                self.record.write(ev.SlurmCancelled(job=job))

    # -------------------------------------------------------------- down

    def down(self, run: RecordedRun, console: Notices) -> bool:
        """``tfcluster down``: stop the run's local srun wrappers (by pgid and start time, each
        proven the run's own: procinfo.not_own) and cancel its job (by the id in its record, once
        Slurm says the job is this user's, named and commented as this run's: alloc.not_own).
        True if anything was still live."""
        stopped = False
        for key, task in run.tasks.items():
            pgid = task.get("pgid")
            if pgid and is_same(pgid, task.get("start_time")) and group_alive(pgid):
                why = not_own(pgid, task.get("start_time"), (envnames.RUN_ID, run.run_id))
                if why is not None:
                    run.refuse(console, f"{key}: not stopping process group {pgid}: {why}; the record names a "
                                        "process that is not this run's")
                    continue
                kill_group(pgid, self.stop_grace)
                console.info(f"stopped the leftover srun of {key}")
                stopped = True
        jobs = set()
        if run.allocation.get("job_id"):
            jobs.add(str(run.allocation["job_id"]))
        for task in run.tasks.values():
            if task.get("slurm_job"):
                jobs.add(str(task["slurm_job"]))
        user = pwd.getpwuid(os.getuid()).pw_name
        for job in sorted(jobs):
            if not re.fullmatch(r"[0-9]{1,20}", job):
                run.refuse(console, f"not cancelling slurm job {shown(job, 40)}, which run {run.run_id}'s record "
                                    "names: not a job id")
                continue
            if not cli.job_state(job).live:
                continue
            why = alloc.not_own(cli.job_owner(job), user, self.spec.name, run.run_id)
            if why is not None:
                run.refuse(console, f"not cancelling slurm job {job}, which run {run.run_id}'s record names: {why}; "
                                    f"if it is yours (a run of an older tfcluster has no comment), scancel {job}")
                continue
            if alloc.cancel(job):
                console.info(f"cancelled slurm job {job}")
                stopped = True
        return stopped
