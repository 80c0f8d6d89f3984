"""A run record is data, not orders (docs/concepts/trust.md), tried with the CLI as a tamperer would:
a launcher.json naming someone else's process (its real pid, start time, command line and host:
all /proc and a hostname tell), or someone else's process group as a task's, makes ``down`` say so
in one line each and exit 1, signalling nothing; the run's own processes are still stopped. The
other backends' proofs (container labels, a Slurm job's user/name/comment, a remote wrapper's start
time and marker) are in tests/unit/backends/test_down_ownership.py and the labs' test_*_trust.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from launcher.system.procinfo import cmdline, start_time
from tests.support.cli import tfcluster
from tests.support.waits import wait_for

from .conftest import assert_bounded


def _someone_elses(env: dict | None = None) -> subprocess.Popen:
    """A process of this machine that no run started (a session of its own, as a task group's leader)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                            env={**os.environ, **(env or {})})
    wait_for(lambda: start_time(proc.pid) is not None and cmdline(proc.pid), 10, interval=0.01,
             what="the process to show in /proc")
    return proc


def _tamper(run_dir, **fields) -> None:
    path = run_dir / "launcher.json"
    info = json.loads(path.read_text())
    info.update(fields)
    path.write_text(json.dumps(info))


@pytest.mark.parametrize("how", ["launcher", "task-group", "both"])
def test_down_signals_no_process_a_tampered_record_names(run, how):
    work, run_dir, _outside = run
    victims = [_someone_elses(), _someone_elses()]
    try:
        launcher, group = victims
        fields = {}
        if how in ("launcher", "both"):
            fields.update(pid=launcher.pid, start_time=start_time(launcher.pid), cmdline=cmdline(launcher.pid),
                          host=socket.gethostname())
        if how in ("task-group", "both"):
            fields["tasks"] = {"worker:0": {"pid": group.pid, "pgid": group.pid, "start_time": start_time(group.pid)}}
        _tamper(run_dir, **fields)
        started = time.monotonic()
        result = tfcluster("down", "r.yaml", cwd=work, timeout=60)
        assert time.monotonic() - started < 15
        assert_bounded(result, 1)
        assert all(v.poll() is None for v in victims), result.stderr  # nothing was signalled
        refused = [line for line in result.stderr.splitlines() if "not signalling" in line or "not stopping" in line]
        assert len(refused) == (2 if how == "both" else 1), result.stderr
        assert "could not be proven the run's own" in result.stderr.splitlines()[-1], result.stderr
    finally:
        for v in victims:
            v.kill()
            v.wait()


def test_a_record_that_names_the_runs_own_task_group_is_still_obeyed(run):
    """The check is not one that refuses everything: a group carrying the run's marker is stopped."""
    work, run_dir, _outside = run
    own = _someone_elses({"TFCLUSTER_RUN_ID": run_dir.name})
    try:
        _tamper(run_dir, tasks={"worker:0": {"pid": own.pid, "pgid": own.pid, "start_time": start_time(own.pid)}})
        result = tfcluster("down", "r.yaml", cwd=work, timeout=60)
        assert_bounded(result, 0)
        assert own.wait(30) in (-signal.SIGTERM, -signal.SIGKILL), result.stderr
    finally:
        if own.poll() is None:
            own.kill()
            own.wait()
