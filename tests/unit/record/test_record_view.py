"""launcher/record/view.py: the run as the live panel and the final report see it, from events and lines."""

from __future__ import annotations

import io

import pytest

from rich.console import Console as RichConsole

from launcher.ui import report
from launcher.ui.panel import render
from launcher.record import events as ev
from launcher.record.view import RunModel

T0 = 1000.0


def _ev(kind: str, at: float, **fields) -> dict:
    return {"time": at, "event": kind, **fields}


def _mwms_view() -> RunModel:
    view = RunModel()
    view.event(_ev("run_start", T0, run_id="r1", name="demo", strategy="multi_worker_mirrored", backend="local",
                   tasks=["worker:0", "worker:1"], run_dir="/runs/demo/r1", max_restarts=2))
    for key in ("worker:0", "worker:1"):
        view.event(_ev("start", T0 + 0.1, task=key, attempt=0, host="localhost", pid=1))
    return view


def test_states_follow_a_healthy_task_from_start_to_success():
    view = _mwms_view()
    w0 = view.tasks["worker:0"]
    assert (w0.state, w0.attempt, w0.host, view.max_attempts) == ("starting", 0, "localhost", 3)
    view.line("worker:0", "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
              T0 + 1)
    # (the state is the record's; the panel shows a live task's phase: record/fold.py)
    assert (w0.state, w0.phase, w0.shown) == ("starting", "importing", "importing") and w0.last_line_at == T0 + 1
    view.event(_ev("ready", T0 + 2, task="worker:0", attempt=0, after=1.9))
    assert (w0.state, w0.phase, w0.shown) == ("running", "", "running")
    view.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 time=1003.000 strategy=multi_worker_mirrored "
              "replicas=2 global_batch=64 epochs=3 steps_per_epoch=20", T0 + 3)
    assert (w0.state, w0.shown, w0.epoch, w0.epochs, w0.step, w0.steps_per_epoch, w0.global_step) == (
        "running", "training", 1, 3, 0, 20, 0)
    view.progress("worker:0", "tfcluster-step epoch=0 step=10 global_step=10 loss=2.2 accuracy=0.2 time=1004.000", T0 + 4)
    view.progress("worker:0", "tfcluster-step epoch=0 step=20 global_step=20 loss=2.1 accuracy=0.3 time=1006.000", T0 + 6)
    # 10 steps of 64 examples in 2 s, the worker's own clock (progress.Throughput).
    assert (w0.epoch, w0.step, w0.global_step, w0.examples_per_sec) == (1, 20, 20, 320.0)
    assert w0.epoch_loss is None  # running step metrics are not an epoch's
    view.progress("worker:0", "tfcluster-epoch epoch=1 loss=2.1932 accuracy=0.3805 time=1006.100", T0 + 6.1)
    assert (w0.epoch, w0.step, w0.epoch_loss, w0.epoch_accuracy) == (1, 20, 2.1932, 0.3805)
    view.progress("worker:0", "tfcluster-step epoch=1 step=10 global_step=30 loss=1.9 accuracy=0.7 time=1008.000", T0 + 8)
    assert (w0.epoch, w0.step, w0.global_step) == (2, 10, 30)
    view.progress("worker:0", "tfcluster-result task=worker:0 epochs=3 epochs_run=3 steps_run=60 examples_per_sec=585.0 "
              "accuracy=0.9111 loss=0.7303 train_loss=0.8 train_accuracy=0.9", T0 + 9)
    view.event(_ev("exit", T0 + 10, task="worker:0", attempt=0, code=0))
    view.event(_ev("stopped", T0 + 10.5, task="worker:1", code=-15))
    assert (w0.state, w0.exit_code) == ("succeeded", 0)
    assert (view.tasks["worker:1"].state, view.tasks["worker:1"].exit_code) == ("stopped", -15)
    facts = view.outcome_facts()["worker:0"]
    assert facts == {"state": "succeeded", "exit_code": 0, "attempts": 1, "steps_run": 60, "global_step": 30,
                     "examples_per_sec": 585.0, "loss": 0.7303, "accuracy": 0.9111}
    # A task that printed no progress still has a row: state, attempt, host, last line.
    assert view.outcome_facts()["worker:1"]["loss"] is None


