"""The run fold (launcher/record/run.py): the run's start, attempts, group size over time and
outcome from its events, the same whether folded at once (``fold_run``: status without progress,
down, compare) or event by event in the view (the live panel, status through the replay), and kept
in a snapshot."""

from __future__ import annotations

import json

import pytest

from launcher.record import events as ev
from launcher.record.run import GroupSize, RunFacts, fold_run
from launcher.record.states import RunState
from launcher.record.view import RunModel

EVENTS = [
    ev.RunStart(time=10.0, run_id="r", name="t", strategy="multi_worker_mirrored", backend="ssh",
                tasks=["worker:0", "worker:1", "worker:2"]),
    ev.Start(time=11.0, task="worker:0", attempt=0), ev.Start(time=11.0, task="worker:1", attempt=0),
    ev.Exit(time=20.0, task="worker:1", attempt=0, code=1),
    ev.GroupRestart(time=21.0, attempt=1, delay=0.0),
    ev.Start(time=22.0, task="worker:0", attempt=1),
    ev.HostLost(time=30.0, host="h2", how="gone", suspect=True, attempt=1, settle=30.0),
    ev.Replan(time=31.0, plan=2, attempt=2, tasks=["worker:0", "worker:1"]),
    ev.Replan(time=50.0, plan=3, attempt=3, tasks=["worker:0", "worker:1", "worker:2"]),
    ev.Start(time=51.0, task="worker:0", attempt=3),
    ev.RunOutcome(time=90.0, outcome="succeeded", exit_code=0, attempts=4, reason=""),
]


def test_the_run_fold_gives_start_attempts_group_sizes_and_outcome():
    run = fold_run(EVENTS)
    assert run.started == 10.0 and run.attempt == 3 and run.attempts == 4
    assert run.group == [GroupSize(10.0, 3, 0), GroupSize(31.0, 2, 2), GroupSize(50.0, 3, 3)]
    assert (run.state, run.exit_code, run.ended, run.last) == (RunState.SUCCEEDED, 0, 90.0, 90.0)
    assert run.goodput is None  # (launcher/record/goodput.py's place)


def test_attempts_are_0_based_indices_and_a_count_before_the_outcome():
    assert fold_run([]).attempts == 0 and fold_run([]).attempt is None and fold_run([]).state is None
    assert fold_run(EVENTS[:3]).attempts == 1
    assert fold_run(EVENTS[:5]).attempts == 2  # a restart begins attempt 1
    lost = ev.RunOutcome(time=99.0, outcome="stopped", attempts=2, ended=40.0)
    run = fold_run([*EVENTS[:6], lost])
    assert run.ended == 40.0 and run.attempts == 2 and run.state == RunState.STOPPED  # written later by down


def test_the_view_folds_the_run_event_by_event_and_a_snapshot_keeps_it():
    view = RunModel()
    for e in EVENTS:
        view.event(e)
    assert view.run == fold_run(EVENTS)
    assert (view.started_at, view.ended_at, view.outcome, view.exit_code) == (10.0, 90.0, "succeeded", 0)
    back = RunModel.from_json(json.loads(json.dumps(view.to_json(), allow_nan=False)))
    assert back.run == view.run


def test_status_folds_the_events_once(tmp_path, monkeypatch):
    """With progress, the replay's view is the one fold (no second task fold over the events)."""
    from launcher.record import status
    from launcher.record.writer import append_event

    run = tmp_path / "t" / "20260101-000000-abcd"
    (run / "logs").mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"name": "t", "backend": "local", "tasks": [
        {"type": "worker", "index": i, "host": "localhost"} for i in range(3)]}))
    for e in EVENTS:
        append_event(run, e)

    def second_fold(*args, **kwargs):
        raise AssertionError("status folded the events a second time")

    monkeypatch.setattr(status, "fold", second_fold)
    monkeypatch.setattr(status, "fold_run", second_fold)
    got = status.load_run(run, alive=lambda pid, st: False)
    assert got.state == RunState.SUCCEEDED and got.attempts == 4 and got.started is not None
    monkeypatch.undo()
    cheap = status.load_run(run, alive=lambda pid, st: False, progress=False)
    assert (cheap.state, cheap.attempts) == (got.state, got.attempts)
    assert [r.state for r in cheap.tasks][:2] == [r.state for r in got.tasks][:2]


@pytest.mark.parametrize("data", [{"started": "x"}, {"group": [{"at": 1}]}])
def test_a_snapshot_whose_run_does_not_read_back_is_not_used(data):
    with pytest.raises((TypeError, ValueError)):
        RunFacts.from_json(data) if "group" in data else _check_started(RunFacts.from_json(data))


def _check_started(run: RunFacts) -> None:
    if not isinstance(run.started, (int, float)):
        raise TypeError("started is not a number")
