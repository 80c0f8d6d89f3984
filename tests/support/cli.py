"""Running the CLI as a user would: ``python -m launcher ...`` in a subprocess, from the checkout."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

ROOT = Path(__file__).resolve().parents[2]  # the checkout: ``python -m launcher`` and ``-m worker`` import from here
PY = sys.executable


def _argv(args) -> list[str]:
    return [PY, "-m", "launcher", *(str(a) for a in args)]


def tfcluster_argv(*args) -> list[str]:
    """``tfcluster ARGS`` as an argv, for a test that starts it its own way (on a pseudo-terminal)."""
    return _argv(args)


def _env(env: Optional[Mapping[str, str]], environ: Optional[Mapping[str, str]]) -> Optional[dict]:
    if environ is not None:
        return dict(environ)
    return {**os.environ, **env} if env else None


def tfcluster(*args, timeout: float = 120, cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
              environ: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """``tfcluster ARGS`` to its end (text, stdout and stderr captured apart). ``env`` is added to
    this process's environment; ``environ`` is the whole environment instead."""
    return subprocess.run(_argv(args), cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
                          env=_env(env, environ))


@dataclass(frozen=True)
class Measured:
    """A finished ``tfcluster`` with what it cost: CPU seconds (user + system) and peak memory."""

    returncode: int
    stdout: str
    stderr: str
    cpu_s: float
    peak_mb: float


# Runs the command given after the result file and writes its exit code, CPU time and peak RSS
# there. The wrapper is a fresh small process: a child forked from it starts from the wrapper's few
# MB, where one forked from pytest itself would count pytest's own memory (ru_maxrss keeps the
# high-water mark from before exec).
_MEASURE = r"""
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump({"code": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime,
               "peak_mb": usage.ru_maxrss / 1024}, fh)
"""


def tfcluster_measured(*args, timeout: float = 60, cwd: Optional[Path] = None) -> Measured:
    """``tfcluster ARGS`` to its end, its own CPU time and peak RSS (``os.wait4`` in a small
    wrapper process, so only this command's). Output as bytes decoded with ``backslashreplace``,
    so a raw escape byte stays visible to the test."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "usage.json"
        proc = subprocess.Popen([PY, "-c", _MEASURE, str(result), *_argv(args)], cwd=cwd or ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the wrapper and tfcluster: nothing left running
            proc.communicate()
            raise AssertionError(f"tfcluster {' '.join(map(str, args))} ran past {timeout} s") from None
        usage = json.loads(result.read_text())
    return Measured(usage["code"], out.decode("utf-8", "backslashreplace"), err.decode("utf-8", "backslashreplace"),
                    usage["cpu_s"], usage["peak_mb"])


def start_tfcluster(*args, cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
                    stderr=subprocess.STDOUT, new_session: bool = True) -> subprocess.Popen:
    """``tfcluster ARGS`` started: its output a text pipe (stderr into stdout unless ``stderr``
    says otherwise), in a process group of its own unless ``new_session`` is False (what
    ``os.killpg(proc.pid, ...)`` needs). ``env`` is added to this process's environment."""
    return subprocess.Popen(_argv(args), cwd=cwd or ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            start_new_session=new_session, env=_env(env, None))


def terminal_command(*args) -> str:
    """``tfcluster ARGS`` as a shell command for a real terminal (tmux): from the checkout, without
    the COLUMNS/LINES pytest may export (they would override the terminal's real size)."""
    argv = " ".join(shlex.quote(str(a)) for a in _argv(args))
    return f"cd {shlex.quote(str(ROOT))} && env -u COLUMNS -u LINES PYTHONPATH={shlex.quote(str(ROOT))} {argv}"


def start_on_terminal(*args, cwd: Optional[Path] = None) -> tuple[subprocess.Popen, int]:
    """``tfcluster ARGS`` with stdin, stdout and stderr on a new pseudo-terminal, which is not its
    controlling terminal (it leads a session of its own): closing the returned master fd is its
    terminal window closing with no SIGHUP sent, as under a shell that does not pass SIGHUP on.
    The caller reads the master (or the terminal blocks once full) and closes it."""
    import pty

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm", PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.Popen(_argv(args), cwd=cwd or ROOT, stdin=slave, stdout=slave, stderr=slave,
                                start_new_session=True, env=env)
    finally:
        os.close(slave)
    return proc, master


def output_on_terminal(argv, cwd: Optional[Path] = None, timeout: float = 60.0) -> bytes:
    """What ``argv`` writes on a pseudo-terminal (its controlling terminal), to its end or
    ``timeout`` s, run from ``cwd`` (default: here)."""
    import pty
    import time

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        if cwd is not None:
            os.chdir(cwd)
        os.execvp(argv[0], argv)
    out = bytearray()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    os.waitpid(pid, 0)
    os.close(fd)
    return bytes(out)