def test_a_group_restart_resets_attempt_progress_and_counts_attempts():
    view = _mwms_view()
    w1 = view.tasks["worker:1"]
    view.progress("worker:1", "tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 epochs=2 steps_per_epoch=20",
              T0 + 1)
    view.progress("worker:1", "tfcluster-step epoch=0 step=10 global_step=10 time=1002", T0 + 2)
    view.event(_ev("exit", T0 + 3, task="worker:1", attempt=0, code=-9))
    assert w1.state == "failed" and w1.exit_code == -9
    view.event(_ev("failure", T0 + 3, task="worker:1", attempt=0, reason="killed by SIGKILL", code=-9))
    view.event(_ev("stopped", T0 + 3.2, task="worker:0", code=-9))
    view.event(_ev("restart", T0 + 4, attempt=1, delay=0, after="worker:1", reason="killed"))
    assert {t.state for t in view.tasks.values()} == {"restarting"}
    view.event(_ev("start", T0 + 5, task="worker:1", attempt=1, host="localhost"))
    assert (w1.state, w1.attempt, w1.starts, view.attempt, w1.exit_code, w1.reason) == (
        "starting", 1, 2, 1, None, "")
    # The resumed attempt starts at global step 10; its steps run count from there.
    view.progress("worker:1", "tfcluster-start epoch=0 step=10 global_step=10 global_batch=64 epochs=2 steps_per_epoch=20",
              T0 + 6)
    view.progress("worker:1", "tfcluster-step epoch=1 step=5 global_step=25 time=1007", T0 + 7)
    assert view.outcome_facts()["worker:1"]["steps_run"] == 15 and view.outcome_facts()["worker:1"]["attempts"] == 2


def test_parameter_server_extras_lost_recovered_and_the_evaluator():
    view = RunModel()
    keys = ["chief:0", "ps:0", "worker:0", "worker:1", "evaluator:0"]
    view.event(_ev("run_start", T0, name="pss", strategy="parameter_server", backend="local", tasks=keys,
                   run_dir="/r", max_restarts=3))
    for key in keys:
        view.event(_ev("start", T0, task=key, attempt=0, host="localhost"))
    for key in ("ps:0", "worker:0", "worker:1"):
        view.progress(key, "tfcluster-server task=%s target=grpc://localhost:1 time=1001" % key, T0 + 1)
    assert view.tasks["ps:0"].state == "running"  # (a server line: its port is up)
    view.progress("chief:0", "tfcluster-start epoch=0 step=0 global_step=0 strategy=parameter_server replicas=1 "
              "global_batch=32 workers=2 epochs=2 steps_per_epoch=50", T0 + 2)
    view.progress("chief:0", "tfcluster-step epoch=0 step=30 global_step=30 time=1003", T0 + 3)
    view.progress("chief:0", "tfcluster-worker_lost task=worker:1 time=1004", T0 + 4)
    assert view.tasks["worker:1"].lost and view.workers_lost == 1
    view.progress("chief:0", "tfcluster-worker_recovered task=worker:1 time=1005", T0 + 5)
    assert not view.tasks["worker:1"].lost and view.workers_recovered == 1
    view.progress("evaluator:0", "tfcluster-eval checkpoint=ckpt-2 global_step=50 loss=1.2000 accuracy=0.6500 time=1006",
              T0 + 6)
    ev = view.evaluator()
    assert (ev.shown, ev.last_checkpoint, ev.final_accuracy) == ("evaluating", "ckpt-2", 0.65)
    text = _rendered(view, T0 + 8)
    assert "chief step 30/100" in text and "servers up 3/3" in text
    assert "workers lost 1, recovered 1" in text and "evaluator: ckpt-2 accuracy 0.6500" in text


