"""What a run's events say to a person (launcher/ui/eventlines.py): the one renderer the live
console, ``attach`` and the final report share. The supervisor writes events and prints nothing;
the console is a listener on its record, and a replay of the record through the same renderer says
the same lines."""

from __future__ import annotations

import io

from launcher.record import events as ev
from launcher.record.feed import RecordFeed
from launcher.record.noise import TAIL
from launcher.record.view import RunModel
from launcher.ui.console import Console
from launcher.ui.eventlines import BLOCK, ERROR, INFO, REPORT, said
from launcher.ui.failurelines import failure_block
from tests.support.fakes import Counter, Script, ScriptedTasks, scripted, supervise

NOISE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def _view(max_restarts: int = 2) -> RunModel:
    view = RunModel()
    view.event(ev.RunStart(run_id="r", name="t", strategy="multi_worker_mirrored", backend="local",
                           tasks=["worker:0", "worker:1"], run_dir="/runs/t/r", max_restarts=max_restarts,
                           hosts=["localhost"], time=1000.0))
    return view


def _lines(event, view=None, verbose=False) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.how, s.lines) for s in said(event, view or _view(), verbose)]


def test_the_supervisors_steps_and_verdicts_read_as_they_always_did():
    assert _lines(ev.StopRequested()) == [(INFO, ("stopping every task (Ctrl-C again to kill at once)",))]
    assert _lines(ev.TasksStopping(tasks=["worker:0", "worker:1"], grace=0.0)) == [
        (INFO, ("stopping worker:0, worker:1 (SIGKILL)",))]
    assert _lines(ev.TasksStopping(tasks=["worker:0"], grace=5.0)) == [
        (INFO, ("stopping worker:0 (SIGTERM, SIGKILL after 5 s)",))]
    assert _lines(ev.TasksStopping(tasks=["worker:0"], grace=10.0, save_look=0.5)) == [
        (INFO, ("stopping worker:0 (SIGTERM; a save they start within 0.5 s is awaited, up to "
                "watchdog.stop_grace=10 s; else SIGKILL)",))]
    assert _lines(ev.GroupRestart(attempt=2, restart=1, max_restarts=2, delay=1.5, ports={"worker:0": 1})) == [
        (INFO, ("restarting the whole group (restart 1 of 2) on fresh ports in 1.5 s",))]
    assert _lines(ev.GroupRestart(attempt=1)) == []  # (a record without the count: nothing to say)
    assert _lines(ev.GaveUp(task="worker:0", reason="exit code 1 is permanent")) == [
        (ERROR, ("worker:0: exit code 1 is permanent",))]
    assert _lines(ev.GaveUp(task="worker:0", reason="x", final=True)) == []  # (its failure's line said it)
    assert _lines(ev.TaskRestart(task="evaluator:0", code=1, restart=1, max_restarts=3, sidecar=True)) == [
        (INFO, ("evaluator:0 (sidecar) exited (exit code 1); restarting it alone (1 of 3), training goes on",))]
    assert _lines(ev.Straggler(task="worker:1")) == [(INFO, ("worker:1 caught up with the others",))]
    assert _lines(ev.StandbyFailed(task="worker:0", stage=ev.StandbyFailed.ANSWER, why="no 'x' line",
                                   within=10.0)) == [
        (INFO, ("worker:0: its warm standby did not answer the promotion within 10 s (no 'x' line); "
                "starting it cold",))]
    one = _lines(ev.StandbyNoRoom(free={"h1": 2**30}, processes={"h1": 2}, each=600 * 2**20, reserve=2**30))
    assert one == [(INFO, ("warm standby: none on h1: 1.0 GB available, under the 2.2 GB its 2 standby process(es) "
                           "and a reserve need; its restarts are cold",))]
    many = _lines(ev.StandbyNoRoom(free={"h1": 2**30, "h2": 2**29}, processes={"h1": 2, "h2": 1}, each=600 * 2**20,
                                   reserve=2**30))
    assert len(many) == 1 and many[0][1][0].startswith("warm standby: none on 2 hosts (h1, h2): ")
    # A plan's host lost is said by the replan (or the wait), a spare's by its own line.
    assert _lines(ev.HostLost(host="h2", how="gone", suspect=False)) == []
    assert _lines(ev.HostLost(host="h3", how="session lost at 12:00:00, host not answering; suspect until it answers "
                                           "for 30 s", suspect=True, spare=True)) == [
        (INFO, ("h3: session lost at 12:00:00, host not answering; suspect until it answers for 30 s; no task moves "
                "there until then",))]
    assert _lines(ev.Start(task="worker:0")) == [] and _lines(ev.Ready(task="worker:0")) == []


def test_a_failure_says_its_line_its_consequences_and_its_report_and_a_host_loss_says_nothing():
    failure = ev.Failure(task="worker:1", attempt=0, reason="exit code 3", code=3, max_restarts=2,
                         consequences={"worker:0": 1}, others=["chief:0"], errors=["ValueError: bad"],
                         tails={"worker:1": ["ValueError: bad"], "worker:0": ["peer lost"]},
                         peer_errors={"worker:0": []}, peer_hints={"worker:0": "a hint"})
    got = _lines(failure)
    assert got[0] == (ERROR, ("worker:1 failed: exit code 3 (attempt 1 of 3)",))
    assert got[1][0] == INFO and got[1][1][0].startswith("worker:0 exited (exit code 1) as a consequence of worker:1")
    assert got[2] == (BLOCK, ("  worker:1: ValueError: bad", "  last lines of worker:1 (/runs/t/r/logs/worker-1.log):",
                              "  | ValueError: bad", "  hint: a hint",
                              "  last lines of worker:0 (/runs/t/r/logs/worker-0.log):", "  | peer lost"))
    assert got[3] == (INFO, ("also failed: chief:0",))
    assert _lines(ev.Failure(task="worker:1", reason="x", host_loss=True)) == []


