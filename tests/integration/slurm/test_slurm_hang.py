"""The hang watchdog on slurm (launcher/supervise/hangwatch.py): a user's own MWMS Keras fit script
(tests/support/hang_script.py) as two steps on two nodes, worker:1's callback spinning; the stacks'
signal reaches the tasks through ``scancel --signal`` (their wrapper survives it), the stuck task
is named at its line, every task's stacks are in the record, and nothing is left."""

from __future__ import annotations

import pytest

from tests.support.slurm_helpers import assert_clean, latest_run

from .conftest import PY, ROOT, tfcluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(400)]

SCRIPT = ROOT / "tests" / "support" / "hang_script.py"


def test_a_busy_callback_on_a_node_is_named_with_its_stacks(lab, make_spec):
    spec = make_spec([PY, str(SCRIPT), "busy", "--task", "worker:1"], env={"TF_CPP_MIN_LOG_LEVEL": "2"},
                     watchdog={"startup_timeout": 240, "stop_grace": 2, "hang_timeout": 15})
    proc = tfcluster(lab, "up", str(spec), timeout=380)
    out = proc.stderr[-4000:] + proc.stdout[-4000:]
    assert proc.returncode != 0, out
    assert "worker:1 failed: stuck " in proc.stderr and "hang_script.py:78 in on_train_batch_end(): n += 1" \
        in proc.stderr, out
    record = latest_run(spec)
    for key in ("worker-0", "worker-1"):
        assert "(most recent call first):" in (record / "stacks" / "1" / f"{key}.txt").read_text()
    assert_clean(lab, spec)
