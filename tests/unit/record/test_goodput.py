"""The goodput fold (launcher/record/goodput.py) on scripted records: events as events.jsonl holds
them and the progress task's lines as the worker prints them, each with its own time."""

from __future__ import annotations

import pytest

from launcher.contract.progress import format_line, parse
from launcher.record.events import parse_event
from launcher.record.goodput import CATEGORIES, Marks, measure
from launcher.record.run import RunFacts


class Run:
    """A scripted run: ``ev`` an event at a time, ``say`` a line of a task (its ``time=`` field)."""

    def __init__(self) -> None:
        self.marks, self.facts = Marks(), RunFacts()
        self.ev("run_start", 0.0, tasks=["worker:0", "worker:1"])

    def ev(self, kind: str, at: float, **fields) -> "Run":
        event = parse_event({"event": kind, "time": at, **fields})
        self.facts.apply(event)
        self.marks.event(event, self.facts)
        return self

    def say(self, key: str, kind: str, at: float, **fields) -> "Run":
        self.marks.line(key, parse(format_line(kind, **fields, time=f"{at:.3f}")))
        return self

    def attempt(self, n: int, at: float) -> "Run":
        for key in ("worker:0", "worker:1"):
            self.ev("start", at, task=key, attempt=n)
        return self

    def train(self, key: str, restored: int, t_start: float, t_first: float, upto: int, t_last: float,
              every: int = 10) -> "Run":
        """Steps restored+1 .. upto, evenly between t_first and t_last, a step line every ``every``."""
        self.say(key, "start", t_start, epoch=0, step=0, global_step=restored)
        self.say(key, "first_step", t_first, epoch=0, step=0, global_step=restored + 1)
        per = (t_last - t_first) / (upto - restored - 1)
        for g in range(restored + 2, upto + 1):
            if g % every == 0 or g == upto:
                self.say(key, "step", t_first + (g - restored - 1) * per, epoch=0, step=g, global_step=g)
        return self

    def measure(self, now: float = 1e9):
        g = measure(self.marks, now)
        assert g is not None
        total = g.productive + sum(g.badput.values())
        assert total == pytest.approx(g.elapsed, abs=1e-6), "the categories sum to elapsed"
        assert set(g.badput) == set(CATEGORIES)
        return g


def test_a_clean_run_is_startup_productive_and_the_rest():
    run = Run().attempt(0, 0.1).ev("attempt_ready", 1.0, attempt=0)
    run.train("worker:0", 0, 2.0, 3.0, 101, 13.0)
    g = run.ev("exit", 14.0, task="worker:0", attempt=0, code=0).ev("outcome", 15.0, outcome="succeeded").measure()
    assert g.elapsed == pytest.approx(15.0)
    assert g.productive == pytest.approx(10.0)
    assert g.badput["startup"] == pytest.approx(3.0)
    assert g.badput["recovery"] == 0 and g.badput["redone"] == 0 and g.badput["waiting"] == 0
    assert g.badput["other"] == pytest.approx(2.0)
    assert g.exact and g.fraction == pytest.approx(10 / 15)
    assert g.line().startswith("goodput 66.7 %: startup 20.0 %, other 13.3 %")


def test_a_killed_worker_costs_recovery_and_the_steps_trained_again():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)  # 0.1 s a step
    run.ev("exit", 8.5, task="worker:1", attempt=0, code=137).ev("failure", 8.6, task="worker:1", attempt=0)
    run.ev("restart", 8.7, attempt=1).attempt(1, 8.8)
    run.train("worker:0", 40, 10.0, 11.0, 101, 17.0)
    g = run.ev("outcome", 18.0, outcome="succeeded").measure()
    assert g.badput["recovery"] == pytest.approx(11.0 - 8.5)
    # steps 41..51 again (11 steps at 0.1 s), and 8.0 -> 8.5 trained after the last line, lost
    assert g.badput["redone"] == pytest.approx(11 * 0.1 + 0.5, abs=0.01)
    assert g.productive == pytest.approx(5.0 + 6.0 - 1.1, abs=0.01)
    assert g.badput["startup"] == pytest.approx(3.0)


