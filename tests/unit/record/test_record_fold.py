"""The task state machine (launcher/record/fold.py): each documented transition, from event lists,
and the live panel's RunModel agreeing with the fold ``status`` uses on any sequence of events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from launcher.record import fold as machine
from launcher.record.events import RunRecordDamaged, parse_event
from launcher.contract.progress import parse
from launcher.record.fold import TaskLife, lose, on_line
from launcher.record.view import RunModel

KEYS = ("worker:0", "worker:1")


def fold(events, keys=()):
    """The fold of events written as events.jsonl's lines (each parsed as record/reader.py does)."""
    return machine.fold([parse_event(e) for e in events], keys)


def step(tasks, event, new):
    return machine.step(tasks, parse_event(event), new)


def _states(tasks):
    return {k: t.state for k, t in tasks.items()}


def test_a_healthy_task_starts_runs_and_succeeds():
    events = [{"event": "run_start", "tasks": list(KEYS)}]
    assert _states(fold(events, KEYS)) == {"worker:0": "pending", "worker:1": "pending"}
    events.append({"event": "start", "task": "worker:0", "attempt": 0, "host": "h1"})
    t = fold(events, KEYS)["worker:0"]
    assert (t.state, t.host, t.attempt, t.starts) == ("starting", "h1", 0, 1)  # (0-based, as the record)
    events.append({"event": "ready", "task": "worker:0", "attempt": 0})
    assert fold(events, KEYS)["worker:0"].state == "running"
    events.append({"event": "exit", "task": "worker:0", "attempt": 0, "code": 0})
    done = fold(events, KEYS)
    assert (done["worker:0"].state, done["worker:0"].exit_code, done["worker:1"].state) == ("succeeded", 0, "pending")


def test_attempt_ready_moves_only_the_starting_tasks_of_that_attempt():
    events = [{"event": "start", "task": "worker:0", "attempt": 1}, {"event": "start", "task": "worker:1", "attempt": 1},
              {"event": "exit", "task": "worker:1", "code": 3}, {"event": "attempt_ready", "attempt": 0}]
    assert _states(fold(events, KEYS)) == {"worker:0": "starting", "worker:1": "failed"}
    events.append({"event": "attempt_ready", "attempt": 1})
    assert _states(fold(events, KEYS)) == {"worker:0": "running", "worker:1": "failed"}


def test_a_failure_names_the_task_and_a_later_stop_does_not_undo_it():
    events = [{"event": "start", "task": "worker:0", "attempt": 0}, {"event": "ready", "task": "worker:0"},
              {"event": "failure", "task": "worker:0", "reason": "no progress for 30 s"},
              {"event": "stopped", "task": "worker:0", "code": -15}]
    t = fold(events)["worker:0"]
    assert (t.state, t.reason, t.exit_code) == ("failed", "no progress for 30 s", None)


def test_stopped_ends_a_live_task_but_not_one_that_exited():
    events = [{"event": "start", "task": k, "attempt": 0} for k in KEYS] + [
        {"event": "exit", "task": "worker:1", "code": 137},
        {"event": "stopped", "task": "worker:0", "code": -15}, {"event": "stopped", "task": "worker:1", "code": None}]
    tasks = fold(events, KEYS)
    assert [(t.state, t.exit_code) for t in tasks.values()] == [("stopped", -15), ("failed", 137)]


def test_a_restart_then_a_start_clears_the_last_exit():
    events = [{"event": "start", "task": k, "attempt": 0} for k in KEYS] + [
        {"event": "exit", "task": "worker:0", "code": 1},
        {"event": "failure", "task": "worker:0", "reason": "exit code 1"},
        {"event": "stopped", "task": "worker:1", "code": -15}, {"event": "restart", "attempt": 1}]
    tasks = fold(events, KEYS)
    assert _states(tasks) == {"worker:0": "restarting", "worker:1": "restarting"} and tasks["worker:0"].exit_code == 1
    events.append({"event": "start", "task": "worker:0", "attempt": 1, "host": "h2"})
    t = fold(events, KEYS)["worker:0"]
    assert (t.state, t.attempt, t.starts, t.exit_code, t.reason, t.host) == ("starting", 1, 2, None, "", "h2")


def test_a_task_restarted_alone_and_a_ready_after_an_exit():
    events = [{"event": "start", "task": "worker:0", "attempt": 0}, {"event": "exit", "task": "worker:0", "code": 0},
              {"event": "ready", "task": "worker:0"}]
    assert fold(events)["worker:0"].state == "succeeded"  # (a late ready revives nothing)
    events.append({"event": "task_restart", "task": "worker:0", "code": 1})
    assert fold(events)["worker:0"].state == "restarting"


