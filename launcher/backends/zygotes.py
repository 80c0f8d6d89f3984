"""A host's zygote as the local backend keeps it (launcher/remote/zygote.py; docs/concepts/runs.md,
"Warm standby"): one per run, started at the first task that can use it, the parent of the
forks of every Python task of the run that uses TensorFlow, cold starts and promoted warm
standbys alike. So the host imports TensorFlow once, not once a process, and a standby is only
its wrapper until promoted (taskwrap.py --standby-defer: the fork is made then, in the promoted
environment), about 15 MB (BENCHMARKS.md, "A zygote").

Only where the run keeps warm standbys (the task's environment has ``TFCLUSTER_ZYGOTE=1``, set by
the supervisor): ``restart.warm_standby: false`` starts every task as its own process, as before.
A task that is not a Python script or module (after the stub) or whose script does not use
TensorFlow (launcher/contract/usestf.py) starts as its own process too: a zygote would give it
nothing. The zygote runs under the wrapper like a task (its lifeline: it ends with this
launcher), in a private dir of its own (0700, in the system's temp dir: a unix socket's path is
at most 107 bytes), its lines in the run dir's ``zygote.log``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.contract.usestf import uses_tensorflow
from launcher.contract.entrypoint import is_reference_worker
from launcher.remote import HERE, taskwrap_path

# What the reference worker imports ahead (worker/main.py import_tensorflow).
WORKER_IMPORTS = ("tensorflow", "tensorflow_datasets", "tf_keras")
# The room in the zygote's environment for each child's own variables (zygote.py --pad): TF_CONFIG
# of a few hundred tasks, the task's key and attempt.
PAD_BYTES = 16384
LOG = "zygote.log"


def entry(argv: Sequence[str], cwd: Path) -> Optional[tuple[list[str], tuple[str, ...]]]:
    """(interpreter and its options, modules to import ahead) for a task of ``argv`` that a zygote
    serves, or None: ``python [OPTIONS] -m worker`` (the reference worker) or the stub's
    ``python [OPTIONS] -c STUB SCRIPT|-m MODULE ...`` of a script that uses TensorFlow."""
    argv = list(argv)
    if is_reference_worker(argv):
        if "-m" not in argv:
            return None
        return argv[:argv.index("-m")], WORKER_IMPORTS
    if "-c" not in argv:
        return None
    at = argv.index("-c")
    target = argv[at + 2:]
    if not target:
        return None
    module = target[0] == "-m"
    name = target[1] if module and len(target) > 1 else target[0]
    if not uses_tensorflow(name, module, search=[str(cwd)] if module else None, cwd=str(cwd)):
        return None
    return argv[:at], ("tensorflow",)


def start_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the zygote starts with: a task's environment without what each task has of its own
    (its key, attempt, TF_CONFIG...), and room for a child's own (zygote.py --pad)."""
    own = zygote_module().TASK_OWN
    keep = {k: v for k, v in env.items() if k not in own and k not in TASK_OWN_HERE}
    return {**keep, envnames.ZYGOTE_PAD: "x" * PAD_BYTES}


# The run's variables each task has its own value of (launcher/contract/envnames.py).
TASK_OWN_HERE = frozenset({envnames.TASK, envnames.RESTART_COUNT, envnames.STANDBY, envnames.STANDBY_ENV,
                           envnames.ZYGOTE})


def zygote_module():
    """launcher/remote/zygote.py (stdlib, shipped to hosts), for its names."""
    from launcher.remote import zygote

    return zygote


class LocalZygote:
    """The run's zygote on this machine: started once, asked for by path, stopped at close."""

    def __init__(self, run_dir: Path, workdir: Path, grace: float) -> None:
        self.run_dir, self.workdir, self.grace = run_dir, workdir, grace
        self.dir: Optional[str] = None
        self.proc: Optional[subprocess.Popen] = None
        self._pids = 0

    def socket_for(self, argv: Sequence[str], env: Mapping[str, str]) -> Optional[str]:
        """The zygote's socket for a task of ``argv`` and ``env`` (started now for the first), or
        None where the task starts as its own process."""
        if env.get(envnames.ZYGOTE) != "1":
            return None
        found = entry(argv, self.workdir)
        if found is None:
            return None
        if self.proc is None:
            self._start(found, env)
        return os.path.join(self.dir, "z.sock") if self.dir else None

    def pidfile(self) -> str:
        """A new path for a served task's pid file (taskwrap --pidfile), in the zygote's dir."""
        self._pids += 1
        return os.path.join(self.dir or "", f"task.{self._pids}.pid")

    def _start(self, found: tuple[list[str], tuple[str, ...]], env: Mapping[str, str]) -> None:
        interpreter, imports = found
        exe = shutil.which(interpreter[0], path=env.get("PATH")) or interpreter[0]
        self.dir = tempfile.mkdtemp(prefix="tfcluster-zygote-")
        log = open(self.run_dir / LOG, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(taskwrap_path()), "--grace", str(self.grace), "--",
                 exe, *interpreter[1:], str(HERE / "zygote.py"), "--socket", os.path.join(self.dir, "z.sock"),
                 "--import", ",".join(imports), "--pad", envnames.ZYGOTE_PAD],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                env=start_env(env), start_new_session=True, close_fds=True)
        finally:
            log.close()

    def close(self) -> None:
        """The zygote stopped (its lifeline closed: the wrapper stops its group), its dir removed.
        The tasks it forked are in sessions of their own, each ending with its own wrapper."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=self.grace + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