def test_a_preemption_with_an_agreed_save_redoes_nothing():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("host_preempted", 8.1, host="vm2")
    run.say("worker:0", "saving", 8.2, epoch=0, step=52, global_step=52)
    run.say("worker:0", "backup", 8.5, global_step=52, seconds="0.3")  # (the agreed save's own backup)
    run.say("worker:0", "preempted", 8.6, epoch=0, step=52, global_step=52)
    run.ev("host_lost", 8.7, host="vm2", attempt=0).ev("replan", 9.0, attempt=1).attempt(1, 9.1)
    run.train("worker:0", 52, 10.0, 11.0, 101, 16.0)
    g = run.ev("outcome", 17.0, outcome="succeeded").measure()
    assert g.badput["redone"] == 0
    assert g.badput["checkpoint"] == pytest.approx(0.4)
    assert g.productive == pytest.approx(5.2 + 5.0)  # (it trained on to the agreed step: 8.0 -> 8.2)
    assert g.badput["recovery"] == pytest.approx(11.0 - 8.6)


def test_a_spare_lost_and_back_while_the_group_trains_costs_nothing():
    """A hot spare's loss (host_lost ``spare``: only its warm standbys were there) is no fault of
    the training: the attempt goes on, as productive as without it."""
    run = Run().attempt(0, 0.1)
    run.say("worker:0", "start", 2.0, global_step=0).say("worker:0", "first_step", 3.0, global_step=1)
    run.ev("host_lost", 5.0, host="vm3", attempt=0, suspect=True, spare=True, how="a spare: ...")
    run.say("worker:0", "step", 8.0, global_step=50)
    run.ev("host_added", 9.0, host="vm3", attempt=0)
    run.say("worker:0", "step", 13.0, global_step=101)
    g = run.ev("outcome", 14.0, outcome="succeeded").measure()
    assert g.productive == pytest.approx(10.0)
    assert g.badput["recovery"] == 0 and g.badput["waiting"] == 0 and g.badput["redone"] == 0


def test_a_spare_lost_earlier_in_an_attempt_does_not_move_its_fault():
    """A spare's loss, then the group's own failure later in the same attempt: the attempt's useful
    work ends at that failure (what it trained after its last step line is redone, not recovery),
    not at the spare's loss, and the spare's time away is no wait of the group's."""
    run = Run().attempt(0, 0.1)
    run.say("worker:0", "start", 2.0, global_step=0).say("worker:0", "first_step", 3.0, global_step=1)
    run.ev("host_lost", 5.0, host="vm3", attempt=0, suspect=True, spare=True, how="a spare: ...")
    run.say("worker:0", "step", 8.0, global_step=50)
    run.ev("host_added", 9.0, host="vm3", attempt=0, spare=False)  # (back: a spare again)
    run.say("worker:0", "step", 13.0, global_step=100).say("worker:0", "step", 19.0, global_step=160)
    run.ev("exit", 19.5, task="worker:1", attempt=0, code=137).ev("failure", 19.6, task="worker:1", attempt=0)
    run.ev("restart", 20.0, attempt=1).attempt(1, 20.5)
    run.say("worker:0", "start", 22.0, global_step=100).say("worker:0", "first_step", 23.0, global_step=101)
    run.say("worker:0", "step", 30.0, global_step=170)
    g = run.ev("outcome", 31.0, outcome="succeeded").measure()
    rate = (16.0 + 7.0) / (159 + 69)  # the run's seconds a step
    assert g.badput["recovery"] == pytest.approx(23.0 - 19.5)  # from the failure, not from 19.0 (nor 5.0)
    assert g.badput["redone"] == pytest.approx(60 * rate + 0.5)  # steps 101..160 and 19.0 -> 19.5
    assert g.badput["waiting"] == 0


def test_backups_while_training_are_checkpoint_time():
    run = Run().attempt(0, 0.1)
    run.say("worker:0", "start", 2.0, global_step=0).say("worker:0", "first_step", 3.0, global_step=1)
    for at, step in ((5.0, 30), (8.0, 60), (11.0, 90)):
        run.say("worker:0", "backup", at, global_step=step, seconds="0.25")
        run.say("worker:0", "step", at + 0.5, global_step=step + 5)
    run.say("worker:0", "step", 13.0, global_step=101)
    g = run.ev("outcome", 14.0, outcome="succeeded").measure()
    assert g.badput["checkpoint"] == pytest.approx(0.75)
    assert g.productive == pytest.approx(10.0 - 0.75)


