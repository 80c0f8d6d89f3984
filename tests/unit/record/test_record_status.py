"""launcher/record/status.py: a run's state and task rows from its record; damaged records named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.record.status import FAILED, LOST, RUNNING, STOPPED, RecordDamaged, load_run

PLAN = {"name": "t", "strategy": "multi_worker_mirrored", "backend": "local", "tasks": [
    {"type": "worker", "index": 0, "host": "h0"}, {"type": "worker", "index": 1, "host": "h1"}]}


def make_run(root: Path, events: list[dict], logs: dict[str, str], launcher: dict | None = None) -> Path:
    run = root / "runs" / "t" / "20260101-000000-abcd"
    (run / "logs").mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps(PLAN))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "launcher.json").write_text(json.dumps(launcher or {"pid": 12345, "start_time": 1, "tasks": {}}))
    for key, text in logs.items():  # (as the writer keeps them: its records apart, in its progress file)
        for record, suffix in ((False, ".log"), (True, ".progress")):
            part = "".join(line for line in text.splitlines(True) if _record(line) == record)
            if part:
                (run / "logs" / (key.replace(":", "-") + suffix)).write_text(part)
    (run.parent / "latest").symlink_to(run.name)
    return run


STEP = "tfcluster-step epoch={e} step={s} global_step={g} loss={l} accuracy={a} time={t}\n"


def _record(line: str) -> bool:
    return line.startswith(("tfcluster-", "(standby) tfcluster-"))


def _offsets(text: str) -> dict:
    """A start's offsets after ``text`` (make_run's split of it)."""
    lines = text.splitlines(True)
    return {"log_offset": sum(len(x) for x in lines if not _record(x)),
            "progress_offset": sum(len(x) for x in lines if _record(x))}


def test_running_rows_progress_throughput_and_restarts(tmp_path):
    first = "old output\n" + STEP.format(e=0, s=9, g=9, l=9.0, a=0.1, t=50.0)
    attempt2 = ("tfcluster-start epoch=0 step=0 global_step=4 global_batch=32 time=99.0\n"
                + STEP.format(e=0, s=5, g=5, l=0.5, a=0.6, t=100.0)
                + STEP.format(e=0, s=10, g=10, l=0.4, a=0.7, t=102.0)
                # a warm standby's lines are not the task's (the live view never saw them)
                + "(standby) " + STEP.format(e=3, s=99, g=99, l=0.01, a=0.99, t=103.0)
                + "still going\n")
    events = [
        {"time": 10.0, "event": "run_start"},
        {"time": 11.0, "event": "start", "task": "worker:0", "attempt": 0, **_offsets("")},
        {"time": 11.0, "event": "start", "task": "worker:1", "attempt": 0, **_offsets("")},
        {"time": 20.0, "event": "exit", "task": "worker:1", "attempt": 0, "code": 137},
        {"time": 21.0, "event": "restart", "attempt": 1},
        {"time": 22.0, "event": "start", "task": "worker:0", "attempt": 1, **_offsets(first)},
        {"time": 22.0, "event": "start", "task": "worker:1", "attempt": 1, **_offsets("")},
        {"time": 23.0, "event": "attempt_ready", "attempt": 1},
    ]
    run = make_run(tmp_path, events, {"worker:0": first + attempt2})
    view = load_run(run, alive=lambda pid, st: True)
    assert view.state == RUNNING and view.attempts == 2 and view.started == 10.0
    w0, w1 = view.tasks
    assert (w0.key, w0.host, w0.state, w0.restarts) == ("worker:0", "h0", "running", 1)
    # the row is the live panel's RunModel: epoch 1 in progress (the line's 0-based epoch=0), 10 steps done in it
    assert (w0.epoch, w0.step, w0.global_step, w0.loss, w0.accuracy) == (1, 10, 10, 0.4, 0.7)
    assert w0.examples_per_sec == pytest.approx(5 * 32 / 2.0)  # 5 steps of 32 in 2 s, this attempt only
    assert w0.last_line == "still going"
    assert w1.state == "running" and w1.epoch is None and w1.loss is None
    # one task table: the rows' figures are the view's tasks, read and not copied
    assert w0.task is view.view.tasks["worker:0"] and view.view.tasks["worker:0"].loss == 0.4
    # loaded without progress: no task log is read, so no view and no figures
    quick = load_run(run, alive=lambda pid, st: True, progress=False)
    assert quick.view is None and quick.tasks[0].task is None and quick.tasks[0].loss is None
    assert [t.to_json() for t in quick.tasks][0] == {
        "key": "worker:0", "host": "h0", "state": "running", "attempt": 1, "epoch": None, "step": None,
        "global_step": None, "loss": None, "accuracy": None, "examples_per_sec": None, "restarts": 1,
        "last_line": "", "alive": None, "has_result": False,
        "gpu_mib": None, "gpu_util": None, "gpu_peak_mib": None, "gpus": ""}


def test_supervisor_gone_without_outcome_is_lost_and_checks_task_groups(tmp_path):
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 2.0, "event": "start", "task": "worker:1", "attempt": 0}]
    launcher = {"pid": 4242, "start_time": 7, "tasks": {"worker:0": {"pgid": 501, "start_time": 9},
                                                        "worker:1": {"pgid": 502, "start_time": 9}}}
    run = make_run(tmp_path, events, {}, launcher)
    view = load_run(run, alive=lambda pid, st: pid == 501, group_alive=lambda pgid: True)
    assert view.state == LOST and "supervisor 4242 is gone" in view.reason
    assert [(t.key, t.state, t.alive) for t in view.tasks] == [("worker:0", "starting", True), ("worker:1", "gone", False)]
    assert view.still_running() == ["worker:0"]


def test_outcomes(tmp_path):
    events = [{"time": 1.0, "event": "run_start"}, {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 9.0, "event": "outcome", "outcome": "interrupted", "attempts": 1, "exit_code": 130}]
    view = load_run(make_run(tmp_path, events, {}), alive=lambda pid, st: False)
    assert view.state == STOPPED and view.elapsed() == 8.0 and view.tasks[0].state == "stopped"


def test_status_words_the_folded_states_and_a_failed_tasks_exit(tmp_path):
    """status reads each task's state from the one machine (launcher/record/fold.py), wording a
    failed task's exit; a task a failure named is failed (as the panel and report say), not stopped."""
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 2.0, "event": "start", "task": "worker:1", "attempt": 0},
              {"time": 3.0, "event": "ready", "task": "worker:1", "attempt": 0},
              {"time": 4.0, "event": "exit", "task": "worker:0", "attempt": 0, "code": 137},
              {"time": 4.5, "event": "failure", "task": "worker:1", "reason": "no progress for 30 s"},
              {"time": 5.0, "event": "stopped", "task": "worker:1", "code": -15}]
    run = make_run(tmp_path, events, {})
    rows = load_run(run, alive=lambda pid, st: True).tasks
    assert [(t.state, t.life.state, t.life.exit_code) for t in rows] == [
        ("killed by SIGKILL (exit 137)", "failed", 137), ("failed", "failed", None)]
    events += [{"time": 6.0, "event": "restart", "attempt": 1}]
    rows = load_run(make_run(tmp_path / "again", events, {}), alive=lambda pid, st: True).tasks
    assert [t.state for t in rows] == ["restarting", "restarting"]