def test_pss_worker_restarted_alone_counts_a_second_start_in_the_same_attempt():
    view = RunModel()
    view.event(_ev("run_start", T0, name="pss", strategy="parameter_server", backend="local",
                   tasks=["chief:0", "worker:0"], run_dir="/r", max_restarts=3))
    view.event(_ev("start", T0, task="worker:0", attempt=0, host="h1"))
    view.event(_ev("exit", T0 + 1, task="worker:0", attempt=0, code=-9))
    view.event(_ev("task_restart", T0 + 1, task="worker:0", code=-9, restart=1))
    assert view.tasks["worker:0"].state == "restarting"
    view.event(_ev("start", T0 + 1.1, task="worker:0", attempt=0, host="h1"))
    assert (view.tasks["worker:0"].attempt, view.tasks["worker:0"].starts, view.attempt) == (0, 2, 0)


def _rendered(view: RunModel, now: float, width: int = 160) -> str:
    console = RichConsole(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(render(view.snapshot(), now, width))
    return console.file.getvalue()


def test_panel_has_a_header_and_one_row_per_task_with_epoch_and_step_progress():
    view = _mwms_view()
    view.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 epochs=3 steps_per_epoch=20",
              T0 + 3)
    view.progress("worker:0", "tfcluster-epoch epoch=1 loss=2.1932 accuracy=0.3805", T0 + 4)
    view.progress("worker:0", "tfcluster-step epoch=1 step=10 global_step=30 time=1005", T0 + 5)
    view.line("worker:1", "some output", T0 + 5)
    text = _rendered(view, T0 + 65)
    lines = text.splitlines()
    assert lines[0].split() == ["demo", "multi_worker_mirrored", "on", "local", "attempt", "1", "of", "3", "01:05",
                                "elapsed"]
    assert lines[1] == "run dir /runs/demo/r1"
    row0 = next(line for line in lines if line.startswith("worker:0"))
    row1 = next(line for line in lines if line.startswith("worker:1"))
    assert "training" in row0 and " 2/3 " in row0 and "10/20" in row0 and "2.1932" in row0 and "0.3805" in row0
    assert row0.rstrip().endswith(" 60s")
    assert "importing" in row1 and "localhost" in row1 and row1.rstrip().endswith(" 60s")
    assert "\x1b" not in text
    # On an 80-column terminal every cell of a training row still shows in full.
    narrow = _rendered(view, T0 + 65, width=80).splitlines()
    assert max(len(line) for line in narrow) <= 80
    assert next(line for line in narrow if line.startswith("worker:0")).split()[:5] == [
        "worker:0", "localhost", "training", "1", "2/3"]
    assert "…" not in "".join(narrow[2:])


def test_report_table_and_locations(tmp_path):
    view = _mwms_view()
    view.progress("worker:0", "tfcluster-result task=worker:0 steps_run=60 examples_per_sec=585.0 accuracy=0.9111 "
              "loss=0.7303", T0 + 9)
    view.event(_ev("exit", T0 + 10, task="worker:0", attempt=0, code=0))
    view.event(_ev("exit", T0 + 10, task="worker:1", attempt=0, code=0))
    rows = report.task_table(view)
    assert rows[0].split() == ["task", "host", "state", "exit", "attempts", "steps", "examples/s", "loss", "accuracy"]
    assert rows[1].split() == ["worker:0", "localhost", "succeeded", "0", "1", "60", "585.0", "0.7303", "0.9111"]
    assert rows[2].split() == ["worker:1", "localhost", "succeeded", "0", "1", "-", "-", "-", "-"]
    (tmp_path / "state" / "final_model").mkdir(parents=True)
    from launcher.record.layout import locations

    where = locations(tmp_path / "state", tmp_path / "logs")
    assert where == {"final model": str(tmp_path / "state" / "final_model"), "state dir": str(tmp_path / "state"),
                     "task logs": str(tmp_path / "logs")}