def test_a_shrink_then_a_grow():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("host_lost", 8.5, host="vm2", attempt=0).ev("replan", 9.0, attempt=1, lost=["vm2"]).attempt(1, 9.1)
    run.train("worker:0", 50, 10.0, 11.0, 81, 14.0)
    run.ev("host_added", 14.5, host="vm2", attempt=1)  # a spare again: the group grows at an agreed save
    run.say("worker:0", "saving", 14.6, epoch=0, step=82, global_step=82)
    run.say("worker:0", "preempted", 15.0, epoch=0, step=82, global_step=82)
    run.ev("replan", 15.5, attempt=2).attempt(2, 15.6)
    run.train("worker:0", 82, 16.0, 17.0, 121, 21.0)
    g = run.ev("outcome", 22.0, outcome="succeeded").measure()
    assert g.badput["recovery"] == pytest.approx(11.0 - 8.5)  # the shrink: a fault
    assert g.badput["redone"] == pytest.approx(0.1 + 0.5, abs=0.01)  # step 51 again, 8.0 -> 8.5 lost
    assert g.badput["checkpoint"] == pytest.approx(0.4)
    assert g.badput["startup"] == pytest.approx(3.0 + (17.0 - 15.5))  # the grow: a planned restart
    assert g.badput["other"] == pytest.approx(0.5 + 1.0)  # 15.0 -> 15.5 stopping, the end


def test_below_min_the_group_waits_for_its_host():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("host_lost", 8.5, host="vm2", attempt=0)
    run.ev("host_added", 20.0, host="vm2", attempt=0, settle=2.0, spare=False).attempt(1, 20.1)
    run.train("worker:0", 50, 21.0, 22.0, 101, 27.0)
    g = run.ev("outcome", 28.0, outcome="succeeded").measure()
    assert g.badput["waiting"] == pytest.approx(20.0 - 8.5)
    assert g.badput["recovery"] == pytest.approx(22.0 - 20.0)


def test_a_script_without_step_lines_gets_an_upper_bound():
    run = Run().attempt(0, 0.1).ev("attempt_ready", 2.0, attempt=0)
    run.ev("exit", 6.0, task="worker:1", attempt=0, code=137).ev("restart", 6.2, attempt=1).attempt(1, 6.3)
    run.ev("attempt_ready", 8.0, attempt=1)
    g = run.ev("outcome", 12.0, outcome="succeeded").measure()
    assert not g.exact
    assert g.badput["startup"] == pytest.approx(2.0)
    assert g.badput["recovery"] == pytest.approx(2.0)
    assert g.productive == pytest.approx(8.0)
    assert g.line().startswith("goodput at most 66.7 %") and g.short() == "<=66.7 %"


def test_a_run_whose_tasks_never_opened_their_ports_is_bounded_from_their_start():
    # Seen on a real H100 (bench/gpu_check-h100.log): probes that compute on the GPU without a
    # cluster server print no step lines and open no port; the bound was "at most 0.0 %", below
    # what they trained. An ended attempt trained at most from its last task's start.
    run = Run().attempt(0, 0.5).ev("exit", 10.0, task="worker:0", attempt=0, code=0)
    run.ev("exit", 10.5, task="worker:1", attempt=0, code=0)
    live = run.measure(now=8.0)
    assert live.productive == 0 and live.badput["startup"] == pytest.approx(8.0)  # running: still starting
    g = run.ev("outcome", 11.0, outcome="succeeded").measure()
    assert not g.exact
    assert g.badput["startup"] == pytest.approx(0.5)
    assert g.productive == pytest.approx(11.0 - 0.5)
    assert g.line().startswith("goodput at most 95.5 %")
    # An attempt that failed before opening its ports showed no sign of training (a usage error at
    # start-up): none of it is bounded as training; the next attempt is, from its own sign.
    run = Run().attempt(0, 0.5).ev("exit", 3.0, task="worker:1", attempt=0, code=2)
    run.ev("restart", 3.2, attempt=1).attempt(1, 4.0).ev("attempt_ready", 5.0, attempt=1)
    g = run.ev("outcome", 9.0, outcome="succeeded").measure()
    assert g.productive == pytest.approx(9.0 - 5.0)
    assert g.badput["startup"] + g.badput["recovery"] == pytest.approx(5.0)
    failed = Run().attempt(0, 0.5).ev("exit", 2.5, task="worker:1", attempt=0, code=2)
    g = failed.ev("outcome", 2.6, outcome="failed").measure()
    assert g.productive == 0 and g.line().startswith("goodput at most 0.0 %"), g.line()  # (seen on slurm: "at most 95.4 %")
    assert Marks.from_json(run.marks.to_json()).launched == run.marks.launched