def test_torn_last_line_is_skipped_a_damaged_line_is_named(tmp_path, capsys):
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 3.0, "event": "outcome", "outcome": "failed", "attempts": 1, "reason": "x"}]
    run = make_run(tmp_path, events, {})
    with open(run / "events.jsonl", "a") as fh:
        fh.write('{"time": 4.0, "ev')  # a crash mid-append
    assert load_run(run).state == FAILED
    text = (run / "events.jsonl").read_text().replace('"run_start"}', '"run_st', 1)
    (run / "events.jsonl").write_text(text)
    with pytest.raises(RecordDamaged, match=r"events\.jsonl line 1 is not an event"):
        load_run(run)
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n")
    assert main(["status", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"tfcluster: error: run record damaged: {run / 'events.jsonl'} line 1") and "Traceback" not in err
    (run / "plan.json").write_text('{"name": "t", "tas')
    with pytest.raises(RecordDamaged, match=r"plan\.json is not valid JSON"):
        load_run(run)


def test_status_and_logs_usage_errors_are_one_line(tmp_path, capsys):
    run = make_run(tmp_path, [{"time": 1.0, "event": "run_start"}], {"worker:0": "a\nb\nc\n"})
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n")
    assert main(["logs", str(spec), "worker:7"]) == 1
    assert "tfcluster: error: TASK: no task worker:7 in run" in capsys.readouterr().err
    assert main(["status", str(spec), "--run", "nope"]) == 4  # EXIT_NO_RUN: not "the run failed" (1)
    assert f"--run: no run nope under {run.parent}; recent runs: {run.name}" in capsys.readouterr().err
    assert main(["logs", str(spec), "worker:0", "--tail", "2"]) == 0
    assert capsys.readouterr().out == "b\nc\n"


def test_a_supervisor_on_another_host_is_not_declared_lost_from_here(tmp_path):
    events = [{"time": 1.0, "event": "run_start"}, {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0}]
    run = make_run(tmp_path, events, {}, {"pid": 4242, "start_time": 7, "host": "elsewhere-xyz", "tasks": {}})
    view = load_run(run, alive=lambda pid, st: False)
    assert view.state == RUNNING and "runs on elsewhere-xyz; whether it is alive cannot be checked" in view.reason


def test_each_tasks_gpus_as_planned_or_as_the_machine_it_started_on_said(tmp_path, capsys):
    """plan.json (compact: the shared env, each task's env_extra/env_drop) gives what the plan knew
    (local, docker: indices; ssh, slurm: the request, made at start); a task_gpus event (a Slurm
    step, the ssh wrapper) says what the task got, and wins."""
    plan = {"format": "compact", "name": "t", "strategy": "parameter_server", "backend": "slurm",
            "env": {"CUDA_VISIBLE_DEVICES": "-1"}, "tasks": [
                {"type": "chief", "index": 0, "host": "n1"},
                {"type": "worker", "index": 0, "host": "n1", "env_drop": ["CUDA_VISIBLE_DEVICES"],
                 "env_extra": {"TFCLUSTER_GPUS": "take=1 place=0/1 offset=0 tasks=2 use=all need=0 mem=auto coll=auto"}},
                {"type": "worker", "index": 1, "host": "n2", "env_extra": {"CUDA_VISIBLE_DEVICES": "2,3"}},
                {"type": "ps", "index": 0, "host": "n2"}]}
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 2.5, "event": "task_gpus", "task": "worker:0", "gpus": [1]},
              {"time": 3.0, "event": "outcome", "outcome": "succeeded", "exit_code": 0}]
    run = make_run(tmp_path, events, {})
    (run / "plan.json").write_text(json.dumps(plan))
    rows = {t.key: t for t in load_run(run).tasks}
    assert {k: t.gpus for k, t in rows.items()} == {"chief:0": "cpu", "worker:0": "gpu 1", "worker:1": "gpus 2,3",
                                                   "ps:0": "cpu"}
    assert load_run(run, progress=False).tasks[1].gpus == "1 gpu (at start)"  # without the events' view: as planned
    assert rows["worker:1"].to_json()["gpus"] == "gpus 2,3"
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n")
    assert main(["status", str(spec)]) == 0
    table = [line.split()[:3] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert table[:3] == [["task", "host", "gpus"], ["chief:0", "n1", "cpu"], ["worker:0", "n1", "gpu"]], table
    # An auto request alone (what a CPU-only cluster's tasks carry too) does not make the column.
    for row in plan["tasks"]:
        row.pop("env_extra", None)
        row["env_drop"] = ["CUDA_VISIBLE_DEVICES"]
        row["env_extra"] = {"TFCLUSTER_GPUS": "take=auto place=0/1 offset=0 tasks=1 use=all need=0 mem=auto coll=auto"}
    (run / "plan.json").write_text(json.dumps(plan))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events if e["event"] != "task_gpus"))
    assert main(["status", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "gpus" not in out.split("\n  task", 1)[1].splitlines()[0], out


def test_an_ssh_tasks_mig_device_and_the_collective_its_host_chose_are_what_status_shows(tmp_path):
    """Over ssh the plan holds only each task's request; the wrapper's task_gpus event says what
    the host gave: a MIG device shows as its UUID (as ``plan`` shows one locally, not its parent
    GPU's index), UUIDs as UUIDs, and the all-reduce the wrapper set (collective auto decided on
    the host) follows; where it set none, TensorFlow's AUTO: ring."""
    req = "take=auto place=0/2 trainers=2 cap=0 offset=0 tasks=2 use=all need=0 mem=auto coll=pick"
    plan = {"format": "compact", "name": "t", "strategy": "multi_worker_mirrored", "backend": "ssh",
            "env": {"TFCLUSTER_STRATEGY": "multi_worker_mirrored", "TFCLUSTER_GPUS": req},
            "tasks": [{"type": "worker", "index": i, "host": h} for i, h in enumerate(("h1", "h2", "h1", "h2"))]}
    mig = "MIG-6b9c1f2a-0c1d-5e2f-8a3b-4c5d6e7f8091"
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 2.0, "event": "task_gpus", "task": "worker:0", "gpus": [0], "visible": mig},
              {"time": 2.0, "event": "task_gpus", "task": "worker:1", "gpus": [2, 3],
               "visible": "GPU-2b3c1fa0-1d2e-4f3a-9b8c-5d6e7f809a1d,GPU-2b3c1fa1-1d2e-4f3a-9b8c-5d6e7f809a1e",
               "collective": "nccl"},
              {"time": 2.0, "event": "task_gpus", "task": "worker:2", "gpus": [1], "collective": "nccl"},
              {"time": 3.0, "event": "outcome", "outcome": "succeeded", "exit_code": 0}]
    run = make_run(tmp_path, events, {})
    (run / "plan.json").write_text(json.dumps(plan))
    rows = {t.key: t.gpus for t in load_run(run).tasks}
    assert rows == {"worker:0": "gpu MIG-6b9c1f2a ring", "worker:1": "gpus GPU-2b3c1fa0,GPU-2b3c1fa1 nccl",
                    "worker:2": "gpu 1 nccl", "worker:3": "gpus auto (at start)"}, rows
    # Under parameter_server there is no all-reduce to show, whatever the wrapper said.
    plan["strategy"] = plan["env"]["TFCLUSTER_STRATEGY"] = "parameter_server"
    (run / "plan.json").write_text(json.dumps(plan))
    assert {t.key: t.gpus for t in load_run(run).tasks}["worker:2"] == "gpu 1"


