"""``tfcluster down``: stop a run from its record, by pid and start time, never by name.

If the run's launcher is alive it gets SIGTERM and tears its tasks down itself (letting them
save on the way out); task groups it leaves behind are stopped directly.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Optional

from .console import Console
from .errors import LaunchError
from .plan import Plan
from .procinfo import group_alive, is_same, kill_group, wait_gone
from .rundir import latest_run
from .spec import LoadedSpec


def down(loaded: LoadedSpec, plan: Plan, console: Console, run_id: Optional[str] = None, timeout: float = 60.0) -> int:
    spec = loaded.spec
    root = loaded.base_dir / spec.run_dir
    run_dir = (root / spec.name / run_id) if run_id else latest_run(root, spec.name)
    if run_dir is None or not (run_dir / "launcher.json").is_file():
        where = root / spec.name / (run_id or "latest")
        raise LaunchError(f"no run record at {where}; nothing to stop (check the spec path or --run)")
    info = json.loads((run_dir / "launcher.json").read_text())
    pid, started = int(info["pid"]), info.get("start_time")
    stopped_any = False
    if pid != os.getpid() and is_same(pid, started):
        console.info(f"asking launcher {pid} of run {info['run_id']} to stop (SIGTERM)")
        os.kill(pid, signal.SIGTERM)
        stopped_any = True
        if not wait_gone(pid, started, timeout):
            console.error(f"launcher {pid} did not stop within {timeout:g} s; killing it (its tasks follow)")
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, started, 5)
    leftovers = []
    for key, task in info.get("tasks", {}).items():
        pgid = task.get("pgid")
        if pgid and is_same(pgid, task.get("start_time")) and group_alive(pgid):
            leftovers.append(key)
            kill_group(pgid, spec.watchdog.stop_grace)
    if leftovers:
        console.info(f"stopped leftover tasks: {', '.join(leftovers)}")
        stopped_any = True
    if spec.backend != "local":
        from .backends import make_backend

        backend = make_backend(spec.backend, loaded=loaded, record=None)
        stopped_any = backend.down(run_dir, info, console) or stopped_any
    console.info(f"run {info['run_id']}: " + ("stopped" if stopped_any else "nothing was running"))
    return 0