def test_live_recovery_while_the_group_restarts():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("exit", 8.5, task="worker:1", attempt=0, code=137).ev("restart", 8.7, attempt=1).attempt(1, 8.8)
    g = run.measure(now=10.0)
    assert g.elapsed == pytest.approx(10.0)
    assert g.badput["recovery"] == pytest.approx(1.5)


def test_the_marks_survive_json():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("host_lost", 8.5, host="vm2", attempt=0).ev("host_added", 9.0, host="vm2", spare=False)
    again = Marks.from_json(run.marks.to_json())
    assert measure(again, 10.0) == measure(run.marks, 10.0)
    assert again.to_json() == run.marks.to_json()


def test_a_backup_after_the_last_step_line_is_checkpoint_time_too():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 101, 13.0)
    run.say("worker:0", "backup", 13.5, global_step=101, seconds="0.5")
    g = run.ev("outcome", 15.0, outcome="succeeded").measure()
    assert g.badput["checkpoint"] == pytest.approx(0.5)
    assert g.productive == pytest.approx(10.0)
    assert g.badput["other"] == pytest.approx(1.5)


def _trained_view():
    from launcher.record.view import RunModel

    view = RunModel()
    view.event({"event": "run_start", "time": 1000.0, "name": "demo", "strategy": "multi_worker_mirrored",
                "backend": "local", "tasks": ["worker:0"], "max_restarts": 2})
    view.event({"event": "start", "time": 1000.1, "task": "worker:0", "attempt": 0})
    view.progress_lines("worker:0", ["tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 time=1002.000",
                            "tfcluster-first_step epoch=0 step=0 global_step=1 time=1003.000",
                            "tfcluster-step epoch=0 step=10 global_step=10 time=1004.000",
                            "tfcluster-step epoch=0 step=20 global_step=20 time=1005.000",
                            "tfcluster-step epoch=0 step=30 global_step=30 time=1013.000"], now=2000.0)
    return view


def test_the_view_folds_goodput_from_its_lines_own_times_and_the_panel_shows_it():
    import io

    from rich.console import Console as RichConsole

    from launcher.record.view import RunModel
    from launcher.ui.panel import render
    from launcher.ui.report import goodput_lines

    view = _trained_view()
    g = view.goodput(1015.0)  # (the lines' own times, not when the replay read them: 2000)
    assert g.productive == pytest.approx(10.0) and g.badput["startup"] == pytest.approx(3.0)
    console = RichConsole(file=io.StringIO(), width=160, force_terminal=False, color_system=None)
    console.print(render(view.snapshot(), 1015.0, 160))
    assert console.file.getvalue().splitlines()[0].endswith("goodput 66.7 %")
    view.event({"event": "outcome", "time": 1015.0, "outcome": "succeeded"})
    assert goodput_lines(view, 5000.0) == ["  goodput 66.7 %: startup 20.0 %, other 13.3 %"]
    again = RunModel.from_json(view.to_json())  # (a snapshot's view goes on from its marks)
    assert again.goodput(5000.0) == view.goodput(5000.0)


def test_a_script_printing_only_step_lines_is_measured_exactly():
    run = Run().attempt(0, 0.1)
    for g in range(1, 11):  # `tfcluster-step global_step=N time=T`, once a second from t=3
        run.say("worker:0", "step", 2.0 + g, global_step=g)
    g = run.ev("outcome", 14.0, outcome="succeeded").measure()
    assert g.exact and g.productive == pytest.approx(9.0) and g.badput["startup"] == pytest.approx(3.0)