def test_first_step_counts_the_step_that_just_ended():
    view = _mwms_view()
    view.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 epochs=3 steps_per_epoch=20",
              T0 + 1)
    view.progress("worker:0", "tfcluster-first_step epoch=0 step=0 global_step=1 time=1002.000", T0 + 2)
    w0 = view.tasks["worker:0"]
    assert (w0.shown, w0.epoch, w0.step, w0.global_step) == ("training", 1, 1, 1)


def test_the_view_follows_the_record_and_a_failing_listener_never_stops_the_run(tmp_path):
    from launcher.app.up import plan_for
    from launcher.record.writer import RunRecord
    from launcher.loader.load import load_spec
    from tests.support.specs import script_spec

    plan = plan_for(load_spec(script_spec(tmp_path, "pass\n")).spec)
    problems: list[str] = []
    record = RunRecord(tmp_path / "runs", plan, on_problem=problems.append).create()
    view = RunModel()

    def broken(event):
        raise ValueError("drawing failed")

    record.listeners += [broken, view.event]
    record.write(ev.RunStart(run_id=record.run_id, name="t", strategy="multi_worker_mirrored", backend="local",
                             tasks=list(plan.keys)))
    record.write(ev.Start(task="worker:0", attempt=0, host="localhost"))
    record.close()
    assert view.name == "t" and view.tasks["worker:0"].state == "starting"
    assert len(problems) == 1 and "drawing failed" in problems[0] and "the run goes on" in problems[0]
    events = (record.dir / "events.jsonl").read_text().splitlines()
    assert len(events) == 2 and '"event": "start"' in events[1]


def _state(view: RunModel) -> dict:
    """Everything the view holds, the throughputs' marks included, to compare two views."""
    tasks = {}
    for key, t in view.tasks.items():
        fields = dict(vars(t))
        fields["throughput"] = dict(vars(t.throughput)) if t.throughput is not None else None
        tasks[key] = fields
    return {**{k: v for k, v in vars(view).items() if k not in ("tasks", "_lock")}, "tasks": tasks}


def _random_lines(rng, n: int) -> list[str]:
    """Mostly the worker's step lines, with what breaks a run of them: other progress lines,
    other output, malformed and out-of-range values, steps and clocks that go back."""
    out, g, t = [], 0, T0
    for _ in range(n):
        roll = rng.random()
        g += rng.choice((1, 1, 1, 0, 2, -3)) if roll < 0.97 else 0
        t += rng.choice((0.1, 0.1, 0.0, 0.25, -1.0))
        loss, acc = f"{rng.uniform(0, 3):.4f}", f"{rng.uniform(0, 1):.4f}"
        if roll < 0.55:
            out.append(f"tfcluster-step epoch={g // 20} step={g % 20} global_step={g} loss={loss} accuracy={acc} "
                       f"time={t:.3f}")
        elif roll < 0.70:
            out.append(f"tfcluster-step epoch={g // 20} step={g % 20} global_step={g} time={t:.3f}")  # PSS
        elif roll < 0.74:
            out.append(f"tfcluster-step epoch={g // 20} step={g % 20} global_step={g} loss=nan accuracy={acc} "
                       f"time={t:.3f}")
        elif roll < 0.77:
            out.append(f"tfcluster-step epoch={g // 20} step={g % 20} global_step={g} loss={loss} accuracy=1.7 "
                       f"time={t:.3f}")
        elif roll < 0.80:
            out.append(f"tfcluster-step epoch={g // 20} global_step={g} loss={loss} time={t:.3f}")  # a user's own
        elif roll < 0.83:
            out.append(f"tfcluster-step epoch={g // 20} step={g % 20} global_step={g} loss={loss} accuracy={acc} "
                       f"time={t:.3f} ")  # trailing space: not the worker's format
        elif roll < 0.86:
            out.append(f"tfcluster-epoch epoch={g // 20} global_step={g} loss={loss} accuracy={acc} "
                       f"examples_per_sec=10.0 time={t:.3f}")
        elif roll < 0.88:
            out.append(f"tfcluster-first_step epoch={g // 20} step={g % 20} global_step={g} time={t:.3f}")
        elif roll < 0.90:
            out.append(f"tfcluster-start epoch={g // 20} step={g % 20} global_step={g} global_batch=32 epochs=3 "
                       f"steps_per_epoch=20 time={t:.3f}")
        elif roll < 0.92:
            out.append(f"tfcluster-result accuracy={acc} loss={loss} examples_per_sec=99.0 steps_run={g}")
        elif roll < 0.94:
            out.append(f"tfcluster-worker_lost task=worker:1 time={t:.3f}")
        elif roll < 0.97:
            out.append("W0000 00:00:1 some TensorFlow warning")
        else:
            out.append("")
    return out


