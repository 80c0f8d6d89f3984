"""What a run on ssh hosts shows its user when things end badly: a task whose wrapper is killed
is one line of the launcher's, never the remote shell's report of it (that report quoted the
host agent's whole source, ~300 lines, into the task's log and the console)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from launcher.remote import source as remote_source
from tests.support.cli import start_tfcluster
from tests.support.waits import wait_for

from .conftest import PY, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(240)]

# Lines only the host agent's source has: if any reaches a log or the console, a shell quoted it.
AGENT_TELLS = ("def _prepare(req):", "class _Drainer(object):", "Remote host agent: preflight")


def _pidfiles(spec: Path, n: int, timeout: float = 60.0) -> dict[str, tuple[int, int]]:
    """{pid file name: (wrapper pid, task pid)} once ``n`` remote tasks have written theirs."""
    def found():
        out = {}
        for pf in (spec.parent / "remote" / "sshtest").glob("*/pids/*.pid"):
            try:
                wrapper, child = pf.read_text().split()
                out[pf.name] = (int(wrapper), int(child))
            except (OSError, ValueError):
                continue
        return out if len(out) >= n else None

    return wait_for(found, timeout, 0.1, what=f"{n} remote tasks to write their pid files")


def test_a_sigkilled_first_task_of_a_host_is_one_line_not_the_agent_source(lab, make_spec):
    """worker:0 is h1's first task: the host agent became its wrapper. SIGKILL to the wrapper's
    group (a user's `kill -9 -PGID`, the OOM killer's choice, the launcher's own SIGKILL) kills
    the process its login shell waits for; bash then printed "line 1: PID Killed python3 -S -c
    '<agent.py>' TAG" into worker:0's output. The group stop that follows SIGKILLs worker:1's
    wrapper (also an agent) on h2 the same way."""
    assert all(tell in remote_source("agent.py") for tell in AGENT_TELLS)  # the tells are still tells
    script = ("import os,time; n=int(os.environ['TFCLUSTER_RESTART_COUNT']); print('ATTEMPT', n, flush=True); "
              "time.sleep(120 if n == 0 else 0)")
    spec = make_spec([PY, "-c", script], workers=2, restart={"max_restarts": 1})
    proc = start_tfcluster("up", spec, stderr=subprocess.PIPE)
    try:
        wrapper, _task = _pidfiles(spec, 2)["worker-0.0.pid"]
        os.killpg(wrapper, signal.SIGKILL)  # lab hosts are namespaces of this machine: same pids
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    run = (spec.parent / "runs" / "sshtest" / "latest").resolve()
    shown = {"the console": out + err, "worker-0.log": (run / "logs" / "worker-0.log").read_text(),
             "worker-1.log": (run / "logs" / "worker-1.log").read_text(),
             "output.log": (run / "output.log").read_text()}
    for where, text in shown.items():
        leaked = [tell for tell in AGENT_TELLS if tell in text]
        assert not leaked, f"the agent's source reached {where}: {text[-2000:]}"
        assert "Killed" not in text, f"a shell's kill report reached {where}: {text[-2000:]}"
    # Each task's log is its own lines only: attempt 0, then attempt 1.
    for key in ("worker-0", "worker-1"):
        assert shown[f"{key}.log"].splitlines() == ["ATTEMPT 0", "ATTEMPT 1"], shown[f"{key}.log"]
    # The kill: one line of the launcher's (and its row in the final report's attempt table), with
    # the exit status the shell reported, not a lost connection.
    kills = [line for line in err.splitlines() if line.startswith("tfcluster:") and "worker:0" in line
             and "SIGKILL" in line]
    assert kills == ["tfcluster: error: worker:0 failed: killed by SIGKILL (exit 137) (attempt 1 of 2)"], err
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert [e["code"] for e in events if e["event"] == "exit" and e["task"] == "worker:0"] == [137, 0]
    wait_for(lambda: not any(task_processes(lab).values()), 20, what="nothing of the run left on any host",
             detail=lambda: str(task_processes(lab)))