# ---------------------------------------------------------------- how long a lost run lasted


def _lost_run(tmp_path: Path, mtimes: dict[str, float]) -> Path:
    """A run whose supervisor died 12 s in: its events stop at attempt_ready (2.5 s), its files
    were last written at ``mtimes`` (path in the run dir -> time)."""
    import os

    events = [{"time": 1000.0, "event": "run_start"},
              {"time": 1000.5, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 1000.5, "event": "start", "task": "worker:1", "attempt": 0},
              {"time": 1002.5, "event": "attempt_ready", "attempt": 0}]
    run = make_run(tmp_path, events, {"worker:0": "step\n", "worker:1": "step\n"})
    (run / "output.log").write_text("[worker:0] step\n")
    (run / "snapshot.json").write_text("{}")
    for name in ("plan.json", "events.jsonl", "launcher.json", "snapshot.json", "output.log",
                 "logs/worker-0.log", "logs/worker-1.log"):
        at = mtimes.get(name, 1000.0)
        os.utime(run / name, (at, at))
    return run


def test_a_lost_runs_duration_runs_to_its_last_sign_of_life_not_its_last_event(tmp_path):
    """The supervisor died at 12 s (a closed terminal, SIGKILL): its events stop at 2.5 s, but the
    tasks' output went on into the logs until 12 s. `status` and `runs` said 2.5 s."""
    from launcher.ui.runstatus import render_runs

    run = _lost_run(tmp_path, {"events.jsonl": 1002.5, "snapshot.json": 1002.6, "output.log": 1011.9,
                               "logs/worker-0.log": 1012.0, "logs/worker-1.log": 1011.7})
    view = load_run(run, alive=lambda pid, st: False)
    assert view.state == LOST and view.ended == 1012.0 and view.elapsed() == 12.0
    assert view.to_json()["elapsed"] == 12.0
    [row] = render_runs([view], run.parent)[2:]
    assert row.split()[3:5] == ["12.0s", "supervisor"], row


