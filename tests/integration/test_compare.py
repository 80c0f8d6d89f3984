"""``tfcluster compare`` end to end on this machine: three configurations through ``tfcluster
up``'s own path (default, one replica; mirrored on 2 logical CPUs; and tpu, which fails here
because there is no TPU and must become a row with its error, the worker's one line naming why,
not retried). Checks the CSV and JSON rows and
columns, the numbers against the run logs, report.md, the three plots and the TensorBoard logs.
(Each single-host strategy trains end to end through ``up`` in test_strategies.py; the spec each
configuration gets, every strategy's, in tests/unit/compare/: a fourth and fifth TensorFlow run
here would check what those do.)"""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest

from launcher.compare.report import COLUMNS
from launcher.compare.tensorboard import no_tensorflow
from tests.support.records import read_records
from tests.support.tfrun import cold_restarts, write_spec
import launcher.record.events as ev
from tests.support.cli import tfcluster
from tests.support.prereq import require
from tests.support.processes import pids_with_env
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.tf]
STRATEGIES = ("default", "mirrored", "tpu")
OK = {"default": 1, "mirrored": 2}  # -> replicas
BATCH, EPOCHS, EVERY = 32, 2, 4


def _step_marks(log: Path) -> tuple[float, list[tuple[int, float]], int]:
    """(first step's time, [(global_step, time) of every step line], global batch) read with
    a regex, independently of launcher/contract/progress.py."""
    text = log.read_text()
    first = float(re.search(r"^tfcluster-first_step .*time=([\d.]+)", text, re.M).group(1))
    batch = int(re.search(r"^tfcluster-start .*global_batch=(\d+)", text, re.M).group(1))
    steps = [(int(g), float(t)) for g, t in re.findall(r"^tfcluster-step .*global_step=(\d+) .*time=([\d.]+)", text,
                                                         re.M)]
    return first, steps, batch