def test_status_runs_and_their_json_read_the_goodput_from_the_record(tmp_path):
    import json

    from launcher.cli.inspect import runs_json
    from launcher.record.status import load_run
    from launcher.ui.runstatus import render_runs, render_status

    run = tmp_path / "runs" / "t" / "20260101-000000-abcd"
    (run / "logs").mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"name": "t", "backend": "local", "tasks": [
        {"type": "worker", "index": 0, "host": "h0"}, {"type": "worker", "index": 1, "host": "h1"}]}))
    (run / "launcher.json").write_text(json.dumps({"pid": 1, "start_time": 1, "tasks": {}}))
    first = ("tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=12.000\n"
             "tfcluster-first_step epoch=0 step=0 global_step=1 time=13.000\n"
             + "".join(f"tfcluster-step epoch=0 step={g} global_step={g} time={12 + g}.000\n" for g in range(2, 9)))
    second = ("tfcluster-start epoch=0 step=5 global_step=5 global_batch=32 time=24.000\n"
              "tfcluster-first_step epoch=0 step=5 global_step=6 time=25.000\n"
              + "".join(f"tfcluster-step epoch=0 step={g} global_step={g} time={19 + g}.000\n" for g in range(7, 16)))
    (run / "logs" / "worker-0.progress").write_text(first + second)  # (its records: the control channel's)
    events = [{"time": 10.0, "event": "run_start"},
              {"time": 11.0, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": 0, "progress_offset": 0},
              {"time": 11.0, "event": "start", "task": "worker:1", "attempt": 0, "log_offset": 0, "progress_offset": 0},
              {"time": 21.0, "event": "exit", "task": "worker:1", "attempt": 0, "code": 137},
              {"time": 21.5, "event": "restart", "attempt": 1},
              {"time": 22.0, "event": "start", "task": "worker:0", "attempt": 1, "log_offset": 0,
               "progress_offset": len(first)},
              {"time": 22.0, "event": "start", "task": "worker:1", "attempt": 1, "log_offset": 0, "progress_offset": 0},
              {"time": 36.0, "event": "outcome", "outcome": "succeeded", "exit_code": 0, "attempts": 2}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run.parent / "latest").symlink_to(run.name)
    status = load_run(run)
    g = status.to_json()["goodput"]
    # startup 10 -> 13; trained 13 -> 20 (steps 1..8), killed 21: 20 -> 21 lost; recovery 21 -> 25;
    # steps 6..8 again (3 steps at 1 s); trained 25 -> 34; the rest 34 -> 36
    assert g["elapsed"] == 26.0 and g["exact"] is True
    assert g["badput"] == {"startup": 3.0, "recovery": 4.0, "redone": 4.0, "checkpoint": 0.0, "waiting": 0.0,
                           "hung": 0.0, "other": 2.0}
    assert g["productive"] == 13.0 and g["fraction"] == round(13 / 26, 4)
    assert "goodput 50.0 %: startup 11.5 %, recovery 15.4 %, redone 15.4 %, other 7.7 %" in render_status(status, "c.yaml")
    table = render_runs([status], tmp_path / "runs" / "t")
    assert table[1].split()[-1] == "goodput" and table[2].endswith("50.0 %")
    assert runs_json([status])["runs"][0]["goodput"] == g


def test_a_stopped_run_ends_in_teardown_not_recovery():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.say("worker:0", "saving", 8.2, global_step=52).say("worker:0", "preempted", 8.6, global_step=52)
    run.ev("exit", 9.0, task="worker:0", attempt=0, code=143)
    g = run.ev("outcome", 10.0, outcome="interrupted").measure()
    assert g.badput["recovery"] == 0 and g.badput["checkpoint"] == pytest.approx(0.4)
    assert g.badput["other"] == pytest.approx(1.4)


def test_restarts_that_never_train_again_are_recovery():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)
    run.ev("exit", 8.5, task="worker:1", attempt=0, code=137).ev("restart", 8.7, attempt=1).attempt(1, 8.8)
    run.ev("exit", 12.0, task="worker:1", attempt=1, code=1)
    g = run.ev("outcome", 13.0, outcome="failed").measure()
    assert g.badput["recovery"] == pytest.approx(13.0 - 8.5)


