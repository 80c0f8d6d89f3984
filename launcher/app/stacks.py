"""``tfcluster stacks``: every live task's current stacks, all threads, from the run's supervisor.

The supervisor holds the tasks' handles on every backend, so it takes them the way the hang
watchdog does (launcher/supervise/hangwatch.py: the stacks' signal to each task's own process,
``TaskHandle.signal_process``, their faulthandler text read from their output): this asks it with
REQUEST_SIGNAL, once the pid launcher.json names is proven the run's supervisor (as ``down`` does),
and reads what it wrote to the record's live stacks dir.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Optional

from launcher.app.down import not_the_supervisor, recorded_run
from launcher.app.results import StacksResult
from launcher.bounded import one_line, shown
from launcher.errors import LaunchError, NoRun
from launcher.safefile import read_regular
from launcher.system.procinfo import is_same
from launcher.record.layout import live_stacks_dir
from launcher.record.reader import loads_strict
from launcher.spec.model import LoadedSpec
from launcher.supervise.hangwatch import REQUEST_SIGNAL


def stacks(loaded: LoadedSpec, run_id: Optional[str] = None, task: Optional[str] = None,
           timeout: float = 30.0) -> StacksResult:
    """Ask run ``run_id``'s (default: the latest) supervisor for every live task's stacks and
    wait up to ``timeout`` seconds for them; ``task``: only that one's."""
    run_dir, info, owner = recorded_run(loaded, run_id, "no stacks to take")
    pid, started = info.get("pid"), info.get("start_time")
    if not (isinstance(pid, int) and is_same(pid, started)):
        raise NoRun(f"run {run_dir.name} is not running here (its supervisor is gone); its stacks at a hang, "
                    f"if any, are in {run_dir / 'stacks'}")
    why = not_the_supervisor(run_dir, info, owner)
    if why is not None:
        raise LaunchError(f"not signalling process {pid}, which run {run_dir.name}'s launcher.json names: {why}")
    asked = time.time()
    os.kill(pid, REQUEST_SIGNAL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = _done(run_dir)
        if said is not None and said.get("time", 0) >= asked:
            return _result(run_dir, said, task)
        time.sleep(0.1)
    raise LaunchError(f"run {run_dir.name}: its supervisor wrote no stacks within {timeout:g} s (it takes them "
                      "while it watches an attempt, not while the group starts or restarts); try again")


# The most a live stacks file is read: faulthandler writes each thread's 100 frames at most (a
# thousand threads' is a few MB); ``done`` is a few hundred bytes a task.
STACKS_BYTES = 16 << 20


def _read(run_dir: Path, name: str) -> str:
    """A live stacks file, as record files are read (launcher/safefile.py): a regular file inside the
    run dir, never through a symlink (planted there, or as ``stacks/`` or ``live/``), bounded.
    OSError (UnsafeFile, one line) otherwise."""
    path = live_stacks_dir(run_dir) / name
    return read_regular(path, STACKS_BYTES, follow=False, within=run_dir).decode("utf-8", "replace")


def _done(run_dir: Path) -> Optional[dict]:
    try:
        data = loads_strict(_read(run_dir, "done"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("time"), (int, float)) else None


# A task's key as a plan names it (``worker:0``): what ``done`` says is read only for such keys.
TASK_KEY = re.compile(r"(chief|worker|ps|evaluator):[0-9]{1,9}")


def _result(run_dir, said: dict, task: Optional[str]) -> StacksResult:
    live = said.get("tasks") if isinstance(said.get("tasks"), dict) else {}
    live = {k: one_line(str(v), 300) for k, v in live.items() if isinstance(k, str) and TASK_KEY.fullmatch(k)}
    notes = {k: v for k, v in live.items() if task in (None, k)}
    if task is not None and task not in notes:
        raise NoRun(f"{shown(task, 60)} is not a live task of run {run_dir.name} (live: {', '.join(live) or 'none'})")
    texts = {}
    for key, note in notes.items():
        if note:
            continue
        try:
            texts[key] = _read(run_dir, key.replace(":", "-").replace("/", "-") + ".txt")
        except OSError as exc:
            notes[key] = f"no stacks: {exc.strerror or exc}"
    return StacksResult(run_dir.name, texts, {k: v for k, v in notes.items() if v})
