"""The hang watchdog on docker (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py, mounted as the containers' working directory) whose worker:0 callback
deadlocks on a lock; the stacks' signal reaches the tasks through the container's init, the stuck
task is named at its line, every task's stacks are in the record, and no container is left."""

from __future__ import annotations

import shutil

import pytest

from tests.support.cli import ROOT
from tests.support.docker_helpers import docker_spec, latest_run_dir, launch_up, leftovers, reap

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]

SCRIPT = ROOT / "tests" / "support" / "hang_script.py"


def test_a_deadlocked_callback_in_a_container_is_named_with_its_stacks(tmp_path, docker_engine, worker_image):
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(SCRIPT, code / "train.py")
    spec = docker_spec(tmp_path, docker_engine.url, "python train.py deadlock --task worker:0",
                       extra=f"  volumes: ['{code}:/home/tfcluster:ro']\n")
    spec.write_text(spec.read_text().replace("watchdog: {startup_timeout: 240, stop_grace: 3}",
                                             "watchdog: {startup_timeout: 600, hang_timeout: 15, stop_grace: 3}"))
    proc = launch_up(spec)
    try:
        out, _ = proc.communicate(timeout=800)
    finally:
        reap(proc)
    assert proc.returncode == 1, out[-4000:]
    assert "worker:0 failed: stuck " in out and "train.py:82 in on_train_batch_end()" in out, out[-4000:]
    record = latest_run_dir(spec)
    for key in ("worker-0", "worker-1"):
        assert "(most recent call first):" in (record / "stacks" / "1" / f"{key}.txt").read_text()
    assert leftovers(docker_engine, "dk") == ([], [])