def test_a_hang_until_the_watchdog_is_recovery_not_redone():
    run = Run().attempt(0, 0.1)
    run.train("worker:0", 0, 2.0, 3.0, 51, 8.0)  # a line every 10 steps: 1 s apart
    run.ev("failure", 28.0, task="worker:1", attempt=0, reason="hung").ev("restart", 28.5, attempt=1).attempt(1, 28.6)
    run.train("worker:0", 50, 30.0, 31.0, 101, 36.0)
    g = run.ev("outcome", 37.0, outcome="succeeded").measure()
    assert g.badput["redone"] == pytest.approx(0.1 + 1.0, abs=0.01)  # step 51 again; 1 s after the last line
    assert g.badput["recovery"] == pytest.approx(31.0 - 9.0)


def test_the_wait_below_min_is_waiting_from_the_preflight_and_mid_run_counted_once():
    # The preflight waited 30 s for hosts below tasks.worker.min (its host_wait leads the record).
    run = Run()
    run.marks, run.facts = Marks(), RunFacts()
    run.ev("host_wait", 0.0, hosts=["h2"], have=1, need=2, until=60.0, wait=60.0)
    run.ev("run_start", 30.0, tasks=["worker:0", "worker:1"]).attempt(0, 31.0)
    run.train("worker:0", 0, 32.0, 35.0, 101, 45.0)
    # Mid-run: h2 lost, the group below min waits for it, h2 back, a replan: both waits are one.
    run.ev("host_lost", 46.0, host="h2", suspect=True, attempt=0)
    run.ev("host_wait", 47.0, hosts=["h2"], have=1, need=2, until=107.0, wait=60.0, attempt=1)
    run.ev("host_added", 70.0, host="h2", spare=False).ev("replan", 71.0, attempt=1, plan=2).attempt(1, 72.0)
    run.train("worker:0", 100, 73.0, 75.0, 201, 85.0)
    g = run.ev("outcome", 86.0, outcome="succeeded").measure()
    assert g.elapsed == pytest.approx(86.0)  # from the preflight's wait, not run_start
    assert g.badput["waiting"] == pytest.approx(30.0 + (71.0 - 46.0))
    assert g.badput["startup"] == pytest.approx(35.0 - 30.0)
    assert Marks.from_json(run.marks.to_json()).waits == run.marks.waits


def test_a_hang_the_watchdog_found_is_hung_from_its_last_progress_to_its_tasks_stopped():
    # A script of its own (no step lines): ready at 2, last progress at 10, found at 40, stopped
    # by 43, restarted, ready again at 46, done at 50.
    run = Run().attempt(0, 0.1).ev("attempt_ready", 2.0, attempt=0)
    run.ev("failure", 40.0, task="worker:1", attempt=0, reason="stuck", hung_since=10.0)
    run.ev("stopped", 41.0, task="worker:1", code=137).ev("stopped", 43.0, task="worker:0", code=143)
    run.ev("restart", 44.0, attempt=1).attempt(1, 44.1).ev("attempt_ready", 46.0, attempt=1)
    g = run.ev("outcome", 50.0, outcome="succeeded").measure()
    assert g.badput["hung"] == pytest.approx(33.0)  # 10 -> 43
    assert g.badput["recovery"] == pytest.approx(3.0)  # 43 -> 46
    assert g.productive == pytest.approx(8.0 + 4.0)
    assert "hung 66.0 %" in g.line()
    # The last attempt, no restart: the hang is still hung, not teardown.
    run = Run().attempt(0, 0.1).ev("attempt_ready", 2.0, attempt=0)
    run.ev("failure", 40.0, task="worker:1", attempt=0, reason="stuck", hung_since=10.0)
    run.ev("stopped", 42.0, task="worker:0", code=143)
    g = run.ev("outcome", 43.0, outcome="failed").measure()
    assert g.badput["hung"] == pytest.approx(32.0) and g.productive == pytest.approx(8.0)
    assert Marks.from_json(run.marks.to_json()).hung == {0: [10.0, 42.0]}
