"""A terminal that goes away under `tfcluster up`: its tmux window killed mid-run, as a user
closes it (SIGHUP, the live panel's writes failing), and the run's outcome as its record says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable, Optional

from tests.support.cli import terminal_command
from tests.support.prereq import require_tool
from tests.support.processes import alive
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records


def outcome(run: Path) -> Optional[dict]:
    """The ``outcome`` event of the run record ``run``, or None while there is none."""
    events = read_records(run)
    return next((e for e in events if isinstance(e, ev.RunOutcome)), None)


def up_in_a_terminal_closed_when(spec: Path, latest: Path, ready: Callable[[], object], what: str) -> dict:
    """`tfcluster up spec` in a tmux window of its own (160x45), killed once ``ready()`` (waited for
    up to 240 s, ``what`` naming it). ``latest`` is the run's ``latest`` link. Returns the outcome
    the run recorded, once the launcher has exited."""
    require_tool("tmux", "tmux")
    sock = f"tfcluster-hup-{os.getpid()}-{spec.parent.name}"  # (suites side by side share tmp_path names)
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "up", "-x", "160", "-y", "45",
                    terminal_command("up", spec)], check=True, timeout=10)
    try:
        wait_for(ready, 240, what=what)
        run = latest.resolve()
        launcher = json.loads((run / "launcher.json").read_text())["pid"]
        subprocess.run(["tmux", "-L", sock, "kill-session", "-t", "up"], check=True, timeout=10)
        recorded = wait_for(lambda: outcome(run), 120, what="the run's outcome in its record")
        wait_for(lambda: not alive(launcher), 30, what=f"the launcher (pid {launcher}) to exit")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
    return recorded