@pytest.mark.parametrize("latest, ended", [
    ("launcher.json", 1030.0),  # a task started late (its pid recorded), nothing else since
    ("snapshot.json", 1030.0),  # the supervisor's last snapshot: alive, tasks silent
    ("events.jsonl", 1030.0),  # an event file written after its last whole event (a torn line)
])
def test_any_write_to_the_record_is_a_sign_of_life(tmp_path, latest, ended):
    run = _lost_run(tmp_path, {latest: 1030.0})
    assert load_run(run, alive=lambda pid, st: False).ended == ended


def test_a_last_event_later_than_every_file_still_counts_and_a_running_run_is_timed_to_now(tmp_path):
    run = _lost_run(tmp_path, {})  # every file at 1000.0, the last event at 1002.5
    assert load_run(run, alive=lambda pid, st: False).ended == 1002.5
    running = load_run(run, alive=lambda pid, st: True)
    assert running.state == RUNNING and running.ended is None and running.elapsed(now=1100.0) == 100.0


def test_down_of_a_lost_run_keeps_its_duration_not_the_time_of_down(tmp_path):
    from launcher.ui.console import Console
    from launcher.app.down import _record_stop

    run = _lost_run(tmp_path, {"logs/worker-0.log": 1012.0})
    _record_stop(run, Console())  # days later, say: the outcome's time is now
    view = load_run(run, alive=lambda pid, st: False)
    assert view.state == STOPPED and view.ended == 1012.0 and view.elapsed() == 12.0


