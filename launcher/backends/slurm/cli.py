"""Slurm's client commands (sbatch, squeue, scontrol, scancel): how they are run and what their
output means. Nothing here keeps state; every call has a timeout.

Facts relied on (Slurm 22.05, checked against a real slurmctld/slurmd in tests/integration/slurm):
``sbatch --parsable`` prints only the job id (``id;cluster`` on a federation); ``scontrol show
hostnames LIST`` expands a node list in Slurm's order; ``scontrol show node -o`` prints one line
per node with ``NodeName=`` and ``NodeAddr=``; ``squeue -h -j ID -o '%T|%r|%N'`` gives state,
reason and node list while the job is known (finished jobs stay for MinJobAge, 300 s by default).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional, Sequence

from launcher.system.procinfo import OutputTooLarge, run_bounded
from launcher.errors import LaunchError

COMMANDS = ("sbatch", "srun", "squeue", "scontrol", "scancel")
# States in which a job still holds (or waits for) its allocation.
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
               "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD")


def client_env() -> dict[str, str]:
    """The environment for Slurm's commands: ours, without the SLURM_* job variables of an
    enclosing allocation (a launcher started inside ``salloc`` must not inherit its job)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SLURM_") or k in ("SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT")}


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def run(argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run a Slurm command; LaunchError (one line) if it cannot run or times out. However it ends,
    nothing it started is left (its process group, and whatever holds its pipes: procinfo.run_bounded)."""
    try:
        code, out, err = run_bounded(list(argv), timeout, env=client_env(), out_bytes=64 << 20, err_bytes=1 << 20)
        return subprocess.CompletedProcess(list(argv), code, out.decode("utf-8", "replace"),
                                           err.decode("utf-8", "replace"))
    except OutputTooLarge:
        raise LaunchError(f"slurm: '{' '.join(argv[:3])} ...' printed more than 64 MiB; "
                          "is this the Slurm client? (try: sinfo)") from None
    except FileNotFoundError:
        raise LaunchError(f"slurm: '{argv[0]}' not found on PATH; install the Slurm client commands "
                          "(Debian: slurm-client) or run tfcluster on a login node") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"slurm: '{' '.join(argv[:3])} ...' did not answer within {timeout:g} s; "
                          "is slurmctld reachable? (try: sinfo)") from None


def step_on_each_node(job_id: str, nodes: Sequence[str], name: str) -> list[str]:
    """``srun`` of one short step named ``name`` with one task on each of ``nodes``, beside the
    run's own steps (``--overlap``), from / and with no input; the command follows."""
    n = len(nodes)
    return ["srun", f"--jobid={job_id}", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--overlap", "--input=none", "--chdir=/", f"--job-name={name}"]


def first_error(proc: subprocess.CompletedProcess) -> str:
    """Slurm's own complaint in one line (its ``sbatch: error: `` prefixes dropped)."""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    lines = [re.sub(r"^(sbatch|srun|squeue|scontrol|scancel|sinfo): (error: )?", "", ln) for ln in lines]
    errors = [ln for ln in lines if "rror" in ln] or lines
    return errors[-1] if errors else f"exit code {proc.returncode}"


@dataclass(frozen=True)
class Partition:
    name: str
    state: str
    total_nodes: int
    max_nodes: Optional[int]  # None = unlimited
    max_cpus_per_node: Optional[int]
    default: bool = False


def partition(name: Optional[str]) -> Partition:
    """The named partition, or the default one; LaunchError naming the fix if there is none."""
    proc = run(["scontrol", "show", "partition", "-o"] + ([name] if name else []))
    if proc.returncode != 0:
        if name:
            known = ", ".join(p.name for p in _partitions(run(["scontrol", "show", "partition", "-o"]).stdout))
            raise LaunchError(f"slurm.partition: partition '{name}' does not exist"
                              + (f" (partitions: {known})" if known else "") + "; fix slurm.partition")
        raise LaunchError(f"slurm: cannot list partitions: {first_error(proc)}; is slurmctld reachable? (try: sinfo)")
    parts = _partitions(proc.stdout)
    if name:
        match = [p for p in parts if p.name == name]
        if match:
            return match[0]
        raise LaunchError(f"slurm.partition: partition '{name}' does not exist; fix slurm.partition")
    default = [p for p in parts if p.default]
    if not default:
        names = ", ".join(p.name for p in parts) or "none"
        raise LaunchError(f"slurm.partition: the cluster has no default partition; set slurm.partition "
                          f"(partitions: {names})")
    return default[0]


def _partitions(text: str) -> list[Partition]:
    out = []
    for line in text.splitlines():
        f = fields(line)
        if "PartitionName" not in f:
            continue
        max_nodes = f.get("MaxNodes", "UNLIMITED")
        mcpn = f.get("MaxCPUsPerNode", "UNLIMITED")
        out.append(Partition(
            name=f["PartitionName"], state=f.get("State", "UP"), total_nodes=_int(f.get("TotalNodes"), 0) or 0,
            max_nodes=_int(max_nodes, None), max_cpus_per_node=_int(mcpn, None),
            default=f.get("Default", "NO") == "YES",
        ))
    return out


def fields(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (scontrol -o) as a dict; values may contain spaces only in
    the last keys (OS=..., Reason=...), which tfcluster does not read."""
    out = {}
    for token in line.split():
        if "=" in token:
            k, v = token.split("=", 1)
            out.setdefault(k, v)
    return out


def _int(v: Optional[str], default):
    try:
        return int(v) if v is not None else default
    except ValueError:
        return default


def hostnames(nodelist: str) -> list[str]:
    """``n[1-2],m3`` -> ["n1", "n2", "m3"], in Slurm's order (``scontrol show hostnames``)."""
    proc = run(["scontrol", "show", "hostnames", nodelist])
    if proc.returncode != 0:
        raise LaunchError(f"slurm: cannot expand node list '{nodelist}': {first_error(proc)}")
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]


def node_addresses(nodes: Sequence[str]) -> dict[str, str]:
    """Each node's NodeAddr (what its tasks are dialled at), from ``scontrol show node -o``."""
    proc = run(["scontrol", "show", "node", "-o", ",".join(nodes)])
    if proc.returncode != 0:
        raise LaunchError(f"slurm: cannot read the nodes {','.join(nodes)}: {first_error(proc)}")
    out = {}
    for line in proc.stdout.splitlines():
        f = fields(line)
        if "NodeName" in f:
            out[f["NodeName"]] = f.get("NodeAddr") or f["NodeName"]
    missing = [n for n in nodes if n not in out]
    if missing:
        raise LaunchError(f"slurm: scontrol does not know node(s) {', '.join(missing)}")
    return out


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, ... ; "" when squeue no longer knows the job
    reason: str
    nodelist: str

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class JobOwner:
    """Whose a job is, as Slurm reports it: its user, name and comment (alloc.not_own)."""

    user: str
    name: str
    comment: str


def job_owner(job_id: str) -> Optional[JobOwner]:
    """The job's user, name and comment (``squeue %u|%j|%k``); None when Slurm does not know the
    job, or its line cannot be read unambiguously (a name or comment holding the separator)."""
    proc = run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%u|%j|%k"])
    lines = proc.stdout.splitlines() if proc.returncode == 0 else []
    if len(lines) != 1 or lines[0].count("|") != 2:
        return None
    user, name, comment = lines[0].split("|")
    return JobOwner(user.strip(), name.strip(), comment.strip())


def job_state(job_id: str) -> JobState:
    proc = run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T|%r|%N"])
    if proc.returncode != 0:
        # squeue says "Invalid job id specified" once the job is purged (after MinJobAge).
        if "nvalid job id" in (proc.stderr or ""):
            return JobState("", "", "")
        raise LaunchError(f"slurm: squeue -j {job_id} failed: {first_error(proc)}")
    line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    if not line:
        return JobState("", "", "")
    state, reason, nodelist = (line.split("|") + ["", ""])[:3]
    return JobState(state.strip(), reason.strip(), nodelist.strip())


def job_cpus(job_id: str) -> int:
    """The job's CPUs on all its nodes (``squeue %C``); 1 when squeue does not say."""
    proc = run(["squeue", "-h", "-j", job_id, "-o", "%C"])
    return _int(proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else None, 1) or 1


def preempted_at(job_id: str) -> Optional[str]:
    """When Slurm chose the job for preemption (``PreemptTime`` of ``scontrol show job``), or
    None. Set at once, while the job still runs its GraceTime, before any state changes."""
    proc = run(["scontrol", "show", "job", "-o", job_id])
    if proc.returncode != 0:
        return None  # gone: job_state says so
    value = fields(proc.stdout).get("PreemptTime", "None")
    return None if value in ("None", "Unknown", "") else value


def step_ids(job_id: str) -> dict[str, str]:
    """Step name -> step id (``12.3``) of every step of the job that is still running."""
    proc = run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j"])
    out = {}
    for line in proc.stdout.splitlines():
        if "|" in line:
            sid, name = line.split("|", 1)
            out[name.strip()] = sid.strip()
    return out


def scancel(target: str, signal_name: Optional[str] = None, timeout: float = 15.0) -> subprocess.CompletedProcess:
    """``scancel [--signal=SIG] JOB[.STEP]`` -- always by id, never by name."""
    argv = ["scancel"] + ([f"--signal={signal_name}"] if signal_name else []) + [target]
    return run(argv, timeout=timeout)