def test_lines_in_a_batch_give_the_view_that_line_by_line_gives():
    """``lines`` skips step lines the next one overwrites; over random mixes of every kind of
    line (runs of step lines broken by everything that can break them) the view is exactly
    the one feeding each line gives, throughput marks included."""
    import random

    rng = random.Random(7)
    skipped = 0
    for trial in range(300):
        texts = _random_lines(rng, rng.randint(0, 60))
        one, batch = _mwms_view(), _mwms_view()
        batch.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=999.0", T0)
        one.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=999.0", T0)
        for text in texts:
            one.progress("worker:0", text, T0 + 5)
        # in pieces, as a replay reads a progress file in chunks
        cut = rng.randint(0, len(texts))
        batch.progress_lines("worker:0", texts[:cut], T0 + 5)
        batch.progress_lines("worker:0", texts[cut:], T0 + 5)
        assert _state(batch) == _state(one), (trial, texts)
        skipped += sum(1 for a, b, c in zip(texts, texts[1:], texts[2:])
                       if all(x.startswith("tfcluster-step ") for x in (a, b, c)))
    assert skipped > 500  # the mixes had runs to skip


def test_lines_skip_the_inside_of_a_run_of_step_lines():
    seen = []

    class Counting(RunModel):
        def _progress(self, key, text, now):
            seen.append(text)
            super()._progress(key, text, now)

    view = Counting()
    texts = [f"tfcluster-step epoch=0 step={i} global_step={i} loss=1.0000 accuracy=0.5000 time={T0 + i:.3f}"
             for i in range(1, 1001)]
    view.progress_lines("worker:0", ["tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=999.0", *texts], T0)
    assert seen == ["tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=999.0", texts[0], texts[-1]]
    t = view.tasks["worker:0"]
    assert (t.global_step, t.step) == (1000, 1000)
    assert t.examples_per_sec == pytest.approx(999 * 32 / 999)  # from the first step line to the last


def _elastic_view(rng) -> RunModel:
    """A view that went through a lost host, a shrink and a grow, with spares and a lost host
    not yet replanned, and random lines on both workers (throughputs with marks)."""
    view = RunModel()
    view.event(_ev("run_start", T0, run_id="r1", name="demo", strategy="multi_worker_mirrored", backend="ssh",
                   tasks=["worker:0", "worker:1"], max_restarts=2, spares=["h3", "h4"]))
    for key, host in (("worker:0", "h1"), ("worker:1", "h2")):
        view.event(_ev("start", T0 + 0.1, task=key, attempt=0, host=host))
        view.progress(key, "tfcluster-start epoch=0 step=0 global_step=0 global_batch=32 time=999.0", T0 + 1)
        view.progress_lines(key, _random_lines(rng, rng.randint(0, 40)), T0 + 2)
    view.event(_ev("host_lost", T0 + 3, host="h2", how="unreachable for 60 s"))
    view.event(_ev("replan", T0 + 4, lost=["h2"], moved={"worker:1": {"from": "h2", "to": "h3"}}))
    view.event(_ev("start", T0 + 5, task="worker:1", attempt=1, host="h3"))
    view.progress("worker:1", "tfcluster-start epoch=0 step=3 global_step=3 global_batch=32 time=1005.0", T0 + 6)
    view.event(_ev("host_added", T0 + 7, host="h2"))
    view.event(_ev("host_lost", T0 + 8, host="h4", how="preempted"))
    return view


