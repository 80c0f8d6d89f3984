"""A task's job step: the ``srun`` command line that starts it in the allocation, the shell
line the step runs first (its id, its GPUs, the thread budget), and the handle of the local
``taskwrap -- srun`` process, which signals the step by its id."""

from __future__ import annotations

import os
import signal as signals
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from launcher.contract import envnames
from launcher.errors import LaunchError
from launcher.plan import threads
from launcher.plan.build import PlannedTask
from launcher.system.procinfo import start_time
from launcher.backends.base import OutputSink
from launcher.backends.childtask import ChildTask
from launcher.backends.process import LocalProcess
from launcher.remote import source
from launcher.backends.slurm import cli
from launcher.backends.slurm import gpus

STEP_MARK = "tfcluster-slurm-step"
# The step says its id first, so signals reach it without asking squeue, and the GPUs Slurm gave it
# (the node's indices: SLURM_STEP_GPUS, set by slurmd's gres plugin; else CUDA_VISIBLE_DEVICES, -1 for
# a CPU step), so ``status`` shows them: a wrapper frame of its own (launcher/remote/taskstream.py),
# written before the task runs, so nothing the task prints passes for it. Then it makes a ``threads:
# auto`` budget from the job's CPUs on its node (launcher/plan/threads.py), and runs the task under
# taskstream.py (its text passed as ``$2`` to ``$1``, slurm.python; ``shell_args``): the task's output
# framed with its control channel on the step's stdout, which srun brings here. A node without that
# Python runs the task without its channel, said in one line.
STEP_SHELL = ("printf '\\036W%s id=%s node=%s gpus=%s\\n' " + f'"{STEP_MARK}" '
              '"$SLURM_JOB_ID.$SLURM_STEP_ID" "$SLURMD_NODENAME" "${SLURM_STEP_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"; '
              f'{threads.shell_budget(envnames.THREADS)}; py=$1; src=$2; shift 2; '
              f'if command -v "$py" >/dev/null 2>&1; then exec "$py" -S -c "$src" --control {envnames.CONTROL_FD} -- "$@"; '
              "fi; printf '\\036Wtaskstream: %s is not on this node: the task runs without its control channel "
              "(no progress, no standby, no stacks)\\n' \"$py\"; exec \"$@\"")
SHOWN_SOURCE = "<launcher/remote/taskstream.py>"  # what ``tfcluster plan`` shows for the text


def shell_args(python: str, command: Sequence[str], shown: bool = False) -> list[str]:
    """What follows STEP_SHELL's ``sh``: the interpreter and the text of taskstream.py (``shown``:
    a stand-in for the text, as ``plan`` prints it), then the task's command."""
    return [python, SHOWN_SOURCE if shown else source("taskstream.py"), *command]


def step_gpus(text: str) -> Optional[list]:
    """The step line's ``gpus=`` value as GPU indices ([] for -1), None when empty or not indices."""
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None
    if not ids:
        return None
    return [] if any(i < 0 for i in ids) else ids


@dataclass(frozen=True)
class SrunProcess(LocalProcess):
    """A task's Slurm step, as the record keeps it: its srun here (a process group of this
    machine, ``down`` stops it as the local backend's), the job, the step's name and its node."""

    slurm_job: str
    slurm_step: str
    node: str


class SlurmStep(ChildTask):
    """One task: a local ``taskwrap -- srun ...`` process and the step it created."""

    def __init__(self, task: PlannedTask, proc: subprocess.Popen, on_line: OutputSink, job_id: str,
                 step_name: str, node: str, on_gpus: Optional[Callable[[str, list], None]] = None) -> None:
        self.job_id = job_id
        self._on_gpus = on_gpus  # (key, the node's GPU indices the step got; [] none) from its first line
        self.step_name = step_name
        self.node = node
        self.step_id: Optional[str] = None
        super().__init__(task, proc, on_line)  # starts the reader, which sets step_id

    def _wrapper_line(self, line: str) -> bool:
        if self.wrapper_word(line):
            return True
        if self.step_id is None and line.startswith(STEP_MARK + " "):
            for part in line.split()[1:]:
                if part.startswith("id="):
                    self.step_id = part[3:]
                elif part.startswith("gpus=") and self._on_gpus is not None:
                    ids = step_gpus(part[5:])
                    if ids is not None:
                        self._on_gpus(self.task.key, ids)
            return True
        return False

    def step(self) -> Optional[str]:
        """``JOB.STEP`` of this task's step: printed by the step itself, else asked of squeue."""
        if self.step_id is None:
            try:
                self.step_id = cli.step_ids(self.job_id).get(self.step_name)
            except LaunchError:
                return None
        return self.step_id

    def signal(self, sig: int) -> None:
        if self.reaped_long_ago():
            return
        self.signal_process(sig)  # the step's processes, where it has one
        step = self.step_id  # (looked up there: None while srun still asks slurmctld)
        if sig == signals.SIGKILL or step is None and sig in (signals.SIGTERM, signals.SIGINT):
            # No step yet (srun still asking slurmctld): stopping srun stops its step request.
            # After SIGKILL of the step, srun exits on its own; this only hurries a stuck one.
            try:
                os.killpg(self.proc.pid, signals.SIGTERM if sig != signals.SIGKILL else signals.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def signal_process(self, sig: int) -> None:
        # scancel --signal reaches the step's processes (the wrapper survives it), never srun here.
        if self.reaped_long_ago():
            return
        step = self.step()
        if step is not None:
            try:
                cli.scancel(step, signals.Signals(sig).name.replace("SIG", ""))
            except LaunchError:
                pass

    def info(self) -> "SrunProcess":
        return SrunProcess(pid=self.proc.pid, pgid=self.proc.pid, start_time=start_time(self.proc.pid),
                           slurm_job=self.job_id, slurm_step=self.step_name, node=self.node)


def srun_argv(job_id: str, task: PlannedTask, step_name: str, step: gpus.Step, workdir: Path,
              srun: Sequence[str], standby: bool = False, python: str = "python3", shown: bool = False) -> list[str]:
    """The step of ``task`` on its node in job ``job_id``: ``--overlap`` unless its GPU part asks
    for CPUs of its own (``--exact``), named ``step_name`` (unique in the run), the spec's
    slurm.srun options, then STEP_SHELL and the task's command. A warm standby's step is
    ``--overlap`` always: it is made while its task's step holds the CPUs and GPUs it asks for
    (an ``--exact`` step would wait for them), and Slurm gives an overlapping step the GPUs it
    asks for among the job's on the node (launcher/backends/slurm/standby.py). ``python``: the
    nodes' (slurm.python), which runs taskstream.py (``shown``: its stand-in, for ``plan``)."""
    mine = "--overlap" in step.srun or ("--exact" in step.srun and not standby)
    overlap = [] if mine else ["--overlap"]
    return ["srun", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={task.host}",
            *overlap, *step.srun, "--input=none", "--kill-on-bad-exit=1", f"--job-name={step_name}",
            "--export=ALL", f"--chdir={workdir}", *srun,
            "/bin/sh", "-c", step.shell + STEP_SHELL, "sh", *shell_args(python, task.command, shown)]
