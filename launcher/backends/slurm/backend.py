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
options.py (the ``slurm:`` block), job.py (the run's job: what it asks for, its id, its nodes and
steps), which this module's two seams share: ``SlurmHosts`` (the job: submitted, waited for,
cancelled) and ``SlurmTasks`` (its steps).
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
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.bounded import shown
from launcher.notices import Notices
from launcher.errors import AttemptImpossible, LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, task_keys
from launcher.system.procinfo import group_alive, is_same, kill_group, not_own
from launcher.record import events as ev
from launcher.remote import wrapper_argv
from launcher.spec.model import LoadedSpec, Spec
from launcher.backends.slurm import alloc
from launcher.backends.slurm import gpus
from launcher.backends.slurm import cli
from launcher.backends.slurm import shared
from launcher.backends.slurm import standby
from launcher.backends.base import (Backend, BackendKind, Capabilities, Hosts, LaunchLines, OutputSink, RecordedRun,
                                    StartRequest, TaskHandle, Tasks, accepts)
from launcher.backends.process import from_record
from launcher.backends.slurm.job import SlurmJob
from launcher.backends.slurm.step import SlurmStep
from launcher.backends.slurm.step import srun_argv as step_argv
from launcher.backends.slurm.options import SlurmOptions

COMPLETING_WAIT = 15.0  # s: how long prepare_attempt waits for an ending job's final state


class SlurmBackend(BackendKind):
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
    def task_dirs(cls, loaded: LoadedSpec) -> list[Path]:
        """The spec's workdir, on the file system the nodes share: every step runs there."""
        return [(loaded.base_dir / loaded.spec.workdir).resolve()]

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

    @classmethod
    def check_spec(cls, spec: Spec) -> list[tuple[tuple, str]]:
        o = spec.slurm
        total = len(task_keys(spec))
        if o.nodes is not None and total > o.nodes * o.tasks_per_node:
            return [(("slurm", "nodes"), f"{o.nodes} node(s) x {o.tasks_per_node} task(s) per node hold "
                     f"{o.nodes * o.tasks_per_node} tasks, the spec has {total}; raise slurm.nodes or "
                     "slurm.tasks_per_node, or drop slurm.nodes for the default")]
        return []

    @classmethod
    def from_spec(cls, loaded: LoadedSpec, record: Any = None, console: Optional[Notices] = None) -> Backend:
        job = SlurmJob(loaded, record, console)
        return Backend(cls, SlurmHosts(job), SlurmTasks(job))

    @classmethod
    def launch_lines(cls, loaded: LoadedSpec, plan: Plan) -> LaunchLines:
        """The ``sbatch`` line preflight would submit and each task's first ``srun`` line, from
        the partition as sinfo shows it now (read only: nothing is submitted). The job id
        (``JOB``) and the nodes (``node1``, ...) are stand-ins until the job runs."""
        job = SlurmJob(loaded)
        per_node = job.gpus_per_node = job.gpu_request(plan.tasks)
        cpus = job.cpu_request(per_node)
        req = job.request(len(plan.tasks), per_node, cpus)
        if cpus is not None:
            held = cpus * job.opts.tasks_per_node
        else:  # the user's own CPU options (--exclusive ...): a node's CPUs; else 1 per task
            known = [c for c in job.node_cpus.values() if c > 0] if gpus.asks_cpus(job.opts.sbatch) else []
            held = min(known) if known else job.opts.tasks_per_node
        steps = job.steps_for([t.key for t in plan.tasks], {t.key: t.host for t in plan.tasks}, held)
        lines = {t.key: tuple(step_argv("JOB", t, f"{t.slug}.{n}", steps.get(t.key, gpus.Step()), job.workdir,
                                        job.opts.srun, python=job.opts.python, shown=True))
                 for n, t in enumerate(plan.tasks, 1)}
        return LaunchLines(tuple(req.sbatch_argv()), lines,
                           note="JOB: the id sbatch prints; node1...: the job's nodes in Slurm's order")