def test_to_json_and_from_json_give_the_same_view_elastic_fields_and_marks_included():
    """A snapshot of the view (launcher/record/feed.py) goes through JSON: the view read back holds
    exactly what the view held, and fed the same lines and events afterwards it stays equal."""
    import json
    import random

    rng = random.Random(3)
    for trial in range(50):
        view = _elastic_view(rng)
        back = RunModel.from_json(json.loads(json.dumps(view.to_json())))
        assert _state(back) == _state(view), trial
        assert back.spares == ["h4", "h2"] and back.host_changes[0].describe() == view.host_changes[0].describe()
        assert back._lost == {"h4": "preempted"}
        more = _random_lines(rng, 30)
        for v in (view, back):
            v.progress_lines("worker:1", more, T0 + 9)
            v.event(_ev("replan", T0 + 10, lost=["h4"], moved={}, tasks=["worker:0", "worker:1"]))
            v.event(_ev("outcome", T0 + 11, outcome="succeeded", exit_code=0))
        assert _state(back) == _state(view), trial
        assert back.host_changes[-1].lost == {"h4": "preempted"}


def test_a_throughput_that_keeps_its_marks_goes_through_json():
    import json

    from launcher.contract.progress import Throughput

    t = Throughput(32, keep_intervals=True)
    for step, at in ((1, 10.0), (5, 11.5), (9, 12.0)):
        t.mark(step, at)
    t.lap()
    back = Throughput.from_json(json.loads(json.dumps(t.to_json())))
    assert vars(back) == vars(t) and back.intervals() == t.intervals()


def test_a_suspect_host_shows_in_the_panel_until_it_settles_and_the_change_reads_in_one_line():
    view = _mwms_view()
    how = "session lost at 12:01:07, host still answering; suspect until it answers for 30 s"
    view.event(_ev("host_lost", T0 + 5, host="h2", how=how, attempt=0, settle=30))
    view.event(_ev("replan", T0 + 6, lost=["h2"], moved={"worker:1": {"from": "h2", "to": "h3"}},
                   tasks=["worker:0", "worker:1"]))
    assert view.suspects == {"h2": 30.0}
    text = _rendered(view, T0 + 7, width=400)
    assert "suspect hosts: h2 (until it answers for 30 s without a break)" in text, text
    assert f"h2: {how}; worker:1 moved to h3 (spare)" in text, text
    # A host lost another way reads as before, and is not a suspect of this kind.
    view.event(_ev("host_lost", T0 + 8, host="h4", how="gone from discovery.command's list", attempt=1))
    assert "h4" not in view.suspects
    # Settled: no longer suspect, and (not waited for by the group) a spare again.
    view.event(_ev("host_added", T0 + 40, host="h2", attempt=1, settle=30))
    assert view.suspects == {} and "h2" in view.spares
    back = RunModel.from_json(view.to_json())
    assert back.suspects == {} and back.spares == view.spares
    # A host the group waited for is back in the plan, not a spare.
    view.event(_ev("host_lost", T0 + 50, host="h1", how=how, attempt=1, settle=30))
    view.event(_ev("host_added", T0 + 60, host="h1", attempt=1, settle=30, spare=False))
    assert "h1" not in view.spares and "h1" not in view.suspects


