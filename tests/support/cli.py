"""Running the CLI as a user would: ``python -m launcher ...`` in a subprocess, from the checkout."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

ROOT = Path(__file__).resolve().parents[2]  # the checkout: ``python -m launcher`` and ``-m worker`` import from here
PY = sys.executable


def _argv(args) -> list[str]:
    return [PY, "-m", "launcher", *(str(a) for a in args)]


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


def tfcluster_measured(*args, timeout: float = 60, cwd: Optional[Path] = None) -> Measured:
    """``tfcluster ARGS`` to its end, its own CPU time and peak RSS from ``os.wait4`` (only this
    child's, unlike RUSAGE_CHILDREN's maximum over every child the test process ever had). Output
    as bytes decoded with ``backslashreplace``, so a raw escape byte stays visible to the test."""
    proc = subprocess.Popen(_argv(args), cwd=cwd or ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()), daemon=True)
               for k, f in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    done = threading.Event()
    killer = threading.Timer(timeout, lambda: done.is_set() or proc.kill())
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        done.set()
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join(timeout)
    code = proc.returncode
    assert code != -9, f"tfcluster {' '.join(map(str, args))} ran past {timeout} s and was killed"
    return Measured(code, out.get("out", b"").decode("utf-8", "backslashreplace"),
                    out.get("err", b"").decode("utf-8", "backslashreplace"),
                    usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


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
