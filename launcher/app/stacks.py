"""``tfcluster stacks``: every live task's current stacks, all threads, from the run's supervisor.

The supervisor holds the tasks' handles on every backend, so it takes them the way the hang
watchdog does (launcher/supervise/hangwatch.py: the stacks' signal to each task's own process,
``TaskHandle.signal_process``, their faulthandler text read from their output): this asks it with
REQUEST_SIGNAL, once the pid launcher.json names is proven the run's supervisor (as ``down`` does),
and reads what it wrote to the record's live stacks dir.
"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

from launcher.app.down import not_the_supervisor
from launcher.app.results import StacksResult
from launcher.errors import LaunchError, NoRun
from launcher.system.procinfo import is_same
from launcher.record.layout import LATEST, LAUNCHER_FILE, live_stacks_dir, runs_dir
from launcher.record.reader import latest_run, read_launcher
from launcher.spec.model import LoadedSpec
from launcher.supervise.hangwatch import REQUEST_SIGNAL


def stacks(loaded: LoadedSpec, run_id: Optional[str] = None, task: Optional[str] = None,
           timeout: float = 30.0) -> StacksResult:
    """Ask run ``run_id``'s (default: the latest) supervisor for every live task's stacks and
    wait up to ``timeout`` seconds for them; ``task``: only that one's."""
    root = runs_dir(loaded)
    name = loaded.spec.name
    run_dir = (root / name / run_id) if run_id else latest_run(root, name)
    if run_dir is None or not (run_dir / LAUNCHER_FILE).is_file():
        raise NoRun(f"no run record at {root / name / (run_id or LATEST)}; no stacks to take (check the spec "
                    "path or --run)")
    info = read_launcher(run_dir, required=True) or {}
    pid, started = info.get("pid"), info.get("start_time")
    if not (isinstance(pid, int) and is_same(pid, started)):
        raise NoRun(f"run {run_dir.name} is not running here (its supervisor is gone); its stacks at a hang, "
                    f"if any, are in {run_dir / 'stacks'}")
    why = not_the_supervisor(run_dir, info)
    if why is not None:
        raise LaunchError(f"not signalling process {pid}, which run {run_dir.name}'s launcher.json names: {why}")
    done = live_stacks_dir(run_dir) / "done"
    asked = time.time()
    os.kill(pid, REQUEST_SIGNAL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = _done(done)
        if said is not None and said.get("time", 0) >= asked:
            return _result(run_dir, said, task)
        time.sleep(0.1)
    raise LaunchError(f"run {run_dir.name}: its supervisor wrote no stacks within {timeout:g} s (it takes them "
                      "while it watches an attempt, not while the group starts or restarts); try again")


def _done(path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("time"), (int, float)) else None


def _result(run_dir, said: dict, task: Optional[str]) -> StacksResult:
    notes = {str(k): str(v) for k, v in (said.get("tasks") or {}).items() if task in (None, k)}
    if task is not None and task not in notes:
        raise NoRun(f"{task} is not a live task of run {run_dir.name} (live: {', '.join(said.get('tasks') or ())})")
    texts = {}
    for key, note in notes.items():
        if note:
            continue
        try:
            texts[key] = (live_stacks_dir(run_dir) / (key.replace(":", "-") + ".txt")).read_text(encoding="utf-8")
        except OSError as exc:
            notes[key] = f"no stacks: {exc.strerror}"
    return StacksResult(run_dir.name, texts, {k: v for k, v in notes.items() if v})
