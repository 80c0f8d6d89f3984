"""tests/support/steps_task.py, the stand-in of the Slurm fault test's restarts, starts a group as a
MWMS group starts: every task at the same step, however late the scheduler starts one of them.
Run as two processes by hand (no backend): the start lines on their control channels are the
evidence the Slurm test reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from launcher.contract.progress import parse
from tests.support.cli import ROOT
from tests.support.ports import free_base
from tests.support.waits import wait_for

STEPS = str(ROOT / "tests" / "support" / "steps_task.py")


def _start(state, index: int, ports: list[int]) -> tuple[subprocess.Popen, int]:
    read, write = os.pipe()
    config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
    env = dict(os.environ, TF_CONFIG=json.dumps(config), TFCLUSTER_TASK=f"worker:{index}",
               TFCLUSTER_RESTART_COUNT="2", TFCLUSTER_STATE_DIR=str(state), TFCLUSTER_CONTROL_FD=str(write))
    proc = subprocess.Popen([sys.executable, STEPS, "12", "5", "0.05"], env=env, pass_fds=(write,))
    os.close(write)
    return proc, read


def _lines(proc: subprocess.Popen, read: int) -> list[str]:
    assert proc.wait(60) == 0
    with os.fdopen(read) as fh:
        return fh.read().splitlines()


def _field(lines: list[str], kind: str, key: str) -> str:
    """``key`` of the one ``tfcluster-<kind>`` line, read by the launcher's own parser."""
    (record,) = [r for r in map(parse, lines) if r is not None and r.kind == kind]
    return dict(record.fields)[key]


def test_a_task_started_late_starts_at_the_groups_backup_not_at_one_its_peer_wrote_since(tmp_path):
    backup = tmp_path / "steps_task" / "backup"
    backup.parent.mkdir()
    backup.write_text("9")
    base = free_base(2)
    ports = [base, base + 1]
    early = _start(tmp_path, 0, ports)
    # worker:1 only once worker:0 waits for it (its joined file) or has stepped to 10 and written that
    # backup (a step every 0.05 s, a backup every 5), as it did before it waited for its peers.
    joined = backup.with_name("joined-2-worker-0")
    wait_for(lambda: joined.exists() or backup.read_text() == "10", 30, what="worker:0 waiting for its peer, or at step 10")
    late = _start(tmp_path, 1, ports)
    first, second = _lines(*early), _lines(*late)
    assert _field(first, "start", "global_step") == _field(second, "start", "global_step") == "9", (first, second)
    assert _field(first, "result", "steps_run") == _field(second, "result", "steps_run") == "3"
    assert backup.read_text() == "10"  # worker:0 stepped on, and wrote it
