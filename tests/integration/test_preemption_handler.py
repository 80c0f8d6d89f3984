"""TensorFlow's own preemption handler under tfcluster, on 2 local workers: the documented script
(examples/preemption_handler.py, docs/your-script.md: a custom loop with PreemptionCheckpointHandler
and a TerminationConfig) gets a preemption's SIGTERM on one worker; every worker saves the step
they agree on and exits 42, which restarts the group though restart.max_restarts is 0 (a preemption,
not a failure); the next attempt resumes from that save. Then `tfcluster down` stops it the same
way: the tasks save again, and exit 42 (the run is interrupted, not failed)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys

import pytest

import launcher.record.events as ev
from tests.support.records import of
from tests.support.cli import ROOT, start_tfcluster
from tests.support.processes import task_pid
from tests.support.specs import local_spec
from tests.support.tfrun import assert_no_processes, events, run_and_act, run_dir

pytestmark = [pytest.mark.integration, pytest.mark.tf]

SCRIPT = ROOT / "examples" / "preemption_handler.py"


def steps_of(out: str, key: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(rf"^\[{re.escape(key)}\] step (\d+) loss", out, re.M)]


def starts_of(out: str, key: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(rf"^\[{re.escape(key)}\] training from step (\d+) to", out, re.M)]


@pytest.mark.timeout(900)  # two attempts of two TensorFlow workers, and their saves
def test_the_handler_saves_on_a_preemption_and_on_down_and_the_next_attempt_resumes(tmp_path):
    shutil.copy(SCRIPT, tmp_path / "train.py")
    spec = local_spec(tmp_path, f"{sys.executable} train.py 100000", name="demo", env={"TF_CPP_MIN_LOG_LEVEL": '"2"'},
                      watchdog="{startup_timeout: 240, stop_grace: 30}", extra="restart: {max_restarts: 0}\n")

    def preempt(proc) -> None:  # what a preemption sends a task: SIGTERM, to worker 1 alone
        os.kill(task_pid(run_dir(spec).name, "worker:1"), signal.SIGTERM)

    downs = []

    def down(proc) -> None:  # (started, not waited for: the run's output must keep being read meanwhile)
        downs.append(start_tfcluster("down", spec, "--timeout", "240"))

    code, out = run_and_act(spec, [(r"^\[worker:1\] step 30 loss", preempt),
                                   (r"^\[worker:1\] training from step [1-9]", lambda proc: None),
                                   (r"^\[worker:0\] step \d+ loss", down)], timeout=400)
    said, _ = downs[0].communicate(timeout=300)
    assert downs[0].returncode == 0 and "did not stop" not in said, said
    record = events(spec)
    restarts = of(record, ev.GroupRestart)
    assert len(restarts) == 1 and "restart.preemption_exit_codes" in out, out[-4000:]
    assert "restarting the whole group (worker:" in out and "restart.max_restarts not spent" in out, out[-4000:]
    failure = of(record, ev.Failure)
    assert failure and failure[0].code == 42 and failure[0].reason.startswith("saved for a preemption"), failure
    for key in ("worker:0", "worker:1"):
        first, second = starts_of(out, key)
        assert first == 0 and second >= 30, (key, first, second)
        # The first attempt's last step was saved: the second starts right after it.
        before = [s for s in steps_of(out[:out.index(f"[{key}] training from step {second}")], key)]
        assert max(before) == second, (key, max(before), second)
    outcome = of(record, ev.RunOutcome)
    assert outcome, out[-3000:]
    outcome = outcome[-1]
    assert outcome.outcome == "interrupted", outcome
    # Stopped by `down`, the tasks saved again and exited 42.
    after = record[record.index(restarts[0]):]
    stopped = {e.task: e.code for e in of(after, ev.Stopped, ev.Exit)}
    assert code != 0 and stopped == {"worker:0": 42, "worker:1": 42}, (stopped, out[-3000:])
    assert_no_processes(spec)