def test_the_outcome_stops_what_had_not_ended():
    events = [{"event": "start", "task": "worker:0", "attempt": 0}, {"event": "start", "task": "worker:1", "attempt": 0},
              {"event": "ready", "task": "worker:1"}, {"event": "start", "task": "chief:0", "attempt": 0},
              {"event": "exit", "task": "chief:0", "code": 0}, {"event": "task_restart", "task": "worker:1"},
              {"event": "outcome", "outcome": "interrupted"}]
    tasks = fold(events, ("ps:0",))
    assert _states(tasks) == {"ps:0": "pending", "worker:0": "stopped", "worker:1": "stopped", "chief:0": "succeeded"}


def test_a_lost_supervisors_task_is_gone_only_when_its_process_is():
    events = [{"event": "start", "task": k, "attempt": 0} for k in KEYS] + [{"event": "ready", "task": "worker:1"}]
    tasks = fold(events, KEYS)
    lose(tasks["worker:0"], alive=True)
    lose(tasks["worker:1"], alive=False)
    assert _states(tasks) == {"worker:0": "starting", "worker:1": "gone"}
    ended = fold(events + [{"event": "exit", "task": "worker:0", "code": 2}], KEYS)["worker:0"]
    lose(ended, alive=False)
    assert ended.state == "failed"


def test_output_lines_give_a_live_task_its_phase():
    t = TaskLife("worker:0")
    on_line(t, None)
    assert (t.state, t.phase, t.shown) == ("pending", "", "pending")  # (not started: no phase)
    step({"worker:0": t}, {"event": "start", "task": "worker:0"}, TaskLife)
    on_line(t, None)
    assert (t.state, t.phase, t.shown) == ("starting", "importing", "importing")
    step({"worker:0": t}, {"event": "ready", "task": "worker:0"}, TaskLife)
    assert (t.state, t.phase, t.shown) == ("running", "", "running")
    on_line(t, parse("tfcluster-step epoch=0 step=1"))
    assert (t.state, t.shown) == ("running", "training")
    on_line(t, parse("tfcluster-eval_donee x=1"))  # a kind it does not know: no change
    assert t.shown == "training"
    on_line(t, parse("tfcluster-eval checkpoint=ckpt-1"))
    assert t.shown == "evaluating"
    step({"worker:0": t}, {"event": "exit", "task": "worker:0", "code": 0}, TaskLife)
    on_line(t, parse("tfcluster-step epoch=0 step=1"))
    assert (t.state, t.shown) == ("succeeded", "succeeded")
    ps = TaskLife("ps:0")
    step({"ps:0": ps}, {"event": "start", "task": "ps:0"}, TaskLife)
    on_line(ps, parse("tfcluster-server task=ps:0"))  # a parameter-server task's server line: its port is up
    assert (ps.state, ps.shown) == ("running", "running")


def test_other_kinds_change_nothing_and_damaged_values_never_reach_the_fold():
    events = [{"event": "start", "task": "worker:0"}, {"event": "gpu_usage", "tasks": {}},
              {"event": "host_lost", "host": "worker:0"}, {"event": "a_newer_kind", "task": "worker:0", "code": 1}]
    t = fold(events)["worker:0"]
    assert (t.state, t.attempt, t.host, t.exit_code) == ("starting", 0, "", None)
    # (the reader refuses them as damaged, in one line, before any fold: test_hostile_inputs.py)
    for bad in ({"event": "start", "task": "worker:0", "attempt": "x", "host": 7}, {"event": "exit", "task": 3, "code": 1},
                {"event": "exit", "task": "worker:0", "code": "y"}, {"event": "stopped", "task": "worker:0", "code": [1]}):
        with pytest.raises(RunRecordDamaged):
            fold(events + [bad])


EVENT = st.one_of(
    st.fixed_dictionaries({"event": st.sampled_from(["start", "ready", "exit", "stopped", "failure", "task_restart"]),
                           "task": st.sampled_from(KEYS), "attempt": st.integers(0, 2),
                           "code": st.one_of(st.none(), st.integers(-15, 3)), "host": st.sampled_from(["h1", "h2"])}),
    st.fixed_dictionaries({"event": st.sampled_from(["restart", "attempt_ready", "outcome", "gpu_usage"]),
                           "attempt": st.integers(0, 2)}),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(EVENT, max_size=25), st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(
    ["plain", "tfcluster-step epoch=0 step=1 global_step=1", "tfcluster-eval global_step=1"])), max_size=5))
def test_the_live_panel_and_status_fold_agree_on_every_sequence(events, lines):
    """RunModel (the panel, the report) and fold (``status``) are one machine: the same events give
    every task the same state, attempt, starts, exit code, reason and host, whatever lines came."""
    view = RunModel()
    view.event({"event": "run_start", "tasks": list(KEYS)})
    for i, e in enumerate(events):
        view.event(e)
        for key, text in lines[i:i + 1]:
            (view.progress if text.startswith("tfcluster-") else view.line)(key, text, 1.0)
    folded = fold(events, KEYS)
    facts = ("state", "attempt", "starts", "exit_code", "reason", "host")
    assert {k: tuple(getattr(t, f) for f in facts) for k, t in view.tasks.items()} == \
        {k: tuple(getattr(t, f) for f in facts) for k, t in folded.items()}