def test_attach_whose_reader_went_away_detaches_and_leaves_the_run_going(tmp_path):
    """`attach` (over ssh, the one ssh.supervisor's host runs for you) ends when its reader is
    gone: console writes do not raise, so it looks for the console being lost."""
    import io
    import os
    import threading

    from launcher.ui.attachtext import TextRenderer
    from launcher.ui.console import Console
    from launcher.system.procinfo import start_time
    from launcher.app.attach import attach
    from launcher.spec.model import LoadedSpec
    from launcher.loader.load import parse_spec

    events = [{"time": 1.0, "event": "run_start"}, {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0}]
    run = make_run(tmp_path, events, {"worker:0": "a line\n"},
                   {"pid": os.getpid(), "start_time": start_time(os.getpid()), "tasks": {}})  # alive: this process
    (run / "output.log").write_text("[worker:0] a line\n")
    r, w = os.pipe()
    os.close(r)  # its reader is gone
    out = os.fdopen(w, "w")
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n")
    loaded = LoadedSpec(parse_spec(spec.read_text()), spec)
    ends = []
    console = Console(out=out, err=io.StringIO())
    thread = threading.Thread(target=lambda: ends.append(attach(loaded, console, TextRenderer(console, str(spec)))),
                              daemon=True)
    try:
        thread.start()
        for i in range(150):  # the run goes on writing output, which attach passes on
            with open(run / "output.log", "a") as fh:
                fh.write(f"[worker:0] line {i}\n")
            thread.join(0.1)
            if not thread.is_alive():
                break
        assert [e.detached for e in ends] == [True], "attach went on following a run for a reader that is gone"
        assert load_run(run, alive=lambda pid, st: True).state == RUNNING  # the run is untouched
    finally:
        out.close()


