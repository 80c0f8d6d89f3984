"""tfcluster compare's pure parts: deriving configurations, reading a run's figures from its
events and progress lines, medians over repeats, the tables and the report; the plots."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import statistics

import pytest
import yaml

from launcher.cli.main import main
from launcher.compare import report
from launcher.compare.configs import Config, Options, configurations, derive, parse_strategies
from launcher.compare.measure import FAILED, OK, Measurement, error_text, measure
from launcher.contract.progress import Throughput, format_line
from launcher.errors import SpecError
from launcher.loader.load import parse_spec

RAW = {
    "name": "demo", "strategy": "multi_worker_mirrored", "entrypoint": "python -m worker --epochs 2",
    "tasks": {"worker": 3, "evaluator": 1}, "ports": {"base": 23456}, "env": {"A": "1"},
}
SIX = "default,one_device,mirrored,central_storage,multi_worker_mirrored,parameter_server"


# ------------------------------------------------------------------ configurations

def test_parse_strategies_names_the_unknown_one_and_the_valid_ones():
    assert parse_strategies(" default, mirrored ") == ("default", "mirrored")
    with pytest.raises(ValueError, match="unknown strategy 'mirorred'; use some of multi_worker_mirrored"):
        parse_strategies("default,mirorred")
    with pytest.raises(ValueError, match="listed twice"):
        parse_strategies("default,default")
    with pytest.raises(ValueError, match="empty"):
        parse_strategies(" , ")


@pytest.mark.parametrize("strategy, tasks, devices", [
    ("default", {"worker": 1}, None),
    ("one_device", {"worker": 1}, None),
    ("mirrored", {"worker": 1}, {"cpus": 2}),
    ("central_storage", {"worker": 1}, {"cpus": 2}),
    ("multi_worker_mirrored", {"worker": 3}, None),  # the spec's own tasks, without the evaluator
    ("parameter_server", {"chief": 1, "ps": 1, "worker": 2}, None),
    ("tpu", {"worker": 1}, None),
])
def test_each_strategy_gets_the_tasks_and_devices_it_needs_and_passes_validation(strategy, tasks, devices):
    spec = derive(RAW, strategy, strategy, Options(), "/tmp/out/runs")
    assert spec["strategy"] == strategy and spec["tasks"] == tasks and spec.get("devices") == devices
    assert spec["name"] == f"demo-{strategy}" and spec["run_dir"] == "/tmp/out/runs"
    assert spec["env"] == {"A": "1", "TFCLUSTER_EPOCH_EVAL": "1", "TFCLUSTER_PROGRESS_EVERY": "5"}
    assert spec["entrypoint"] == RAW["entrypoint"]  # the same training everywhere
    parsed = parse_spec(yaml.safe_dump(spec), "derived.yaml")  # what tfcluster up would accept
    assert parsed.strategy == strategy
    assert RAW["tasks"] == {"worker": 3, "evaluator": 1}  # the user's spec is not modified


def test_derived_devices_follow_the_spec_and_the_options():
    raw = {**RAW, "strategy": "mirrored", "tasks": {"worker": 1}, "devices": {"cpus": 4, "gpus": 0}, "tpu": None}
    assert derive(raw, "central_storage", "c", Options(), "r")["devices"] == {"cpus": 4, "gpus": 0}
    assert derive(raw, "default", "d", Options(), "r")["devices"] == {"gpus": 0}  # no CPU split for the baseline
    assert derive(raw, "multi_worker_mirrored", "m", Options(workers=4), "r")["tasks"] == {"worker": 4}
    assert "devices" not in derive({**RAW}, "mirrored", "m", Options(cpus=0), "r")  # --cpus 0: GPUs as found
    assert "tpu" not in derive(raw, "mirrored", "m", Options(), "r")


@pytest.mark.parametrize("strategy, tasks, devices", [
    ("default", {"worker": 1}, {"gpus": 1}),
    ("one_device", {"worker": 1}, {"gpus": 1}),
    ("mirrored", {"worker": 1}, {"gpus": 4}),
    ("central_storage", {"worker": 1}, {"gpus": 4}),
    ("multi_worker_mirrored", {"worker": {"count": 4, "gpus": 1}}, {"gpus": 4}),
    ("parameter_server", {"chief": 1, "ps": 1, "worker": {"count": 4, "gpus": 1}}, {"gpus": 4}),
])
def test_compare_on_gpus_mirrored_over_n_mwms_a_gpu_per_worker_default_on_one(strategy, tasks, devices, monkeypatch,
                                                                            tmp_path):
    from launcher.app.up import plan_for
    from tests.support.gpus import fake_gpus

    spec = derive({**RAW, "devices": {"cpus": 2}}, strategy, strategy, Options(gpus=4), "/tmp/out/runs")
    assert spec["tasks"] == tasks and spec["devices"] == devices
    fake_gpus(monkeypatch, tmp_path, 4)
    plan = plan_for(parse_spec(yaml.safe_dump(spec), "derived.yaml"))
    gpu_tasks = {t.key: t.env_dict.get("CUDA_VISIBLE_DEVICES") for t in plan.tasks if t.type == "worker"}
    expected = {"default": {"worker:0": "0"}, "one_device": {"worker:0": "0"}, "mirrored": {"worker:0": "0,1,2,3"},
                "central_storage": {"worker:0": "0,1,2,3"}}.get(strategy, {f"worker:{i}": str(i) for i in range(4)})
    assert gpu_tasks == expected
    fake_gpus(monkeypatch, tmp_path, 2)  # fewer GPUs than --gpus: refused in one line
    if strategy != "default" and strategy != "one_device":
        with pytest.raises(SpecError, match=r"^localhost has 2 GPUs \(0,1\), not GPU 2,3 that devices.gpus asks for"):
            plan_for(parse_spec(yaml.safe_dump(spec), "derived.yaml"))


def test_compare_gpus_must_not_be_negative(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(RAW))
    assert main(["compare", str(path), "--gpus", "-1"]) == 2
    assert "--gpus must be >= 0" in capsys.readouterr().err


def test_a_single_host_strategy_keeps_the_first_host_of_an_ssh_spec():
    raw = {**RAW, "backend": "ssh", "hosts": [{"name": "a", "ssh": "u@a"}, {"name": "b", "ssh": "u@b"}],
           "tasks": {"worker": {"count": 2, "hosts": ["b", "a"]}}}
    spec = derive(raw, "mirrored", "m", Options(), "r")
    assert spec["tasks"] == {"worker": {"count": 1, "hosts": ["b"]}}
    assert parse_spec(yaml.safe_dump(spec)).tasks.group("worker").hosts == ("b",)


def test_configurations_label_strategies_or_files_and_never_twice():
    configs = configurations([("/x/cluster.yaml", RAW)], Options(strategies=parse_strategies(SIX)), "r")
    assert [c.label for c in configs] == SIX.split(",")
    assert [c.topology for c in configs][-2:] == ["worker:3", "chief:1 ps:1 worker:2"]
    assert [c.tasks for c in configs][-2:] == [3, 4] and configs[2].devices == "cpus=2"
    two = configurations([("/x/a.yaml", RAW), ("/y/a.yaml", RAW)], Options(strategies=("default",)), "r")
    assert [c.label for c in two] == ["a-default", "a-default-2"]
    as_is = configurations([("/x/small.yaml", RAW), ("/x/big.yaml", {**RAW, "tasks": {"worker": 4}})], Options(), "r")
    assert [(c.label, c.strategy, c.spec["tasks"]) for c in as_is] == [
        ("small", "multi_worker_mirrored", RAW["tasks"]), ("big", "multi_worker_mirrored", {"worker": 4})]


# ------------------------------------------------------------------ Throughput intervals

def test_throughput_intervals():
    t = Throughput(batch=10, keep_intervals=True)
    for step, when in [(1, 0.0), (6, 1.0), (11, 2.0), (16, 12.0), (21, 13.0)]:
        t.mark(step, when)
    assert [rate for _, _, rate in t.intervals()] == [50.0, 50.0, 5.0, 50.0]
    assert t.rate() == pytest.approx(20 * 10 / 13.0)  # the overall figure still counts it
    with pytest.raises(ValueError):
        Throughput(batch=10).intervals()


# ------------------------------------------------------------------ measure

T0 = 1_000.0


def _lines(first_step_at=T0 + 20, start_global=0, step_times=(21.0, 22.0, 23.0, 27.0, 28.0), every=5, batch=64,
           epochs=((10, 23.5, 0.5), (20, 28.5, 0.9))):
    out = [format_line("start", epoch=0, step=0, global_step=start_global, time=T0 + 19, strategy="mirrored",
                       replicas=2, global_batch=batch),
           format_line("first_step", epoch=0, step=0, time=first_step_at)]
    for i, when in enumerate(step_times):
        out.append(format_line("step", epoch=0, step=5, global_step=start_global + every * (i + 1), loss=1.0,
                               accuracy=0.5, time=T0 + when))
        for gs, at, acc in epochs:
            if gs == start_global + every * (i + 1):
                out.append(format_line("epoch", epoch=gs // 10, global_step=gs, loss=0.5, accuracy=0.8,
                                       test_loss=0.4, test_accuracy=acc, time=T0 + at))
    out.append(format_line("result", task="worker:0", steps_run=25, examples_per_sec=300.0, accuracy=0.9,
                           loss=0.3, train_loss=0.5, train_accuracy=0.8))
    return ["worker: some output"] + out


def _events(outcome="succeeded", failure=None):
    events = [{"time": T0, "event": "run_start"}, {"time": T0 + 0.5, "event": "start", "task": "worker:0"}]
    if failure:
        events.append({"time": T0 + 5, "event": "failure", **failure})
    return events + [{"time": T0 + 30, "event": "outcome", "outcome": outcome, "attempts": 1}]


def test_measure_reads_every_figure_from_events_and_progress_lines():
    m = measure(_events(), _lines(), target_accuracy=0.8)
    assert (m.status, m.outcome, m.error, m.attempts) == (OK, "succeeded", "", 1)
    assert m.exit_code is None  # the CLI's mapping gives it one (compare's driver, called from cli/compare.py)
    assert (m.replicas, m.global_batch) == (2, 64)
    assert m.time_to_first_step_s == 20.0 and m.wall_s == 30.0
    # Marks: first step (global 1) at 20, steps 5,10,15,20,25 at 21,22,23,27,28 (seconds after T0).
    expected = statistics.median([4 * 64 / 1.0, 5 * 64 / 1.0, 5 * 64 / 1.0, 5 * 64 / 4.0, 5 * 64 / 1.0])
    assert m.examples_per_sec == expected == 320.0
    assert m.examples_per_sec_overall == 300.0
    assert m.time_per_epoch_s == 5.0  # between the two epoch lines
    assert (m.test_accuracy, m.test_loss, m.train_accuracy, m.train_loss) == (0.9, 0.3, 0.8, 0.5)
    assert m.curve == [
        {"epoch": 1, "elapsed_s": 23.5, "examples": 640, "test_accuracy": 0.5, "test_loss": 0.4},
        {"epoch": 2, "elapsed_s": 28.5, "examples": 1280, "test_accuracy": 0.9, "test_loss": 0.4}]
    assert m.time_to_target_s == 28.5  # the first epoch at or above 0.8
    assert measure(_events(), _lines(), target_accuracy=0.95).time_to_target_s is None
    assert len(m.trace) == 5 and len(m.rates) == 5


def test_a_resumed_attempt_is_measured_from_its_own_first_step():
    first = _lines()[:4]  # start, first step and one step line of an attempt that was killed
    second = _lines(start_global=10, first_step_at=T0 + 40, step_times=(41.0, 42.0), epochs=((20, 42.5, 0.9),))
    m = measure(_events(), first + second)
    # Attempt 1: (1 -> 5) in 1 s; attempt 2: (11 -> 15) and (15 -> 20) in 1 s each; no interval across them.
    assert sorted(r["examples_per_sec"] for r in m.rates) == [4 * 64.0, 4 * 64.0, 5 * 64.0]
    assert m.time_per_epoch_s == 42.5 - 19  # one epoch in the last attempt: from its start line


def test_a_failed_run_keeps_its_error_in_one_line():
    failure = {"task": "worker:0", "reason": "exit code 2", "errors": [],
               "last_lines": ["I0000 noise", "worker: error: TPU 'local' not usable: no TPU", "bye"]}
    m = measure(_events("failed", failure), ["worker: starting"])
    assert (m.status, m.outcome, m.exit_code) == (FAILED, "failed", None)
    assert m.error == "worker:0 failed: exit code 2: worker: error: TPU 'local' not usable: no TPU"
    assert m.examples_per_sec is None and m.curve == []
    from launcher.record.events import Failure, RunOutcome

    with_exception = Failure(task="worker:1", reason="exit code 1", errors=["ValueError: bad shape"])
    assert error_text(with_exception, None) == "worker:1 failed: exit code 1: ValueError: bad shape"
    assert error_text(None, RunOutcome(outcome="failed", reason="hung")) == "hung"
    assert error_text(None, RunOutcome(outcome="failed")) == "failed"
    assert measure([], []).status == FAILED  # nothing recorded: not a success


# ------------------------------------------------------------------ report

def _config(label="mirrored", strategy="mirrored", devices=None, tasks=None):
    spec = {"tasks": tasks or {"worker": 1}}
    if devices:
        spec["devices"] = devices
    return Config(label=label, strategy=strategy, source="cluster.yaml", spec=spec)


def _ok(rate, accuracy, epoch=2.0):
    return Measurement(status=OK, exit_code=0, replicas=2, global_batch=64, examples_per_sec=rate,
                       test_accuracy=accuracy, time_per_epoch_s=epoch, time_to_first_step_s=10.0)


def test_rows_take_medians_and_min_max_over_successful_repeats():
    runs = [_ok(300.0, 0.8), _ok(100.0, 0.9), _ok(200.0, 0.85)]
    r = report.row(_config(devices={"cpus": 2}), runs, target_accuracy=0.8)
    assert (r["examples_per_sec"], r["examples_per_sec_min"], r["examples_per_sec_max"]) == (200.0, 100.0, 300.0)
    assert (r["test_accuracy"], r["test_accuracy_min"], r["test_accuracy_max"]) == (0.85, 0.8, 0.9)
    assert (r["runs"], r["ok_runs"], r["status"], r["replicas"], r["devices"]) == (3, 3, OK, 2, "cpus=2")
    failed = Measurement(status=FAILED, exit_code=1, error="worker:0 failed: boom")
    mixed = report.row(_config(), [_ok(300.0, 0.8), failed])
    assert (mixed["status"], mixed["examples_per_sec"], mixed["error"]) == ("1/2 ok", 300.0, "worker:0 failed: boom")
    dead = report.row(_config("tpu", "tpu"), [failed])
    assert (dead["status"], dead["examples_per_sec"], dead["exit_code"]) == (FAILED, None, 1)


def test_each_configuration_reports_its_runs_median_goodput():
    runs = [_ok(300.0, 0.8), _ok(100.0, 0.9), _ok(200.0, 0.85)]
    for m, g in zip(runs, (0.9, 0.5, 0.7)):
        m.goodput = g
    r = report.row(_config(), runs)
    assert r["goodput"] == 0.7
    lines = report.table([r]).splitlines()
    assert "| goodput |" in lines[0] and "| 70.0% |" in lines[2]


def test_csv_and_json_have_every_column_for_every_row():
    rows = [report.row(_config(), [_ok(300.0, 0.8)]), report.row(_config("tpu", "tpu"),
                                                                    [Measurement(error="no TPU")])]
    parsed = list(csv.DictReader(io.StringIO(report.to_csv(rows))))
    assert list(parsed[0]) == list(report.COLUMNS) and len(parsed) == 2
    assert parsed[0]["examples_per_sec"] == "300.0" and parsed[1]["error"] == "no TPU"
    assert parsed[1]["examples_per_sec"] == ""
    data = json.loads(report.to_json(rows, {"mirrored": [{"curve": []}]}, {"cores": 2}, {"id": "x"}))
    assert data["columns"] == list(report.COLUMNS) and data["configs"][0]["runs"] == [{"curve": []}]
    assert data["configs"][1]["runs"] == []


def test_report_has_the_machine_the_table_and_honest_notes():
    rows = [report.row(_config("default", "default"), [_ok(300.0, 0.8)]),
            report.row(_config(devices={"cpus": 2}), [_ok(200.0, 0.8), _ok(100.0, 0.7)]),
            report.row(_config("multi_worker_mirrored", "multi_worker_mirrored", tasks={"worker": 2}),
                       [_ok(150.0, 0.8)] * 2),
            report.row(_config("tpu", "tpu"), [Measurement(error="worker:0 failed: no TPU")] * 2)]
    machine = {"cpu": "AMD EPYC", "cores": 2, "gpus": [], "tensorflow": "2.21.0", "python": "3.11",
               "platform": "Linux", "hosts": 1, "load_average": {"start": 1.5, "end": 2.5}}
    text = report.markdown(rows, machine, {"id": "x", "command": "tfcluster compare c.yaml", "repeat": 2},
                           ["throughput.png"])
    assert "- CPU: AMD EPYC, 2 cores" in text and "- GPUs: none" in text and "TensorFlow 2.21.0" in text
    assert "| mirrored | worker:1 | 2 | cpus=2 | 64 | 10.0 (10.0-10.0) | 150 (100-200) |" in text
    assert "mirrored: the replicas are logical CPU devices" in text and "not a speed-up" in text
    assert "multi_worker_mirrored: every task is a process on this one machine" in text
    assert "tpu failed: worker:0 failed: no TPU" in text
    assert "Load average (1 min) was 1.5 at the start and 2.5 at the end" in text
    assert "![throughput.png](throughput.png)" in text
    with_gpus = report.notes(rows, {**machine, "gpus": ["GPU 0: T4"]}, {})
    assert not any("logical CPU devices" in n for n in with_gpus)


def test_plots_are_three_pngs_of_a_sensible_size(tmp_path):
    pytest.importorskip("matplotlib")  # the [compare] extra
    import matplotlib.image as mpimg

    rows = [report.row(_config("default", "default"), [_ok(300.0, 0.8)]),
            report.row(_config(devices={"cpus": 2}), [_ok(200.0, 0.8), _ok(100.0, 0.7)]),
            report.row(_config("tpu", "tpu"), [Measurement(error="no TPU")])]
    curve = [{"epoch": 1, "elapsed_s": 20.0, "examples": 640, "test_accuracy": 0.5, "test_loss": 1.0},
             {"epoch": 2, "elapsed_s": 25.0, "examples": 1280, "test_accuracy": 0.8, "test_loss": 0.5}]
    runs = {"default": [{"curve": curve}], "mirrored": [{"curve": curve}], "tpu": [{"curve": []}]}
    names = __import__("launcher.compare.plots", fromlist=["plot_all"]).plot_all(rows, runs, tmp_path, "t")
    assert names == ["throughput.png", "accuracy.png", "epoch_time.png"]
    for name in names:
        image = mpimg.imread(tmp_path / name)
        height, width = image.shape[:2]
        assert 300 <= height <= 1200 and 500 <= width <= 1600, (name, image.shape)
        assert image[..., :3].std() > 0.01  # not a blank canvas


# ------------------------------------------------------------------ command line

@pytest.mark.parametrize("argv, message", [
    (["compare", "cluster.yaml"], "give --strategies"),
    (["compare", "cluster.yaml", "--strategies", "default,mirorred"], "unknown strategy 'mirorred'"),
    (["compare", "cluster.yaml", "--strategies", "default", "--repeat", "0"], "--repeat must be >= 1"),
    (["compare", "cluster.yaml", "--strategies", "default", "--target-accuracy", "90"], "in (0, 1]"),
])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("tfcluster: error: ")


def test_a_bad_spec_fails_before_anything_runs(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("name: x\nstrategy: mirrored\nentrypoint: true\nbogus: 1\n")
    assert main(["compare", str(bad), "--strategies", "default"]) == 2
    assert f"{bad}:4: bogus" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ the live progress line

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_follows_the_log_in_place_on_a_terminal(tmp_path):
    from launcher.compare.run import ProgressLine
    from tests.support.waits import wait_for

    log = tmp_path / "worker-0.log"
    log.write_text("worker: importing\n")
    term = _Terminal()
    with ProgressLine(term, "[2/5] mirrored") as line:
        line.follow(log)
        with open(log, "a") as fh:
            fh.write(format_line("start", global_step=0, replicas=2, global_batch=64) + "\n")
            fh.write(format_line("epoch", epoch=1, global_step=23, test_accuracy=0.77) + "\n")
        wait_for(lambda: "epoch 1, step 23, test accuracy 0.77" in term.getvalue(), 10, what="the epoch")
        line.done("ok in 30 s")
    text = term.getvalue()
    assert text.startswith("\r\033[K[2/5] mirrored: ") and re.search(r"\r\033\[K\[2/5\] mirrored: epoch 1, step 23, "
                                                                      r"test accuracy 0\.77, \d+ s", text)
    assert text.endswith("\r\033[K[2/5] mirrored: ok in 30 s\n") and text.count("\n") == 1
    plain = io.StringIO()
    with ProgressLine(plain, "[1/1] x") as line:
        line.done("failed: boom")
    assert plain.getvalue() == "[1/1] x: failed: boom\n"  # no escape codes off a terminal


def test_a_derived_spec_with_a_secret_is_written_for_its_owner_alone(tmp_path):
    import stat

    from launcher.compare.run import write_derived_spec

    plain, secret = tmp_path / "plain.yaml", tmp_path / "secret.yaml"
    write_derived_spec(plain, {"name": "a", "env": {"LR": "0.1"}}, "# derived\n")
    write_derived_spec(secret, {"name": "a", "env": {"DATABASE_URL": "postgres://u:pw@h/db"}}, "# derived\n")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644 & ~umask
    assert secret.read_text().startswith("# derived\nname: a\n") and "postgres://u:pw@h/db" in secret.read_text()
