"""A host's zygote as the local backend keeps it (launcher/remote/zygote.py; docs/concepts/runs.md,
"Warm standby"): one per run, started at the first task that can use it, the parent of the
forks of every Python task of the run that uses TensorFlow, cold starts and promoted warm
standbys alike. So the host imports TensorFlow once, not once a process, and a standby is only
its wrapper until promoted (taskwrap.py --standby-defer: the fork is made then, in the promoted
environment), about 15 MB (BENCHMARKS.md, "A zygote").

For the starts that ask for it (``StartRequest.fork``: unless ``restart.warm_standby`` is false,
whether the run keeps standbys or not, supervise/standby.py's ``forks``): ``restart.warm_standby:
false`` starts every task as its own process.
A task that is not a Python script or module (after the stub) or whose script does not use
TensorFlow (launcher/contract/usestf.py) starts as its own process too: a zygote would give it
nothing. The zygote runs under the wrapper like a task (its lifeline: it ends with this
launcher), in a private dir of its own (0700, in the system's temp dir: a unix socket's path is
at most 107 bytes), its lines in the run dir's ``zygote.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.bounded import one_line
from launcher.contract.preloads import script_preloads
from launcher.contract.usestf import uses_tensorflow
from launcher.contract.entrypoint import is_reference_worker, python_entry
from launcher.record import events as ev
from launcher.remote import HERE, wrapper_argv
from launcher.remote.privsock import bind_private, private_dir

# What the reference worker imports ahead (worker/main.py import_tensorflow).
WORKER_IMPORTS = ("tensorflow", "tensorflow_datasets", "tf_keras")
# The room in the zygote's environment for each child's own variables (zygote.py --pad): TF_CONFIG
# of a few hundred tasks, the task's key and attempt.
PAD_BYTES = 16384
# The room in its argv for each child's title (zygote.py --title: what ps shows of a task).
TITLE_BYTES = 4096
LOG = "zygote.log"


# An interpreter's file name (python, python3, python3.11).
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")


def as_exec(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` as the kernel runs it where it names a Python script of its own on PATH whose first
    line is ``#!PYTHON`` and nothing else (a console script pip wrote: ``tfcluster-worker``):
    ``[PYTHON, its path, ARGS...]``, the argv its interpreter is given by exec; else ``argv``."""
    argv = list(argv)
    if not argv or _PYTHON.fullmatch(os.path.basename(argv[0])):
        return argv
    path = shutil.which(argv[0], path=env.get("PATH")) if os.sep not in argv[0] else argv[0]
    try:
        with open(path or "", "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return argv
    words = first[2:].split() if first.startswith(b"#!") else []
    if len(words) != 1 or not _PYTHON.fullmatch(os.path.basename(words[0].decode(errors="replace"))):
        return argv
    return [words[0].decode(), path, *argv[1:]]


def entry(argv: Sequence[str], cwd: Path) -> Optional[tuple[list[str], tuple[str, ...]]]:
    """(interpreter and its options, modules to import ahead) for a task of ``argv`` (as_exec's)
    that a zygote serves, or None: ``python [OPTIONS] -m worker`` or ``python tfcluster-worker``
    (the reference worker) or the stub's ``python [OPTIONS] -c STUB SCRIPT|-m MODULE ...`` of a
    script that uses TensorFlow (and the libraries of TensorFlow's family a script imports first
    thing: launcher/contract/preloads.py)."""
    argv = list(argv)
    if len(argv) >= 2 and is_reference_worker(argv[1:2]) and _PYTHON.fullmatch(os.path.basename(argv[0])):
        return argv[:1], WORKER_IMPORTS  # the console script, as exec runs it
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
    ahead = () if module else script_preloads(os.path.join(str(cwd), name))
    return argv[:at], ("tensorflow", *ahead)


def plain_entry(argv: Sequence[str], cwd: Path) -> Optional[tuple[list[str], tuple[str, ...]]]:
    """``entry`` of what a task of the plan's ``argv`` runs (a Python script or module under the
    standby stub, the reference worker as it is): the zygote a host needs for it, known before
    any task starts (the ssh preflight starts the hosts' zygotes)."""
    if is_reference_worker(argv):
        return entry(argv, cwd)
    parts, _ = python_entry(argv)
    if parts is None:
        return None
    interpreter, target = parts
    return entry([*interpreter, "-c", "", *target], cwd)


def start_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the zygote starts with: a task's environment without what each task has of its own
    (its key, attempt, TF_CONFIG...), and room for a child's own (zygote.py --pad)."""
    own = zygote_module().TASK_OWN
    keep = {k: v for k, v in env.items() if k not in own and k not in TASK_OWN_HERE}
    return {**keep, envnames.ZYGOTE_PAD: "x" * PAD_BYTES}


# The run's variables each task has its own value of (launcher/contract/envnames.py).
TASK_OWN_HERE = frozenset({envnames.TASK, envnames.RESTART_COUNT, envnames.STANDBY, envnames.STANDBY_ENV})


def zygote_module():
    """launcher/remote/zygote.py (stdlib, shipped to hosts), for its names."""
    from launcher.remote import zygote

    return zygote


# How many times a host's zygote is started again in a run after it ended (a crash loop gives up:
# its tasks start cold).
RESTARTS = 3


class Restarts:
    """What becomes of a host's zygote that ended, the same on local and ssh: started again at the
    next start that asks for it, at most RESTARTS times in a run; never again once it said it
    serves nothing (its reason: PATH.cold) or past the bound. ``off``: why the host's tasks start
    cold from now on ("" while it is started again)."""

    def __init__(self, host: str, where: str = "") -> None:
        self.host = host
        self.where = where or f"host {host}'s zygote"  # the subject of the note
        self.count = 0
        self.off = ""

    def ended(self, code: Optional[int], why: str = "") -> ev.ZygoteEnded:
        """The zygote ended (its wrapper's exit ``code``, None where unknown; ``why``: the reason it
        left, or ""): decided (``off`` set where it is not started again), as the run record's
        event, whose ``said`` is the one-line note."""
        why = one_line(why, 300) if why else ""  # (a host's words: bounded, escaped)
        exit_text = "exit unknown" if code is None else f"exit {code}"
        if why:
            self.off = why
        elif self.count >= RESTARTS:
            self.off = f"{self.where} ended {self.count + 1} times (last {exit_text})"
        self.count += 1
        said = (f"{self.where} ended ({exit_text}); "
                + (f"its tasks start cold from now on: {self.off}" if self.off else
                   f"a new one starts ({self.count} of {RESTARTS})"))
        return ev.ZygoteEnded(host=self.host, code=code, restart=None if self.off else self.count, cold=self.off,
                              said=said)

    def not_started(self, why: str) -> ev.ZygoteEnded:
        """The new one could not be started (``why``: its starter's words): cold from now on."""
        self.off = f"a new one could not start ({one_line(why, 300)})"
        return ev.ZygoteEnded(host=self.host, cold=self.off, said=f"{self.where}: its tasks start cold from now on: "
                                                                   f"{self.off}")


class LocalZygote:
    """The run's zygote on this machine: started at the first task it serves, asked for by path
    (the socket, bound here before the zygote starts: zygote.py --listen-fd), started again at
    the next start after it ended (at most RESTARTS times, the same path: a standby's wrapper that
    waits finds the new one), never again once it said it serves nothing (PATH.cold), stopped at
    close."""

    def __init__(self, run_dir: Path, workdir: Path, grace: float,
                 write: Optional[Callable[[ev.ZygoteEnded], None]] = None, host: str = "localhost") -> None:
        """``write``: the run record's (its zygote_ended events, of ``host``: this machine's name in the plan)."""
        self.run_dir, self.workdir, self.grace = run_dir, workdir, grace
        self.dir: Optional[str] = None
        self.proc: Optional[subprocess.Popen] = None
        self._pids = 0
        self.restarts = Restarts(host, "the run's zygote")
        self.write = write

    def socket_for(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[Optional[str], list[str]]:
        """The zygote's socket for a task of ``argv`` and ``env`` that asked to be forked (started
        now for the first, or again) and the command to ask it for (as_exec's: a console script as
        exec runs it), or (None, argv) where the task starts as its own process."""
        command = as_exec(argv, env)
        found = entry(command, self.workdir)
        if found is None or not self.ensure(found, env):
            return None, list(argv)
        return self.path(), command

    def path(self) -> str:
        return os.path.join(self.dir or "", "z.sock")

    def ensure(self, found: Optional[tuple[list[str], tuple[str, ...]]] = None,
               env: Optional[Mapping[str, str]] = None) -> bool:
        """Whether a zygote serves the run now: started (``found``, ``env``: its interpreter,
        imports and environment; else only where one ran before) or started again where it ended."""
        if self.restarts.off:
            return False
        if self.proc is not None and self.proc.poll() is not None:
            self._ended(self.proc.returncode)
            if self.restarts.off:
                return False
            found, env = self._last
        if self.proc is None or self.proc.poll() is not None:
            if found is None or env is None:
                return False
            self._start(found, env)
        return True

    def _ended(self, code: int) -> None:
        """The zygote ended: Restarts decides (its reason where it gave one: it serves nothing),
        written in the run record and in zygote.log."""
        event = self.restarts.ended(code, zygote_module().cold_reason(self.path()))
        self._log("tfcluster: " + event.said)
        if self.write is not None:
            self.write(event)

    def _log(self, line: str) -> None:
        with open(self.run_dir / LOG, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def pidfile(self) -> str:
        """A new path for a served task's pid file (taskwrap --pidfile), in the zygote's dir."""
        self._pids += 1
        return os.path.join(self.dir or "", f"task.{self._pids}.pid")

    def _start(self, found: tuple[list[str], tuple[str, ...]], env: Mapping[str, str]) -> None:
        interpreter, imports = found
        self._last = (found, dict(env))
        exe = shutil.which(interpreter[0], path=env.get("PATH")) or interpreter[0]
        if self.dir is None:
            self.dir = private_dir()
        listener = bind_private(self.path())
        log = open(self.run_dir / LOG, "ab")
        try:
            self.proc = subprocess.Popen(
                [*wrapper_argv(), "--grace", str(self.grace), "--",
                 exe, *interpreter[1:], str(HERE / "zygote.py"), "--socket", self.path(),
                 "--listen-fd", str(listener.fileno()), "--import", ",".join(imports),
                 "--pad", envnames.ZYGOTE_PAD, "--title", "t" * TITLE_BYTES],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                env=start_env(env), start_new_session=True, close_fds=True, pass_fds=(listener.fileno(),))
        finally:
            log.close()
            listener.close()  # the zygote's (and its wrapper's) from now on: refused once they are gone

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

