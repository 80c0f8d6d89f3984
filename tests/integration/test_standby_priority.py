"""A warm standby costs its host's tasks nothing until it is needed (launcher/contract/standbyprio.py):
under the standby stub (``python SCRIPT``) it waits at the lowest CPU and I/O priority (SCHED_IDLE
and the idle I/O class, read from the kernel for each of its threads), and the process promoted
from it runs at the normal priority in every thread (the script prints its threads' own)."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from launcher.contract.standbyprio import io_class, may_leave_idle
from tests.support.cli import ROOT
from tests.support.processes import pids_with_env
from tests.support.specs import local_spec
from tests.support.tfrun import assert_no_processes, events, kill_task, run_and_act, run_dir
import launcher.record.events as ev

pytestmark = [pytest.mark.integration]

SCRIPT = ROOT / "tests" / "support" / "standby_task.py"
READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"
PROMOTED_TASK = re.compile(r"^\[(?P<key>worker:\d)\] standby-task key=\S+ attempt=1 pid=(?P<pid>\d+) standby=\S+ "
                           r"sched=(?P<sched>\S+) io=(?P<io>\S+) ", re.M)


def standby_threads(run_id: str) -> dict[int, list[tuple[int, int]]]:
    """Each waiting standby process of the run (its python, not its wrapper): its threads' (CPU policy, I/O class)."""
    out = {}
    for pid in pids_with_env("TFCLUSTER_STANDBY", "1"):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))  # the main thread's id is the pid
        except OSError:
            continue
        if f"TFCLUSTER_RUN_ID={run_id}".encode() in env and b"taskwrap.py" not in cmd:
            out[pid] = [(os.sched_getscheduler(t), io_class(t)) for t in tids]
    return out


@pytest.mark.skipif(not may_leave_idle(), reason="SCHED_IDLE is used only where a promoted process may leave it "
                                                  "(CAP_SYS_NICE): run as root")
def test_a_standby_waits_at_the_idle_priority_and_its_promoted_process_runs_at_the_normal_one(tmp_path):
    spec = local_spec(tmp_path, f"[{sys.executable}, {SCRIPT}, ack]", name="demo",
                      watchdog="{startup_timeout: 60, stop_grace: 2}",
                      extra="restart: {max_restarts: 1}\n")  # (warm standby by default: a Python script)
    seen = {}

    def look_then_kill(_proc):
        seen.update(standby_threads(run_dir(spec).name))
        kill_task(spec, "worker:1", signal.SIGKILL)

    code, out = run_and_act(spec, [(READY, lambda p: None), (READY, look_then_kill)], timeout=90)
    assert code == 0, out[-3000:]
    # Waiting: every thread of both standbys (the stub's own and its promotion thread) idle in I/O, the
    # importing one (the main thread, which the script's process keeps) at SCHED_IDLE.
    assert len(seen) == 2, (seen, out[-3000:])
    for pid, threads in seen.items():
        assert threads[0] == (os.SCHED_IDLE, 3), (pid, threads)
    promoted = {m["key"]: m for m in PROMOTED_TASK.finditer(out)}
    assert set(promoted) == {"worker:0", "worker:1"}, out[-3000:]
    for key, m in promoted.items():
        assert int(m["pid"]) in seen, (key, m["pid"], seen)  # the process that waited is the one promoted
        assert set(m["sched"].split(",")) == {str(os.SCHED_OTHER)}, (key, m["sched"])
        assert "3" not in m["io"].split(","), (key, m["io"])
    assert {e["task"] for e in events(spec) if isinstance(e, ev.StandbyPromoted)} == {"worker:0", "worker:1"}
    assert_no_processes(spec)
