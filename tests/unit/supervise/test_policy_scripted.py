"""Restart policy and the startup watchdog as the user reads them, through the real supervisor
against scripted tasks (tests/support/fakes.py): the lines and records that the TensorFlow runs of
tests/integration/test_fault_tolerance.py once checked, where TensorFlow played no part in the
decision (an exit code, a port that never opens). No processes, no wall-clock waits."""

from __future__ import annotations

import re
import signal

from tests.support.fakes import RUN_FOREVER, Script, ScriptedTasks, scripted
from tests.unit.supervise.test_supervisor_scripted import mwms, of, run


def test_exit_1_every_time_is_not_retried_and_says_how_to_retry_it(tmp_path):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=1, polls=2)}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(restarts=3), backend)
    assert code == 1, out
    assert "worker:0 failed: exit code 1 (attempt 1 of 4)" in out, out
    assert ("not retried: an uncaught error in the task (exit 1) fails the same way every time; fix the cause, "
            "or remove 1 from restart.permanent_exit_codes") in out, out
    assert "restarting" not in out
    assert [e["task"] for e in of(events, "start")] == ["worker:0", "worker:1"]  # one attempt
    assert not of(events, "restart") and of(events, "outcome")[0]["outcome"] == "failed"
    assert all(h.code is not None for h in backend.tasks.handles)  # worker:1 stopped, not left running


def test_a_retryable_failure_every_time_gives_up_after_max_restarts_with_each_attempt_in_the_table(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", n): Script(code=137, polls=2) for n in range(3)},
                                     default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(restarts=1), backend)
    assert code == 1, out
    assert "gave up after 2 attempt(s): restart.max_restarts is 1; raise it to retry more" in out, out
    assert backend.tasks.starts("worker:1") == [0, 1]  # max_restarts 1: two attempts, not one, not three
    assert "restarting the whole group (restart 1 of 1)" in out
    table = [line for line in out.splitlines() if "failed: worker:1 killed by SIGKILL (exit 137)" in line]
    assert len(table) == 2 and all(re.match(r"\s+[12]\s", line) for line in table), out
    assert [e["attempt"] for e in of(events, "restart")] == [1]
    assert all(h.code is not None for h in backend.tasks.handles)


def test_a_peer_that_never_starts_is_named_by_the_startup_watchdog(tmp_path):
    """worker:1 runs but never opens its TF port: after watchdog.startup_timeout it is the one
    named, with its address; worker:0, whose port opened, is ready and then stopped."""
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=None, port_after=None)},
                                     default=Script(code=None, port_after=1)))
    code, out, events = run(tmp_path, mwms(restarts=0, startup=25), backend)
    assert code == 1, out
    assert re.search(r"worker:1 failed: never came up: no TF server listening within watchdog.startup_timeout=25 s: "
                     r"worker:1 \(localhost:\d+\)", out), out
    assert [e["task"] for e in of(events, "ready")] == ["worker:0"]
    (failure,) = of(events, "failure")
    assert failure["task"] == "worker:1" and "worker:0 failed" not in out
    assert all(h.code is not None for h in backend.tasks.handles)


def test_an_unused_standby_is_stopped_at_success(tmp_path):
    """warm_standby with a restart allowed: the attempt's standbys start, the run succeeds without
    needing them, and they are stopped (never promoted)."""
    backend = scripted(ScriptedTasks({}, default=Script(code=0, polls=12)), warm_standby=True)
    spec = mwms(restarts=1).replace("backoff: 0}", "backoff: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    kinds = [e["event"] for e in events]
    assert "standby_start" in kinds and kinds.index("standby_stopped") > kinds.index("standby_start"), kinds
    assert "standby_promoted" not in kinds
    standbys = [h for h in backend.tasks.handles if h.standby]
    assert len(standbys) == 2 and all(signal.SIGUSR1 not in h.signals and h.code is not None for h in standbys)


class StoppedTasks(ScriptedTasks):
    """Tasks whose state note (read from /proc on a real host) says ``stopped`` is stopped."""

    def __init__(self, stopped: str, **kw) -> None:
        super().__init__(**kw)
        self.stopped = stopped

    def start(self, task, env, on_line):
        handle = super().start(task, env, on_line)
        handle.state_note = lambda: "process is stopped (SIGSTOP?)" if handle.key == self.stopped else ""
        return handle


def test_the_hang_watchdog_names_a_stopped_task_with_its_state_and_the_group_restarts(tmp_path):
    """worker:0 stops printing (SIGSTOPped) in the first attempt: after watchdog.hang_timeout it
    alone is named, with what its process state says, and the group's one restart is taken."""
    tasks = StoppedTasks("worker:0", scripts={("worker:0", 0): Script(code=None, silent=True),
                                              ("worker:1", 0): RUN_FOREVER}, default=Script(code=0, polls=3))
    code, out, events = run(tmp_path, mwms(restarts=1, hang=12), scripted(tasks))
    assert code == 0, out
    failed = [line for line in out.splitlines() if " failed: " in line and "error:" in line]
    assert len(failed) == 1 and failed[0].split("worker:0 failed: ", 1)[1].startswith(
        "hung: no progress for 12 s (watchdog.hang_timeout); process is stopped (SIGSTOP?)"), out
    assert "restarting the whole group (restart 1 of 1)" in out
    assert tasks.starts("worker:0") == tasks.starts("worker:1") == [0, 1]