def test_a_lost_spare_is_a_suspect_and_no_spare_until_it_settles_and_no_host_change_is_shown():
    view = RunModel()
    view.event(_ev("run_start", T0, run_id="r1", name="demo", strategy="multi_worker_mirrored", backend="ssh",
                   tasks=["worker:0", "worker:1"], max_restarts=2, spares=["h3"]))
    assert view.spares == ["h3"]
    how = "a spare: its standbys' sessions lost at 12:01:07; suspect until it answers for 30 s"
    view.event(_ev("host_lost", T0 + 5, host="h3", how=how, attempt=0, settle=30, suspect=True, spare=True))
    assert "h3" not in view.spares and view.suspects == {"h3": 30.0} and not view.host_changes
    text = _rendered(view, T0 + 7, width=400)
    assert "suspect hosts: h3 (until it answers for 30 s without a break)" in text, text
    # A later replan of another host's loss does not name h3 as lost with it.
    view.event(_ev("host_lost", T0 + 8, host="h2", how="preempted", attempt=0))
    view.event(_ev("replan", T0 + 9, lost=["h2"], tasks=["worker:0"], dropped=["worker:1"]))
    assert list(view.host_changes[0].lost) == ["h2"]
    view.event(_ev("host_added", T0 + 40, host="h3", attempt=1, settle=30))
    assert view.suspects == {} and "h3" in view.spares


def test_a_host_loss_reads_back_typed_and_its_change_is_worded_by_its_kind():
    """A host_lost event keeps the loss's kind (``cause``) and when it began (``since``);
    record/hosts.py's ``loss_of`` reads it back as a ``HostLoss``. An older record's event has
    neither: its ``suspect`` tells a loss inferred from silence from one known. The replan's line words each loss by whether it
    was suspect, never by its words (the preempted one's words here do contain "suspect until")."""
    from launcher.plan.hostloss import HostLoss, LossKind
    from launcher.record.hosts import loss_of
    from launcher.record.reader import parse_event

    line = _ev("host_lost", T0 + 3, host="h2", how="preempted: GCE notice; suspect until never", suspect=False,
               attempt=0, settle=30, cause="preempted", since=T0 + 1)
    event = parse_event(dict(line))
    assert loss_of(event) == HostLoss(LossKind.PREEMPTED, "h2", T0 + 1, "preempted: GCE notice; suspect until never")
    old = parse_event(_ev("host_lost", T0 + 3, host="h3", how="host not answering; suspect until it answers for 5 s",
                          suspect=True, attempt=0))
    assert loss_of(old).kind is LossKind.UNREACHABLE and loss_of(old).suspect and loss_of(old).since is None
    unknown = parse_event(_ev("host_lost", T0 + 3, host="h4", how="gone", cause="a newer kind"))
    assert loss_of(unknown).kind is LossKind.DROPPED  # a kind this version does not know: read by ``suspect``
    view = RunModel()
    view.event(_ev("run_start", T0, run_id="r1", name="demo", strategy="multi_worker_mirrored", backend="ssh",
                   tasks=["worker:0", "worker:1", "worker:2"], max_restarts=2, spares=[]))
    view.event(line)
    view.event(_ev("host_lost", T0 + 3, host="h3", how="session lost at 12:01:07, host still answering; suspect "
                   "until it answers for 30 s", suspect=True, attempt=0, settle=30, cause="session"))
    view.event(_ev("replan", T0 + 4, lost=["h2", "h3"], tasks=["worker:0"], dropped=["worker:1", "worker:2"]))
    said = view.host_changes[0].describe()
    assert said.startswith("h2 lost at ") and "(preempted: GCE notice; suspect until never); h3: session lost" in said
    import json

    back = RunModel.from_json(json.loads(json.dumps(view.to_json())))  # a snapshot keeps which were suspect
    assert back.host_changes[0].describe() == said
