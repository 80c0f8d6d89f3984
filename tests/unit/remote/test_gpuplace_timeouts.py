"""nvidia-smi on a task host (remote/gpuquery.py: the GPU placement's ``-L`` and the GPU watch's
queries) ends within its timeout with its whole process group: ``subprocess.run`` killed only the
hung nvidia-smi itself, and a child of it, holding the pipe, ran on (on a Python that reads the
pipe to its end after the kill, the call also waited for as long as that child lived)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from launcher.remote import gpuquery
from tests.support.waits import wait_for

# A fake nvidia-smi that forks a grandchild holding its stdout (and writing its pid down), then hangs.
HANGING = """#!/bin/sh
sh -c 'echo $$ > "$FAKE_GRANDCHILD"; exec sleep 300' &
exec sleep 300
"""


@pytest.fixture
def hanging(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(HANGING)
    fake.chmod(0o755)
    record = tmp_path / "grandchild.pid"
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_GRANDCHILD", str(record))
    yield record
    if record.exists():  # never leave it behind, whatever the test said
        try:
            os.kill(int(record.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("call, said", [
    (lambda: gpuquery.host_gpus_checked(1.0), ([], "nvidia-smi -L did not answer in 1s")),
    (lambda: gpuquery.query(1.0), None),
])
def test_a_hung_nvidia_smi_and_its_pipe_holding_child_end_at_the_timeout(hanging, call, said):
    started = time.monotonic()
    assert call() == said
    took = time.monotonic() - started
    # Bounded by the timeout plus the kill (a correctness bound, not a speed figure).
    assert took < 30, f"returned after {took:.1f} s"
    grandchild = int(wait_for(lambda: hanging.read_text().strip() or None, 10, what="the grandchild's pid"))
    wait_for(lambda: _gone(grandchild), 10, what=f"the grandchild {grandchild} to be killed with the group")
