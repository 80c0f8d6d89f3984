"""The one gang allocation of a ``backend: slurm`` run: what to ask for, whether it can ever be
granted, submitting the holding job, waiting for it to run, cancelling it.

The allocation is a batch job that only sleeps (``sbatch --parsable --wrap 'exec sleep
infinity'``); tasks run as steps inside it (``srun --jobid``), so restarts reuse the nodes
without queueing again. It is cancelled by its job id, never by name.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from launcher.bounded import shown
from launcher.errors import LaunchError
from launcher.backends.slurm import cli

HOLD_SCRIPT = "exec sleep infinity"
_POLL = 0.5


@dataclass(frozen=True)
class Request:
    """What one run asks Slurm for."""

    job_name: str
    nodes: int
    tasks_per_node: int
    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    extra: tuple[str, ...] = ()
    cpus_per_task: Optional[int] = None  # --cpus-per-task: the CPUs each task's step may get
    comment: Optional[str] = None  # --comment: the run's mark (job_comment), what `down` proves the job by

    def sbatch_argv(self, test_only: bool = False) -> list[str]:
        """The sbatch command line (pure). ``--export=NONE``: the holding job needs no
        environment, and slurmctld stores a batch job's environment on disk. ``--no-requeue``:
        a requeued job would be a new allocation under the running tasks."""
        argv = ["sbatch", "--parsable", f"--job-name={self.job_name}", f"--nodes={self.nodes}",
                f"--ntasks-per-node={self.tasks_per_node}", "--output=/dev/null", "--export=NONE", "--no-requeue"]
        if self.comment:
            argv.append(f"--comment={self.comment}")
        if self.cpus_per_task:
            argv.append(f"--cpus-per-task={self.cpus_per_task}")
        if self.partition:
            argv.append(f"--partition={self.partition}")
        if self.time:
            argv.append(f"--time={self.time}")
        if self.account:
            argv.append(f"--account={self.account}")
        argv += list(self.extra)
        if test_only:
            argv.append("--test-only")
        argv += ["--wrap", HOLD_SCRIPT]
        return argv


def job_comment(name: str, run_id: str) -> str:
    """The comment tfcluster submits a run's job with (``tfcluster:NAME/RUN_ID``): what ``tfcluster
    down`` proves a recorded job id to be this run's by (with the job's user and name)."""
    return f"tfcluster:{name}/{run_id}"


def not_own(job: Optional[cli.JobOwner], user: str, name: str, run_id: str) -> Optional[str]:
    """Why a job Slurm reports as ``job`` (its user, name and comment; None: Slurm does not know it)
    cannot be proven to be run ``run_id`` of spec ``name`` submitted by ``user`` (None: proven).
    Pure. A run record on a shared disk is someone else's input: the job id it names is cancelled
    only once Slurm itself says the job is this run's."""
    if job is None:
        return "Slurm reports no such job (or its user, name and comment could not be read)"
    if job.user != user:
        return f"its user is {shown(job.user, 40)}, not {user}"
    want = f"tfcluster-{name}"
    if job.name != want:
        return f"its name is {shown(job.name, 60)}, not {want}"
    mark = job_comment(name, run_id)
    if job.comment != mark:
        return f"its comment is {shown(job.comment, 80)}, not {mark} (another run's job, or not tfcluster's)"
    return None


def nodes_needed(task_count: int, tasks_per_node: int, nodes: Optional[int]) -> int:
    """``slurm.nodes``, or enough nodes for every task at ``tasks_per_node`` each."""
    return nodes if nodes is not None else max(1, math.ceil(task_count / tasks_per_node))


