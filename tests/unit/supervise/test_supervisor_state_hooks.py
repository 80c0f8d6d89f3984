"""The supervisor calls Backend.prepare_attempt before every attempt and collect_results once
after success, whatever the backend; a LaunchError from either is reported, never a traceback."""

from __future__ import annotations

from launcher.errors import AttemptImpossible, LaunchError
from tests.support.fakes import EXIT_0, ScriptedTasks, scripted, supervise
import launcher.record.events as ev

SPEC = """\
name: hooks
strategy: multi_worker_mirrored
entrypoint: python -c pass
tasks: {worker: 2}
restart: {max_restarts: 2}
"""
PREPARE_FAILED = LaunchError("host h2: state copy from h1 failed: No space left on device (attempt 0)")
PREEMPTED = AttemptImpossible("slurm: allocation job 7 was preempted at T; run tfcluster up again to resume")
COLLECT_FAILED = LaunchError("host h1: fetching final_model failed: got 10 of 20 bytes; it is still in /s there")


def _run(tmp_path, backend):
    run = supervise(tmp_path, SPEC, backend, poll_interval=0.01, clock=None)  # the real clock
    return run.code, run.err, run.events


def test_prepare_runs_before_every_attempt_and_its_failure_fails_that_attempt(tmp_path):
    backend = scripted(ScriptedTasks(default=EXIT_0, prepare_errors={0: PREPARE_FAILED}))
    code, err, events = _run(tmp_path, backend)
    assert code == 0, err
    assert backend.tasks.calls == ["prepare 0", "prepare 1", "start worker:0 1", "start worker:1 1", "collect"]
    assert ("prepare failed: host h2: state copy from h1 failed: No space left on device (attempt 0) "
            "(attempt 1 of 3)") in err
    (failure,) = [e for e in events if isinstance(e, ev.Failure)]
    assert failure["task"] == "prepare" and failure["attempt"] == 0


def test_an_impossible_attempt_ends_the_run_at_once_without_spending_restarts(tmp_path):
    backend = scripted(ScriptedTasks(default=EXIT_0, prepare_errors={0: PREEMPTED}))
    code, err, events = _run(tmp_path, backend)
    assert code == 1
    assert backend.tasks.calls == ["prepare 0"]  # max_restarts is 2: neither restart is tried
    assert err.splitlines()[0] == ("tfcluster: error: prepare failed: slurm: allocation job 7 was preempted at T; "
                                   "run tfcluster up again to resume (attempt 1 of 3)"), err
    assert "not retried" not in err and "restarting" not in err
    assert isinstance(events[-1], ev.RunOutcome) and events[-1]["outcome"] == "failed"


def test_a_failed_collect_fails_the_run_in_one_line(tmp_path):
    backend = scripted(ScriptedTasks(default=EXIT_0, collect_error=COLLECT_FAILED))
    code, err, events = _run(tmp_path, backend)
    assert code == 1
    assert "tfcluster: error: host h1: fetching final_model failed: got 10 of 20 bytes; it is still in /s there" in err
    assert "Traceback" not in err
    assert isinstance(events[-1], ev.RunOutcome) and events[-1]["outcome"] == "failed"