def test_a_wait_below_min_is_a_countdown_in_status_and_the_panel_until_the_next_attempt_starts(tmp_path):
    """A host_wait event (the group below tasks.worker.min waits for hosts up to elastic.host_wait):
    status and the live panel count down from it, both with the same line; the next attempt's
    start ends the wait."""
    import io

    from rich.console import Console as RichConsole

    from launcher.record.view import RunModel
    from launcher.ui.panel import render
    from launcher.ui.runstatus import render_status

    waiting = [
        {"time": 10.0, "event": "run_start", "tasks": ["worker:0", "worker:1"]},
        {"time": 11.0, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": 0},
        {"time": 11.0, "event": "start", "task": "worker:1", "attempt": 0, "log_offset": 0},
        {"time": 30.0, "event": "host_lost", "host": "h1", "how": "unreachable", "attempt": 0},
        {"time": 31.0, "event": "host_wait", "hosts": ["h1", "h2"], "have": 1, "need": 3, "until": 91.0, "wait": 60.0,
         "attempt": 0},
    ]
    run = make_run(tmp_path, waiting, {})
    line = "waiting for 2 more hosts of worker (min 3): 41 s left of elastic.host_wait=60 s (h1, h2 not answering)"
    view = load_run(run, alive=lambda pid, st: True)
    assert view.state == RUNNING and view.waiting["until"] == 91.0
    assert line in render_status(view, "cluster.yaml", now=50.0)
    assert view.to_json()["waiting"] == {"hosts": ["h1", "h2"], "have": 1, "need": 3, "until": 91.0, "wait": 60.0,
                                         "attempt": 0}
    out = io.StringIO()
    RichConsole(file=out, width=300, color_system=None).print(render(view.view.snapshot(), 50.0, 300))
    assert line in out.getvalue(), out.getvalue()
    # The next attempt starts: no wait any more, in status or in the panel.
    live = RunModel()
    for event in [*waiting, {"time": 60.0, "event": "host_added", "host": "h1", "attempt": 0, "spare": False},
                  {"time": 61.0, "event": "restart", "attempt": 1}]:
        live.event(event)
    assert live.run.waiting is None
    out = io.StringIO()
    RichConsole(file=out, width=300, color_system=None).print(render(live.snapshot(), 62.0, 300))
    assert "waiting for" not in out.getvalue()
    # A run that ended is not waiting, whatever its last wait said.
    ended = load_run(make_run(tmp_path / "ended", [*waiting, {"time": 92.0, "event": "outcome", "outcome": "failed",
                                                               "exit_code": 1, "attempts": 1}], {}),
                     alive=lambda pid, st: True)
    assert ended.waiting is None and not any("waiting for" in x for x in render_status(ended, "c.yaml", now=50.0))


def test_events_written_before_the_record_exists_are_its_first_lines(tmp_path):
    """The preflight's wait for hosts below min happens before the record is made: its host_wait
    events are written first once it is; a run that never starts leaves nothing."""
    from launcher.plan.build import Placement, Slot, build_plan
    from launcher.loader.load import parse_spec
    from launcher.record import events as ev
    from launcher.record.writer import RunRecord

    spec = parse_spec("name: t\nstrategy: multi_worker_mirrored\nbackend: local\nentrypoint: x\ntasks: {worker: 1}\n")
    plan = build_plan(spec, Placement({"worker:0": Slot("localhost", "localhost")}))
    record = RunRecord(tmp_path / "runs", plan)
    record.write_early(ev.HostWait(hosts=["h2"], have=1, need=2, until=100.0, wait=30.0))
    record.write(ev.StateSyncMode(mode="shared"))  # (not early: dropped, as before the record exists)
    assert not record.dir.exists()
    record.create()
    record.write(ev.RunStart(run_id=record.run_id, name="t", strategy="multi_worker_mirrored", backend="local",
                             tasks=["worker:0"]))
    record.close()
    kinds = [json.loads(line)["event"] for line in (record.dir / "events.jsonl").read_text().splitlines()]
    assert kinds == ["host_wait", "run_start"]
    never = RunRecord(tmp_path / "never", plan)
    never.write_early(ev.HostWait(hosts=["h2"], have=1, need=2, until=100.0, wait=30.0))
    never.close()
    assert not (tmp_path / "never").exists()


def test_attach_to_a_run_that_failed_before_it_names_each_failed_task_and_why(tmp_path):
    """A run that ended before ``attach`` (a detached run whose task stalled while the user took its
    stacks): attach prints the status block and the outcome, and the failures `up` said live, each
    task's with its reason; a task that only stopped as a consequence is named by none."""
    import io

    from launcher.app.attach import attach
    from launcher.loader.load import parse_spec
    from launcher.spec.model import LoadedSpec
    from launcher.ui.attachtext import TextRenderer
    from launcher.ui.console import Console

    why = "stuck 30 s at train.py:158 in silent_stall(): time.sleep(100000) (limit 30 s: watchdog.hang_timeout=30)"
    events = [{"time": 1.0, "event": "run_start"},
              {"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0},
              {"time": 2.0, "event": "start", "task": "worker:1", "attempt": 0},
              {"time": 40.0, "event": "failure", "task": "worker:1", "reason": why},
              {"time": 41.0, "event": "stopped", "task": "worker:0", "code": -15},
              {"time": 42.0, "event": "outcome", "outcome": "failed", "exit_code": 1, "attempts": 1,
               "reason": "gave up after 1 attempt(s): restart.max_restarts is 0; raise it to retry more"}]
    make_run(tmp_path, events, {})
    spec = tmp_path / "cluster.yaml"
    spec.write_text("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n")
    out, err = io.StringIO(), io.StringIO()
    console = Console(out=out, err=err)
    ended = attach(LoadedSpec(parse_spec(spec.read_text()), spec), console, TextRenderer(console, str(spec)))
    said = out.getvalue() + err.getvalue()
    assert ended.final.state == "failed" and "gave up after 1 attempt(s)" in said, said
    assert f"worker:1 failed: {why}" in said, said
    assert "worker:0 failed" not in said, said