def test_a_failures_last_lines_leave_the_noise_out_unless_verbose_and_the_record_keeps_both():
    from launcher.record.noise import report_tail

    tail = [f"line {i}" for i in range(30)] + [NOISE] * 3 + ["Traceback (most recent call last):",
                                                               "ValueError: bad input"]
    kept = report_tail(tail)
    assert kept == tail[-(TAIL + 3):]  # back to the 15th line that is not noise
    failure = ev.Failure(task="worker:0", reason="r", errors=["ValueError: bad input"], tails={"worker:0": kept})
    quiet, loud = failure_block(failure, "/r", verbose=False), failure_block(failure, "/r", verbose=True)
    assert quiet[0] == "  worker:0: ValueError: bad input" and quiet[-1] == "  | ValueError: bad input"
    shown = [x[4:] for x in quiet if x.startswith("  | ")]
    assert shown == [x for x in tail if x != NOISE][-TAIL:]
    assert [x[4:] for x in loud if x.startswith("  | ")] == tail[-TAIL:]
    assert failure_block(ev.Failure(task="worker:0", reason="r"), "/r", verbose=True) == []


def test_the_outcome_says_the_final_report_and_the_runs_last_line():
    view = _view()
    view.event(ev.AttemptEnded(attempt=0, began=1000.0, ended=1012.5, state="failed", task="worker:1",
                               reason="exit code 137", time=1012.5))
    view.event(ev.AttemptEnded(attempt=1, began=1013.0, ended=1020.0, state="succeeded", time=1020.0))
    outcome = ev.RunOutcome(outcome="succeeded", attempts=2, locations={"state dir": "/s", "task logs": "/l"},
                            time=1021.0)
    view.event(outcome)
    (report, last) = said(outcome, view, now=1021.0)
    assert report.how == REPORT and (last.how, last.lines) == (INFO, ("run succeeded after 2 attempt(s); record: "
                                                                      "/runs/t/r",))
    rows = [line for line in report.lines if line.strip().startswith(("1 ", "2 "))]
    assert "12.5s" in rows[0] and "failed: worker:1 exit code 137" in rows[0] and rows[1].endswith("succeeded")
    assert report.lines[-2:] == ("  state dir: /s", "  task logs: /l")
    # `down` of a run whose supervisor is gone writes its outcome: no report of the supervisor's.
    assert said(ev.RunOutcome(outcome="stopped"), view) == []


SPEC = """\
    name: s
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 2}
    restart: {max_restarts: 2, backoff: 0}
    watchdog: {startup_timeout: 1000, hang_timeout: 0, stop_grace: 0}
"""


def test_a_replay_of_the_record_says_what_the_runs_own_console_said(tmp_path):
    """The supervisor's console is a listener on its record; ``attach`` is one on the feed of the
    same record: a failed attempt, a restart and the final report read the same either way."""
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=2, say=((1, "Traceback (most recent call "
                                                                                       "last):"), (1, "OSError: x"))),
                                      ("worker:0", 0): Script(code=None)},
                                     default=Script(code=0, polls=3)))
    result = supervise(tmp_path, SPEC, backend, clock=Counter())
    assert result.code == 0, result.console
    run_dir = next((tmp_path / "runs" / "s").glob("2*"))
    err = io.StringIO()
    feed = RecordFeed(run_dir, RunModel())
    feed.listeners.append(Console(out=io.StringIO(), err=err, color=False).saying(feed.view))
    feed.poll()
    live = result.err.splitlines()
    assert "tfcluster: error: worker:1 failed: killed by SIGKILL (exit 137) (attempt 1 of 3)" in live, live
    assert "tfcluster: restarting the whole group (restart 1 of 2)" in live
    assert any(line.startswith("tfcluster: run succeeded after 2 attempt(s); record: ") for line in live)
    assert err.getvalue().splitlines() == live


def test_a_hangs_failure_shows_the_culprits_stacks_its_user_code_first_instead_of_its_last_lines():
    stack = ["Thread 0x0001 (most recent call first):",
             '  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute',
             "",
             "Current thread 0x0002 (most recent call first):",
             '  File "/home/me/train.py", line 12 in slow_generator',
             '  File "/venv/lib/python3.11/site-packages/tensorflow/python/data/ops/dataset_ops.py", line 9 in gen']
    failure = ev.Failure(task="worker:1", attempt=1, reason="hung", stack=stack, tails={"worker:1": ["x"]})
    assert failure_block(failure, "/r", verbose=False) == [
        "  stacks of worker:1 (/r/stacks/2/worker-1.txt):",
        "  | thread 0x0002 (in user code)",
        "  |   /home/me/train.py:12 in slow_generator",
        "  |   /venv/lib/python3.11/site-packages/tensorflow/python/data/ops/dataset_ops.py:9 in gen",
        "  | thread 0x0001",
        "  |   /venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py:53 in quick_execute"]
