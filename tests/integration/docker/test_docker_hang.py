"""The hang watchdog on docker (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py, mounted as the containers' working directory) whose worker:0 callback
deadlocks on a lock. ``tfcluster stacks`` on the live run, before the watchdog acts, shows each
task's own stacks (the stacks' signal reaches the tasks through the container's init); then the
stuck task is named at its line, every task's stacks are in the record, goodput counts ``hung``,
and no container is left."""

from __future__ import annotations

import shutil

import pytest

from tests.labs import docker as eng
from tests.support.cli import start_tfcluster
from tests.support.docker_helpers import docker_spec, latest_run_dir, leftovers, tfcluster_at_repo
from tests.support.hang_live import SCRIPT, check_failure, check_output_is_data, stacks_while_stuck, stop, stuck_line

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]


def test_a_deadlocked_callback_in_a_container_shows_its_stacks_live_then_is_named(tmp_path, docker_engine,
                                                                                    worker_image):
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(SCRIPT, code / "train.py")
    # Its tasks also print every line of tfcluster's protocol first, and fake beats every second
    # (docs/concepts/trust.md, rule 9): none steers the run (out of the container, the wrapper's
    # frames alone carry its control channel); the stall is found all the same, and the run fails
    # at it (max_restarts: 0: that a stall is retried, the lies with it, is the supervisor's
    # decision, tests/integration/test_hang.py's on local; a restart here would only import
    # TensorFlow twice more).
    spec = docker_spec(tmp_path, docker_engine.url, "python train.py deadlock --task worker:0 --lies",
                       extra=f"  volumes: ['{code}:/home/tfcluster:ro']\n", max_restarts=0)
    # An explicit limit: the run is live, its task stuck, for 30 s before the watchdog acts: time
    # for the one ``tfcluster stacks`` (a CLI start and one signal through the engine, a few seconds on
    # a loaded machine; a CI machine was 1.4 times slower than this one at the labs' tests).
    spec.write_text(spec.read_text().replace("watchdog: {startup_timeout: 240, stop_grace: 3}",
                                             "watchdog: {startup_timeout: 600, hang_timeout: 30, stop_grace: 3}"))
    proc = start_tfcluster("up", spec, "--plain", cwd=eng.REPO, env={"PYTHONPATH": str(eng.REPO)})
    try:
        out = stacks_while_stuck(proc, lambda *a: tfcluster_at_repo("stacks", str(spec), *a), "deadlock",
                                 "worker:0", "train.py", 700, one_task=False)
    finally:
        stop(proc)
    assert proc.returncode == 1, out[-4000:]
    # (the statement is not quoted: the script is the container's, not readable where the supervisor runs)
    line = stuck_line("deadlock").split("(): ")[0] + "()"
    assert "worker:0 failed: stuck " in out and line in out, out[-4000:]
    status = tfcluster_at_repo("status", str(spec), "--json")
    check_failure(latest_run_dir(spec), status, "worker:0", line)
    check_output_is_data(latest_run_dir(spec), status, out, restarted=False)
    assert leftovers(docker_engine, "dk") == ([], [])