@pytest.mark.timeout(900)  # three TensorFlow runs one after another on a shared 2-core machine
def test_compare_three_configurations_with_one_failing(tmp_path, tfds_dir):
    require(all(__import__("importlib").util.find_spec(m) for m in ("matplotlib", "PIL", "tensorboard")),
            "matplotlib, Pillow and tensorboard are not installed (pip install -e '.[compare]')")
    # Restarts allowed (cold: no standby waits for them), which the failing configuration must not spend.
    spec = write_spec(tmp_path, tfds_dir, f"python -m worker --epochs {EPOCHS} --batch-size {BATCH}",
                      extra=cold_restarts(3))
    result = tfcluster("compare", spec, "--strategies", ",".join(STRATEGIES), "--target-accuracy", "0.5",
                       "--progress-every", EVERY, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]  # one configuration failed; everything is still written
    dirs = list((tmp_path / "runs" / "demo" / "compare").iterdir())
    assert len(dirs) == 1, dirs
    outdir = dirs[0]

    # The live progress lines (not a TTY: one per phase), k of n, elapsed.
    for k, name in enumerate(STRATEGIES, 1):
        assert re.search(rf"^\[{k}/3\] {name}: .*, \d+ s$", result.stderr, re.M), result.stderr[-3000:]
    assert re.search(r"^\[3/3\] tpu: failed: worker:0 failed: exit code 2: worker: error: TPU 'local' not usable",
                     result.stderr, re.M), result.stderr[-3000:]
    assert "Traceback" not in out

    # results.csv: every configuration a row, every column.
    with open(outdir / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["config"] for r in rows] == list(STRATEGIES)
    assert tuple(rows[0]) == COLUMNS
    data = json.loads((outdir / "results.json").read_text())
    assert [c["config"] for c in data["configs"]] == list(STRATEGIES) and data["columns"] == list(COLUMNS)

    for row, cfg in zip(rows, data["configs"]):
        name = row["config"]
        if name == "tpu":
            assert (row["status"], row["exit_code"], row["examples_per_sec"]) == ("failed", "1", "")
            assert "TPU 'local' not usable" in row["error"] and "this machine has no TPU" in row["error"]
            assert "TPU 'local' not usable" in cfg["error"]
            # each run keeps its outcome; its exit code is what the CLI maps that outcome to
            assert [(r["outcome"], r["exit_code"]) for r in cfg["runs"]] == [("failed", 1)], cfg["runs"]
            # The worker's own error through `up`'s path, the one TensorFlow run of a strategy that
            # cannot start: one line of the worker's, TensorFlow's words in it, no traceback; exit 2
            # not retried with restarts left (the decision for every exit code, at unit speed:
            # test_supervisor_scripted.py::test_default_permanent_exit_codes).
            record = Path(cfg["runs"][0]["record"])
            said = (record / "logs" / "worker-0.log").read_text()
            errors = [line for line in said.splitlines() if "worker: error:" in line]
            assert len(errors) == 1 and "this machine has no TPU" in errors[0], said[-3000:]
            assert ("TPU 'local' not usable: initialising it with TPUClusterResolver(tpu='local') failed (NotFoundError: "
                    "TPUs not found in the cluster.") in errors[0], errors
            assert "Traceback" not in said
            console = (outdir / "logs" / "tpu.txt").read_text()
            assert "failed: exit code 2 (attempt 1 of 4)" in console and "not retried" in console, console[-3000:]
            assert [type(e) for e in read_records(record)].count(ev.Start) == 1
            continue
        assert row["status"] == "ok" and row["error"] == "" and row["exit_code"] == "0", row
        assert [(r["outcome"], r["exit_code"]) for r in cfg["runs"]] == [("succeeded", 0)]
        replicas = OK[name]
        assert (int(row["replicas"]), int(row["global_batch"]), int(row["tasks"])) == (replicas, BATCH * replicas, 1)
        assert row["devices"] == ("cpus=2" if replicas == 2 else "-")
        for col in ("train_accuracy", "test_accuracy"):
            assert 0.0 <= float(row[col]) <= 1.0, (name, col, row[col])
        assert float(row["test_accuracy"]) > 0.2, row  # above chance (10 classes)
        assert float(row["test_loss"]) > 0 and float(row["train_loss"]) > 0
        wall = float(row["wall_s"])
        assert 0 < float(row["time_to_first_step_s"]) < wall
        assert 0 < float(row["time_per_epoch_s"]) < wall
        assert float(row["time_to_first_step_s"]) < float(row["time_to_target_s"]) <= wall
        # Its goodput (from the run's record): trained time over wall time, the first step's startup not in it.
        assert 0 < float(row["goodput"]) < 1 - float(row["time_to_first_step_s"]) / wall + 0.01, row
        assert cfg["runs"][0]["badput"]["startup"] > 0 and cfg["runs"][0]["badput"]["recovery"] == 0, cfg["runs"][0]

        # examples/s against the log, read independently: the median of (steps x batch / time)
        # between the first step and each step line, and the overall rate as a bound.
        run = cfg["runs"][0]
        record = Path(run["record"])
        first, steps, batch = _step_marks(record / "logs" / "worker-0.progress")  # (its records)
        marks = [(1, first)] + steps
        rates = [(s1 - s0) * batch / (t1 - t0) for (s0, t0), (s1, t1) in zip(marks, marks[1:])]
        median = float(row["examples_per_sec"])
        assert median > 0 and median == pytest.approx(statistics.median(rates), rel=0.01), (name, median, rates)
        overall = (steps[-1][0] - 1) * batch / (steps[-1][1] - first)
        assert median >= 0.5 * overall, (name, median, overall)  # steps alone are not slower than the whole
        # The curve: one test accuracy per epoch, examples = global step x global batch.
        per_epoch = -(-1437 // batch)  # digits: 1437 training examples, one pass per epoch
        assert [c["examples"] for c in run["curve"]] == [e * per_epoch * batch for e in range(1, EPOCHS + 1)]
        assert run["curve"][-1]["test_accuracy"] == pytest.approx(float(row["test_accuracy"]), abs=1e-4)
        assert (outdir / "tensorboard" / name).is_dir()
        assert wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", record.name), 15, what="the run's tasks to exit")

    # report.md: the table, the machine, honest notes, the plots.
    md = (outdir / "report.md").read_text()
    cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("model name"))
    assert f"- CPU: {cpu}, " in md and "TensorFlow 2." in md and "- GPUs: none" in md
    assert "| configuration | tasks | replicas |" in md
    for name in STRATEGIES:
        assert f"| {name} | worker:1 |" in md
    assert "\n- mirrored: the replicas are logical CPU devices" in md and "not a speed-up" in md
    assert "tpu failed: worker:0 failed: exit code 2" in md
    assert (outdir / "specs" / "mirrored.yaml").read_text().count("cpus: 2") == 1

    # The three plots: PNGs of a sensible size, not blank.
    from PIL import Image

    for png in ("throughput.png", "accuracy.png", "epoch_time.png"):
        assert f"![{png}]({png})" in md
        path = outdir / png
        assert path.stat().st_size > 10_000, png
        with Image.open(path) as image:
            assert image.format == "PNG" and 600 <= image.width <= 1400 and 400 <= image.height <= 800, image.size
            assert len(image.convert("L").getcolors(maxcolors=1 << 16) or ()) > 20  # drawn on, not an empty canvas

    # TensorBoard: each configuration's scalars, readable by TensorBoard itself.
    no_tensorflow()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(outdir / "tensorboard" / "mirrored"))
    acc.Reload()
    assert {"train/loss", "train/examples_per_sec", "test/accuracy"} <= set(acc.Tags()["scalars"])
    assert len(acc.Scalars("test/accuracy")) == EPOCHS
