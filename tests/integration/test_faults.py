"""Faults found by fault injection (issue 15): a stopped peer is the root cause and the run is
retried; the report shows the task's exception line and a hint; the TF tutorial's own code
pattern runs unmodified; a full disk under run_dir neither hangs nor contradicts the exit code."""

from __future__ import annotations

import signal
import textwrap

import pytest

from tests.integration.tfrun import assert_no_processes, events, kill_task, progress, run_and_act, up, write_spec
from tests.prereq import require_tf

pytestmark = [pytest.mark.integration, pytest.mark.tf]
TRAIN = "python -m worker --epochs 2 --steps-per-epoch 30 --step-delay 0.05 --progress-every 5 --save-freq 5"


@pytest.fixture(autouse=True)
def _tf():
    require_tf()


def test_sigstopped_peer_is_the_root_cause_and_the_group_restarts(tmp_path, tfds_dir):
    # TF's coordination service aborts worker:0 (exit 1) about 8 s after worker:1 stops; the
    # hang watchdog (20 s) has not fired yet. worker:1 is the cause, and the run is retryable.
    spec = write_spec(tmp_path, tfds_dir, TRAIN, extra="restart: {max_restarts: 2}\n")
    spec.write_text(spec.read_text().replace("stop_grace: 3}", "stop_grace: 3, hang_timeout: 20}"))
    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step epoch=0 step=15 ",
                                    lambda proc: kill_task(spec, "worker:1", signal.SIGSTOP))])
    assert code == 0, out[-4000:]
    assert "worker:1 failed: process is stopped (SIGSTOP?) (attempt 1 of 3)" in out, out[-4000:]
    assert "worker:0 exited (exit code 1) as a consequence of worker:1" in out, out[-4000:]
    assert "restarting the whole group (restart 1 of 2)" in out
    starts = progress(out, "start")
    assert len(starts) == 2 and int(starts[1]["global_step"]) > 0, starts
    failure = [e for e in events(spec) if e["event"] == "failure"][0]
    assert failure["task"] == "worker:1" and failure["consequences"] == {"worker:0": 1}, failure
    assert events(spec)[-1]["outcome"] == "succeeded"
    assert_no_processes(spec)