class SlurmHosts(Hosts):
    """The job's nodes: the request checked (nothing submitted), the job submitted and waited
    for, its nodes' memory, cancelled at the end; and what a recorded run left (``down``)."""

    def __init__(self, job: SlurmJob) -> None:
        self.job = job

    def probe(self, plan: Plan) -> None:
        """Commands found, partition exists and is UP, request satisfiable (nothing submitted)."""
        job = self.job
        if not job.workdir.is_dir():
            raise LaunchError(f"workdir: {job.workdir} is not a directory; create it or fix workdir in the spec")
        job.gpus_per_node = per_node = job.gpu_request(plan.tasks)
        job.cpus_per_task = job.cpu_request(per_node)
        job.check_gpus(plan, per_node)
        alloc.check_satisfiable(job.request(len(plan.tasks), per_node, job.cpus_per_task))

    def allocate(self, spec: Spec) -> Placement:
        """Submit the holding job, record its id, wait until it runs; place the tasks on its nodes."""
        job = self.job
        keys = [f"{t}:{i}" for t, i in task_keys(spec)]
        req = job.request(len(keys), job.gpus_per_node, job.cpus_per_task)
        job.job_id = alloc.submit(req)
        job.record_allocation()
        job.console.info(f"slurm job {job.job_id}: {req.nodes} node(s) x {req.tasks_per_node} task(s)"
                         + (f" in partition {req.partition}" if req.partition else ""))
        if job.record is not None:
            job.record.write(ev.SlurmSubmitted(job=job.job_id, nodes=req.nodes, tasks_per_node=req.tasks_per_node))
        t0 = time.monotonic()
        # Ctrl-C, SIGTERM and SIGHUP interrupt the wait (launcher/app/up.py's stoppable); close() cancels the job.
        nodes = alloc.wait_running(job.job_id, job.opts.queue_timeout, job.console.info)
        addresses = cli.node_addresses(nodes)
        slots = alloc.placement(keys, nodes, addresses, req.tasks_per_node)
        job.placed = {k: v[0] for k, v in slots.items()}
        if any(t != 0 for t in job.takes(keys).values()):
            job.steps = job.steps_for(keys, job.placed, cli.job_cpus(job.job_id) // max(1, len(nodes)))
        if job.record is not None:
            job.record.write(ev.SlurmRunning(job=job.job_id, nodes=list(nodes), addresses=dict(addresses),
                                             waited=round(time.monotonic() - t0, 3)))
        job.record_allocation(nodes=nodes, addresses=addresses)
        if job.record is not None:  # every node sees the code and the checkpoints (else close() cancels)
            shared.check(job.job_id, nodes, job.workdir, job.record.state_dir)
        return Placement({k: Slot(*v) for k, v in slots.items()})

    def free_memory(self, hosts: Sequence[str]) -> dict[str, int]:
        return standby.free_memory(self.job.job_id, sorted(hosts))

    def standby_off(self, spec: Spec) -> Optional[str]:
        """Once the job runs, from the steps' GPUs as the partition has them (none: no reason)."""
        job = self.job
        if job.job_id is None:
            return standby.refusal(spec)
        own = {k: job.placed[k] for k, st in job.steps.items() if st.exclusive and k in job.placed}
        return standby.dividing(own, job.opts.tasks_per_node)

    def down(self, run: RecordedRun, console: Notices) -> bool:
        """``tfcluster down``: stop the run's local srun wrappers (by pgid and start time, each
        proven the run's own: procinfo.not_own) and cancel its job (by the id in its record, once
        Slurm says the job is this user's, named and commented as this run's: alloc.not_own).
        True if anything was still live."""
        stopped = False
        for key, task in run.tasks.items():
            proc = from_record(task)
            pgid = proc.pgid if proc is not None else None
            if proc is not None and pgid and is_same(pgid, proc.start_time) and group_alive(pgid):
                why = not_own(pgid, proc.start_time, (envnames.RUN_ID, run.run_id), owner=run.owner)
                if why is not None:
                    run.refuse(console, f"{key}: not stopping process group {pgid}: {why}; the record names a "
                                        "process that is not this run's")
                    continue
                kill_group(pgid, self.job.stop_grace)
                console.info(f"stopped the leftover srun of {key}")
                stopped = True
        jobs = set()
        if run.allocation.get("job_id"):
            jobs.add(str(run.allocation["job_id"]))
        for task in run.tasks.values():
            if task.get("slurm_job"):
                jobs.add(str(task["slurm_job"]))
        user = pwd.getpwuid(os.getuid()).pw_name
        for job_id in sorted(jobs):
            if not re.fullmatch(r"[0-9]{1,20}", job_id):
                run.refuse(console, f"not cancelling slurm job {shown(job_id, 40)}, which run {run.run_id}'s record "
                                    "names: not a job id")
                continue
            if not cli.job_state(job_id).live:
                continue
            why = alloc.not_own(cli.job_owner(job_id), user, self.job.spec.name, run.run_id)
            if why is not None:
                run.refuse(console, f"not cancelling slurm job {job_id}, which run {run.run_id}'s record names: "
                                    f"{why}; if it is yours (a run of an older tfcluster has no comment), "
                                    f"scancel {job_id}")
                continue
            if alloc.cancel(job_id):
                console.info(f"cancelled slurm job {job_id}")
                stopped = True
        return stopped

    def close(self) -> None:
        """Cancel this run's allocation (by job id) and wait until Slurm reports it gone."""
        if self.job.job_id is None:
            return
        job, self.job.job_id = self.job.job_id, None
        try:
            alloc.cancel(job)
        except LaunchError as exc:
            sys.stderr.write(f"tfcluster: error: {exc.lines[0]}\n")
        else:
            if self.job.record is not None:
                self.job.record.write(ev.SlurmCancelled(job=job))


class SlurmTasks(Tasks):
    """Each task a step of the job (``srun --overlap`` under taskwrap, on its node); a standby
    one more step, promoted; a restart's steps new ones, once the job still runs."""

    def __init__(self, job: SlurmJob) -> None:
        self.job = job
        self._launches = 0
        self._handles: list[SlurmStep] = []
        self._lock = threading.Lock()  # the starts' count and handles, from several threads

    def start(self, request: StartRequest, on_line: OutputSink) -> SlurmStep:
        task, promotion = request.task, None
        with self._lock:
            self._launches += 1
            step_name = f"{task.slug}.{self._launches}"
        if request.standby:  # a warm standby: its own step, --overlap, and its promotion file (standby.py)
            promotion = standby.prepare(self.job.steps.get(task.key, gpus.Step()), self.job.gpus_per_node,
                                        self.job.record.dir if self.job.record is not None else None, step_name)
        env = request.told(str(promotion) if promotion is not None else None)
        argv = [*wrapper_argv(), "--grace", f"{self.job.stop_grace:g}", "--",
                *self.job.srun_argv(task, step_name, standby=request.standby)]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=self.job.workdir, env=self.job.task_env(task, env), start_new_session=True,
                                close_fds=True)
        handle = SlurmStep(task, proc, on_line, self.job.job_id or "", step_name, task.host, self._step_gpus)
        handle.promotion = promotion
        with self._lock:
            self._handles.append(handle)
        return handle

    def promote(self, handle: TaskHandle, request: StartRequest) -> None:
        """The environment the cold start ``request`` would add to the Slurm client's (the plan's
        task env, its GPU settings, the run/state dirs, ``request.told()``) into the standby's
        promotion file, then SIGUSR1 to its srun, which forwards it to the step (standby.py)."""
        assert isinstance(handle, SlurmStep)
        task, client = request.task, cli.client_env()
        overlay = {k: v for k, v in self.job.task_env(task, request.told()).items() if client.get(k) != v}
        with self._lock:  # the task's earlier steps (the attempt just stopped) on its port: gone from its node
            # first. A restart's tasks are on fresh ports (Capabilities.fresh_ports_per_restart): none then.
            earlier = {h.step_name for h in self._handles if h.key == task.key and h is not handle
                       and h.proc.poll() is not None and h.task.port == task.port}
        if self.job.job_id:
            standby.wait_gone(self.job.job_id, earlier)
        standby.promote(handle, getattr(handle, "promotion", None), overlay)

    def _step_gpus(self, key: str, ids: list) -> None:
        """The GPUs Slurm gave a task's step, as its node numbers them: a task_gpus event (status)."""
        if self.job.record is not None:
            self.job.record.write(ev.TaskGpus(task=key, gpus=ids))

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        return accepts(task.address, task.port)

    def stop(self, handles: Sequence[TaskHandle], grace: float, deadline: float = 10.0, saved=None) -> list[str]:
        left = super().stop(handles, grace, deadline, saved)
        # A step whose srun was killed before it reported could outlive it: cancel by id what
        # squeue still lists under these tasks' step names.
        names = {h.step_name for h in handles if isinstance(h, SlurmStep)}
        if self.job.job_id and names:
            try:
                for name, sid in cli.step_ids(self.job.job_id).items():
                    if name in names:
                        cli.scancel(sid, "KILL")
            except LaunchError:
                pass
        return left

    def prepare_attempt(self, number: int) -> None:
        """Before a restart: the allocation must still run (Slurm may have ended it: the time
        limit, an admin's scancel) and must not be preempted. A preemption sends every step
        SIGTERM at once (the workers save the agreed step and exit 143) and cancels or requeues
        the job after the partition's GraceTime: a restart inside it would only be killed, so
        the run ends here, and close() gives the nodes back at once. AttemptImpossible: no
        restart is spent on it; ``tfcluster up`` again resumes from the saved step."""
        if number == 0 or self.job.job_id is None:
            return
        st = cli.job_state(self.job.job_id)
        # An ended job is COMPLETING while its steps are torn down (seconds), and SIGNALING while
        # Slurm's signals to it (a preemption's) go out: wait for the state that says why it
        # ended (CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL ...).
        deadline = time.monotonic() + COMPLETING_WAIT
        while st.state in ("COMPLETING", "SIGNALING") and time.monotonic() < deadline:
            time.sleep(0.5)
            st = cli.job_state(self.job.job_id)
        when = cli.preempted_at(self.job.job_id)  # (whatever state it is caught in: PreemptTime is set at once)
        if when is not None:
            raise AttemptImpossible(
                f"slurm: allocation job {self.job.job_id} was preempted at {when} (a higher-priority job needs its "
                "nodes); the tasks saved at Slurm's SIGTERM: run tfcluster up again to resume")
        if st.state != "RUNNING":
            raise AttemptImpossible(
                f"slurm: allocation job {self.job.job_id} is no longer running ({st.state or 'gone'}"
                + (f", reason {st.reason}" if st.reason and st.reason != "None" else "")
                + "); what the tasks saved is kept: run tfcluster up again to resume")

    def close(self) -> None:
        """Kill what is left of the run's srun wrappers (the job is cancelled by ``SlurmHosts.close``)."""
        with self._lock:
            handles = list(self._handles)
        for h in handles:
            if h.poll() is None:
                try:
                    os.killpg(h.proc.pid, signals.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
