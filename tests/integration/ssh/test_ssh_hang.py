"""The hang watchdog over ssh (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py) on two lab hosts whose worker:1's input generator retries for ever,
printing; the stacks' signal reaches each task's own process through the host (the pid file's
task pid), the stuck task is named at its line, and every task's stacks are in the record."""

from __future__ import annotations

import pytest

from tests.support.cli import tfcluster
from .conftest import PY, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.tf, pytest.mark.timeout(400)]

SCRIPT = ROOT / "tests" / "support" / "hang_script.py"


def test_a_stuck_generator_on_a_remote_host_is_named_with_its_stacks(lab, make_spec):
    spec = make_spec([PY, str(SCRIPT), "generator", "--task", "worker:1"], workers=2,
                     env={"TF_CPP_MIN_LOG_LEVEL": "2"}, ssh={"require": ["tensorflow", "tf_keras"]},
                     watchdog={"startup_timeout": 240, "stop_grace": 2, "hang_timeout": 15})
    proc = tfcluster("up", str(spec), timeout=380)
    out = proc.stderr[-4000:] + proc.stdout[-4000:]
    assert proc.returncode != 0, out
    assert "worker:1 failed: stuck " in proc.stderr and "hang_script.py:45 in retry_forever(): time.sleep(1)" \
        in proc.stderr, out
    record = (spec.parent / "runs" / "sshtest" / "latest").resolve()
    for key in ("worker-0", "worker-1"):
        assert "(most recent call first):" in (record / "stacks" / "1" / f"{key}.txt").read_text()
