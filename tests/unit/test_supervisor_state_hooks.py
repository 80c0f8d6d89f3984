"""The supervisor calls Backend.prepare_attempt before every attempt and collect_results once
after success, whatever the backend; a LaunchError from either is reported, never a traceback."""

from __future__ import annotations

import io
import json

from launcher.backends.base import Backend, TaskHandle
from launcher.console import Console
from launcher.errors import AttemptImpossible, LaunchError
from launcher.execution import plan_for
from launcher.rundir import RunRecord
from launcher.spec import parse_spec
from launcher.supervisor import Supervisor

SPEC = """\
name: hooks
strategy: multi_worker_mirrored
entrypoint: python -c pass
tasks: {worker: 2}
restart: {max_restarts: 2}
"""


class Done(TaskHandle):
    def poll(self):
        return 0

    def signal(self, sig):
        pass


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, fail_prepare=(), fail_collect=False, impossible=()):
        self.calls: list[str] = []
        self.fail_prepare, self.fail_collect, self.impossible = set(fail_prepare), fail_collect, set(impossible)

    def prepare_attempt(self, number):
        self.calls.append(f"prepare {number}")
        if number in self.fail_prepare:
            raise LaunchError(f"host h2: state copy from h1 failed: No space left on device (attempt {number})")
        if number in self.impossible:
            raise AttemptImpossible("slurm: allocation job 7 was preempted at T; run tfcluster up again to resume")

    def start(self, task, env, on_line):
        self.calls.append(f"start {task.key} {env['TFCLUSTER_RESTART_COUNT']}")
        return Done(task)

    def collect_results(self):
        self.calls.append("collect")
        if self.fail_collect:
            raise LaunchError("host h1: fetching final_model failed: got 10 of 20 bytes; it is still in /s there")


def _run(tmp_path, backend):
    spec = parse_spec(SPEC)
    plan = plan_for(spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    err = io.StringIO()
    code = Supervisor(plan, backend, record, Console(out=io.StringIO(), err=err, color=False), spec.restart,
                      spec.watchdog, poll_interval=0.01).run()
    record.close()
    events = [json.loads(x) for x in (record.dir / "events.jsonl").read_text().splitlines()]
    return code, err.getvalue(), events


def test_prepare_runs_before_every_attempt_and_its_failure_fails_that_attempt(tmp_path):
    backend = FakeBackend(fail_prepare={0})
    code, err, events = _run(tmp_path, backend)
    assert code == 0, err
    assert backend.calls == ["prepare 0", "prepare 1", "start worker:0 1", "start worker:1 1", "collect"]
    assert ("prepare failed: host h2: state copy from h1 failed: No space left on device (attempt 0) "
            "(attempt 1 of 3)") in err
    (failure,) = [e for e in events if e["event"] == "failure"]
    assert failure["task"] == "prepare" and failure["attempt"] == 0


def test_an_impossible_attempt_ends_the_run_at_once_without_spending_restarts(tmp_path):
    backend = FakeBackend(impossible={0})
    code, err, events = _run(tmp_path, backend)
    assert code == 1
    assert backend.calls == ["prepare 0"]  # max_restarts is 2: neither restart is tried
    assert err.splitlines()[0] == ("tfcluster: error: prepare failed: slurm: allocation job 7 was preempted at T; "
                                   "run tfcluster up again to resume (attempt 1 of 3)"), err
    assert "not retried" not in err and "restarting" not in err
    assert events[-1]["event"] == "outcome" and events[-1]["outcome"] == "failed"


def test_a_failed_collect_fails_the_run_in_one_line(tmp_path):
    backend = FakeBackend(fail_collect=True)
    code, err, events = _run(tmp_path, backend)
    assert code == 1
    assert "tfcluster: error: host h1: fetching final_model failed: got 10 of 20 bytes; it is still in /s there" in err
    assert "Traceback" not in err
    assert events[-1]["event"] == "outcome" and events[-1]["outcome"] == "failed"