def check_satisfiable(req: Request) -> str:
    """Raise LaunchError (one line, with the fix) unless Slurm could ever grant ``req``.
    Returns the partition's name."""
    missing = cli.missing_commands()
    if missing:
        raise LaunchError(f"slurm: command(s) {', '.join(missing)} not found on PATH; install the Slurm client "
                          "commands (Debian: slurm-client) or run tfcluster on a login node")
    part = cli.partition(req.partition)
    where = f"partition '{part.name}'"
    if part.state.upper() not in ("UP",):
        raise LaunchError(f"slurm.partition: {where} is {part.state}: jobs would pend forever; choose an UP "
                          "partition (sinfo) or ask the admins")
    if req.nodes > part.total_nodes:
        raise LaunchError(f"slurm.nodes: {req.nodes} node(s) requested but {where} has {part.total_nodes}; "
                          "lower slurm.nodes (or raise slurm.tasks_per_node) or choose a bigger partition")
    if part.max_nodes is not None and req.nodes > part.max_nodes:
        raise LaunchError(f"slurm.nodes: {req.nodes} node(s) requested but {where} allows at most "
                          f"{part.max_nodes} per job; lower slurm.nodes or choose another partition")
    # Everything else (time limit, account, gres, CPUs per node) is Slurm's to judge.
    proc = cli.run(req.sbatch_argv(test_only=True), timeout=30)
    if proc.returncode != 0:
        raise LaunchError(f"slurm: the allocation can never be granted ({cli.first_error(proc)}); "
                          f"asked: {' '.join(a for a in req.sbatch_argv()[2:-2])}; fix slurm: in the spec")
    return part.name


def submit(req: Request) -> str:
    proc = cli.run(req.sbatch_argv(), timeout=60)
    if proc.returncode != 0:
        raise LaunchError(f"slurm: sbatch failed: {cli.first_error(proc)}; fix slurm: in the spec")
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise LaunchError(f"slurm: sbatch --parsable printed {proc.stdout.strip()!r}, not a job id")
    return job_id


def wait_running(job_id: str, queue_timeout: float, on_wait: Callable[[str], None],
                 stop: Callable[[], bool] = lambda: False) -> list[str]:
    """Wait until the job runs; return its nodes in Slurm's order. A job still pending after
    ``queue_timeout`` s is cancelled and reported with Slurm's reason (``squeue %r``)."""
    start = time.monotonic()
    said = ""
    while True:
        st = cli.job_state(job_id)
        if st.state == "RUNNING" and st.nodelist:
            return cli.hostnames(st.nodelist)
        if st.state not in ("PENDING", "CONFIGURING", "RUNNING", "REQUEUED"):
            what = st.state or "gone (purged)"
            raise LaunchError(f"slurm: allocation job {job_id} ended before it ran ({what}"
                              + (f", reason {st.reason}" if st.reason and st.reason != "None" else "")
                              + "); see scontrol show job " + job_id)
        waited = time.monotonic() - start
        if st.state == "PENDING" and st.reason not in (said, "None", ""):
            said = st.reason
            on_wait(f"slurm job {job_id} pending ({st.reason}); waiting up to slurm.queue_timeout="
                    f"{queue_timeout:g} s")
        if waited > queue_timeout:
            cli.scancel(job_id)
            raise LaunchError(f"slurm: job {job_id} still pending after slurm.queue_timeout={queue_timeout:g} s "
                              f"(reason: {st.reason or 'unknown'}); cancelled it; free nodes, choose another "
                              "partition or raise slurm.queue_timeout")
        if stop():
            raise KeyboardInterrupt
        time.sleep(_POLL)


def cancel(job_id: str, timeout: float = 30.0) -> bool:
    """``scancel JOB`` and wait until Slurm no longer counts it as live. True if it was live."""
    st = cli.job_state(job_id)
    if not st.live:
        return False
    cli.scancel(job_id)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = cli.job_state(job_id)
        if not st.live:
            return True
        time.sleep(_POLL)
    raise LaunchError(f"slurm: job {job_id} still {st.state} {timeout:g} s after scancel; check squeue -j {job_id}")


def placement(keys: Sequence[str], nodes: Sequence[str], addresses: dict[str, str],
              tasks_per_node: int) -> dict[str, tuple[str, str]]:
    """Task key -> (node, address). Pure. Tasks in plan order are spread evenly over the nodes in
    Slurm's order (task i on node i*nodes//tasks), so consecutive tasks share a node and no node
    gets more than ``tasks_per_node``; with the default node count this is plain filling.
    Addresses, not names, go into TF_CONFIG."""
    if len(keys) > len(nodes) * tasks_per_node:
        raise LaunchError(f"slurm: {len(keys)} tasks do not fit on {len(nodes)} node(s) at "
                          f"{tasks_per_node} per node")
    out = {}
    for i, key in enumerate(keys):
        node = nodes[i * len(nodes) // len(keys)]
        out[key] = (node, addresses[node])
    return out
