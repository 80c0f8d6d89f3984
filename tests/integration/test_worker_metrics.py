"""Every number the worker prints is true: epoch loss/accuracy are the same with
graceful preemption on and off (its in-graph flag must not change how tf_keras reduces the
step's logs across workers), accuracy lies in [0, 1], the result line's training metrics are
History's, and examples/s agrees with steps x batch / elapsed taken from the progress lines'
own timestamps; under MultiWorkerMirrored the chief's TensorBoard scalars are its epoch lines'
(the custom loop's only here; model.fit's also in test_tensorboard.py, beside ``tfcluster
tensorboard`` serving them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tfrun import check_train_scalars, progress, up, write_spec
from tests.support.approx import flat

pytestmark = [pytest.mark.integration, pytest.mark.tf]

BATCH, EPOCHS, STEPS, LR = 16, 2, 12, 0.002  # (LR: not the default 1e-3, so its scalar shows the flag arrived)
ARGS = (f"--epochs {EPOCHS} --steps-per-epoch {STEPS} --batch-size {BATCH} --learning-rate {LR} --step-delay 0.05 "
        "--progress-every 4")


def train(tmp_path, tfds_dir, strategy: str, tasks: str, flags: str) -> tuple[Path, str]:
    spec = write_spec(tmp_path, tfds_dir, f"python -m worker {ARGS} {flags}", tasks=tasks, strategy=strategy)
    result = up(spec)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return spec, result.stdout


def check_numbers(out: str, task: str, batch: int, step_metrics: bool = True) -> tuple[list[tuple[float, float]], dict]:
    """Sanity and cross-checks on one task's lines; returns its epoch (loss, accuracy) and result."""
    [start] = progress(out, "start", task)
    assert int(start["global_batch"]) == batch, start
    # The totals the live panel shows progress against.
    assert (int(start["epochs"]), int(start["steps_per_epoch"])) == (EPOCHS, STEPS), start
    epochs = progress(out, "epoch", task)
    assert [int(e["epoch"]) for e in epochs] == list(range(1, EPOCHS + 1)), out[-3000:]
    metrics = [(float(e["loss"]), float(e["accuracy"])) for e in epochs]
    for loss, accuracy in metrics:
        assert 0.0 <= accuracy <= 1.0 and 0.0 < loss < 5.0, metrics
    [result] = progress(out, "result", task)
    assert 0.0 <= float(result["accuracy"]) <= 1.0 and 0.0 < float(result["loss"]) < 5.0, result
    # Batch-level logs (what a per-step TensorBoard or live view sees): the step line at an
    # epoch's last step carries the epoch's running metrics, so it equals the epoch line.
    step_lines = {(s["epoch"], s["step"]): s for s in progress(out, "step", task)}
    for i, (loss, accuracy) in enumerate(metrics if step_metrics else ()):
        last = step_lines[(str(i), str(STEPS))]
        assert (float(last["loss"]), float(last["accuracy"])) == pytest.approx((loss, accuracy), abs=2e-4), last
    # The result's training metrics are the last epoch's, as History holds them.
    assert (float(result["train_loss"]), float(result["train_accuracy"])) == metrics[-1], (result, metrics)
    # examples/s against an independent measure: the steps after the first, over the time from
    # the first step's line to the last step's line (not the last epoch's line, which comes
    # after the final checkpoint's save: not training time). Under PSS a step line says when
    # the step was scheduled, not done (the coordinator's steps are asynchronous): there the
    # end is the last epoch line's time, when fit had joined the epoch's steps (before its
    # saves, which are not training time either).
    [first] = progress(out, "first_step", task)
    # The first step's position agrees with itself: global step = epoch * steps + step + 1.
    assert int(first["global_step"]) == int(first["epoch"]) * STEPS + int(first["step"]) + 1, first
    times = [float(first["time"])] + [float(s["time"]) for s in step_lines.values()] + [float(epochs[-1]["time"])]
    assert times == sorted(times), times  # every step line stamped, in order, within the training
    steps = int(result.get("global_step") or result["steps_run"]) - 1
    end = step_lines[(str(EPOCHS - 1), str(STEPS))] if step_metrics else epochs[-1]
    independent = steps * batch / (float(end["time"]) - float(first["time"]))
    assert abs(float(result["examples_per_sec"]) - independent) <= 0.25 * independent, (result, independent)
    if not step_metrics:  # PSS: no step is done before it is scheduled, so no faster than that
        last = step_lines[(str(EPOCHS - 1), str(STEPS))]
        scheduled = steps * batch / (float(last["time"]) - float(first["time"]))
        assert float(result["examples_per_sec"]) <= 1.05 * scheduled, (result, scheduled)
    return metrics, result


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_mwms_metrics_equal_with_and_without_graceful_preemption(tmp_path, tfds_dir, loop):
    """The in-graph preemption flag must not change how tf_keras reduces the step's logs: where it
    did, fit's epoch accuracy was summed over the two workers (above 1). The custom loop runs the
    same graph either way (the flag is a host-side value fed to its step, reduced apart from the
    loss: worker/sync.py), so it is checked with the flag on only."""
    runs = {}
    modes = (("on", ""), ("off", "--no-graceful-preemption")) if loop == "fit" else (("on", ""),)
    for name, flags in modes:
        (tmp_path / name).mkdir()
        spec, out = train(tmp_path / name, tfds_dir, "multi_worker_mirrored", "{worker: 2}", f"--loop {loop} {flags}")
        runs[name] = [check_numbers(out, f"worker:{i}", BATCH * 2) for i in (0, 1)]
        if name == "on":  # the chief's TensorBoard scalars are its epoch lines' (test_tensorboard.py: fit's too)
            check_train_scalars(spec, out, epochs=EPOCHS, steps=STEPS, global_batch=BATCH * 2, learning_rate=LR)
    for i in (0, 1) if "off" in runs else ():
        assert flat(runs["on"][i][0]) == pytest.approx(flat(runs["off"][i][0]), abs=2e-3), (runs["on"][i], runs["off"][i])
    # One replica per CPU worker: 2 in sync; both workers report the same (global) metrics.
    assert progress(out, "start", "worker:1")[0]["replicas"] == "2"
    assert runs["on"][0][0] == runs["on"][1][0]
    assert runs["on"][0][1]["accuracy"] == runs["on"][1][1]["accuracy"]
    assert float(runs["on"][0][1]["accuracy"]) > 0.2  # above chance (10 classes)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_pss_metrics_are_sane_and_cross_checked(tmp_path, tfds_dir, loop):
    _, out = train(tmp_path, tfds_dir, "parameter_server", "{chief: 1, worker: 2, ps: 1}", f"--loop {loop}")
    # A PSS step is one worker's batch; its step lines carry no metrics (tf_keras gives the
    # coordinator's callbacks remote values per batch).
    _, result = check_numbers(out, "chief:0", BATCH, step_metrics=False)
    [start] = progress(out, "start", "chief:0")
    assert (start["replicas"], start["workers"]) == ("1", "2"), start
    assert float(result["accuracy"]) > 0.2, result  # above chance (10 classes)
