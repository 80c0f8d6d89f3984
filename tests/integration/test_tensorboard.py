"""TensorBoard, with real TensorFlow processes through ``tfcluster up``:

* a user script written like the official "Multi-worker training with Keras" tutorial, with
  ``tf.keras.callbacks.TensorBoard(log_dir)`` under MultiWorkerMirroredStrategy (2 workers),
  writes event files whose epoch scalars are the script's own History;
* ``python -m worker`` writes the chief's training scalars to ``state/tensorboard/train`` (next
  to the MWMS evaluator's ``eval``, one point per epoch's checkpoint), one writer only, and their
  values are the ``tfcluster-epoch`` lines' (examples/s also against the step lines' own
  timestamps): model.fit's here, the custom loop's on test_worker_metrics.py's run of it
  (tests/support/tfrun.py check_train_scalars);
* ``tfcluster tensorboard FILE`` serves those logs: TensorBoard's HTTP API returns the runs and
  the same values.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.tfrun import check_train_scalars, progress, run_dir, tensorboard_scalars, up, write_spec
from tests.support.cli import start_tfcluster
from tests.support.ports import free_base
from tests.support.prereq import require
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.tf]

BATCH, EPOCHS, STEPS, LR = 16, 2, 10, 0.002
ARGS = (f"--epochs {EPOCHS} --steps-per-epoch {STEPS} --batch-size {BATCH} --learning-rate {LR} "
        f"--step-delay 0.05 --progress-every {STEPS // 2}")


@pytest.fixture(autouse=True)
def _tensorboard():
    import importlib.util

    require(importlib.util.find_spec("tensorboard") is not None,
            "tensorboard is not installed (pip install -e '.[tf]')")


TUTORIAL = """\
import json, os, sys

import numpy as np
import tensorflow as tf

# As in the tutorial: the strategy first, from TF_CONFIG (set by tfcluster).
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("tutorial: keras module", tf.keras.__name__, "workers", len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]),
      flush=True)

# The tutorial's mnist_dataset(), offline: random 28x28 images with learnable labels.
rng = np.random.RandomState(0)
x = rng.rand(512, 28, 28).astype("float32")
y = (x.reshape(512, -1).mean(axis=1) > 0.5).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).repeat().batch(64)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.01), metrics=["accuracy"])

log_dir = sys.argv[1]
history = model.fit(dataset, epochs=3, steps_per_epoch=4, callbacks=[tf.keras.callbacks.TensorBoard(log_dir=log_dir)],
                    verbose=0)
print("tutorial-history " + json.dumps(history.history), flush=True)
"""


def test_tutorial_tensorboard_callback_under_mwms_writes_event_files(tmp_path, tfds_dir):
    script = tmp_path / "tutorial.py"
    script.write_text(TUTORIAL)
    logs = tmp_path / "logs"
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} {script} {logs}", tasks="{worker: 2}")
    result = up(spec)
    out = result.stdout + result.stderr
    # Without the tensorboard package this fails with TBNotInstalledError in tf.summary.scalar.
    assert result.returncode == 0, out[-5000:]
    assert "TBNotInstalledError" not in out
    # tf.keras is tf_keras here (TF_USE_LEGACY_KERAS=1, set by tfcluster under MWMS).
    modules = [line for line in out.splitlines() if "tutorial: keras module" in line]
    assert len(modules) == 2 and all("tf_keras" in line for line in modules), modules or out[-3000:]
    histories = {}
    for line in out.splitlines():
        if "tutorial-history " in line:
            histories[line.split("]", 1)[0].lstrip("[")] = json.loads(line.split("tutorial-history ", 1)[1])
    assert set(histories) == {"worker:0", "worker:1"}, out[-3000:]
    history = histories["worker:0"]
    # The chief writes the real logs; worker 1's temporary copy is removed by tf_keras.
    assert sorted(p.name for p in logs.iterdir()) == ["train"], list(logs.iterdir())
    train_files = list((logs / "train").glob("events.out.tfevents.*"))
    assert len(train_files) == 1, train_files
    scalars = tensorboard_scalars(logs / "train", only_scalars=False)  # the callback also writes the model's config
    epoch_loss = sorted((s, v) for t, s, v in scalars if t == "epoch_loss")
    epoch_acc = sorted((s, v) for t, s, v in scalars if t == "epoch_accuracy")
    assert [s for s, _ in epoch_loss] == [0, 1, 2] == [s for s, _ in epoch_acc], scalars
    # The callback's values are the script's History (every callback sees the same logs).
    assert [v for _, v in epoch_loss] == pytest.approx(history["loss"], rel=1e-5), (epoch_loss, history)
    assert [v for _, v in epoch_acc] == pytest.approx(history["accuracy"], rel=1e-5), (epoch_acc, history)
    assert all(0.0 <= v <= 1.0 for _, v in epoch_acc), epoch_acc


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read().decode())


def serve_and_read(spec: Path, port: int) -> tuple[list[str], list]:
    """``tfcluster tensorboard FILE --port N``: the runs it serves and the train loss series,
    through TensorBoard's HTTP API; then Ctrl-C (SIGINT) stops it and its TensorBoard."""
    proc = start_tfcluster("tensorboard", spec, "--port", port)
    try:
        served = {"runs": [], "loss": []}

        def all_served() -> bool:
            try:
                served["runs"] = sorted(get_json(f"http://127.0.0.1:{port}/data/runs"))
                if {"train", "eval"} <= set(served["runs"]):
                    served["loss"] = get_json(f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=train&tag=loss")
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            return len(served["loss"]) == EPOCHS

        wait_for(all_served, 90, 1.0, what=f"TensorBoard to serve the train and eval runs, {EPOCHS} train loss points",
                 detail=lambda: f"served: {served}", proc=proc)
        runs, loss = served["runs"], served["loss"]
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, output[-3000:]
        assert "tfcluster: tensorboard stopped" in output, output[-3000:]
        return runs, loss
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_worker_train_scalars_match_the_epoch_lines_and_tfcluster_tensorboard_serves_them(tmp_path, tfds_dir):
    """model.fit's (the custom loop's: test_worker_metrics.py, on its run)."""
    spec = write_spec(tmp_path, tfds_dir, f"python -m worker {ARGS} --loop fit", tasks="{worker: 2, evaluator: 1}")
    result = up(spec)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    scalars = check_train_scalars(spec, out, epochs=EPOCHS, steps=STEPS, global_batch=BATCH * 2, learning_rate=LR)
    # The MWMS evaluator evaluated each epoch's checkpoint, and its run sits next to train/, at
    # the same global steps.
    lines = progress(out, "eval", "evaluator:0")
    assert [(e["checkpoint"], e["global_step"]) for e in lines] == [
        (f"ckpt-{i + 1:03d}", str(STEPS * (i + 1))) for i in range(EPOCHS)], lines
    assert all(0.0 <= float(e["accuracy"]) <= 1.0 and float(e["loss"]) > 0 for e in lines), lines
    evals = tensorboard_scalars(run_dir(spec).parent / "state" / "tensorboard" / "eval")
    assert sorted((t, s) for t, s, _ in evals) == sorted(
        (t, STEPS * (i + 1)) for t in ("accuracy", "loss") for i in range(EPOCHS)), evals
    # tfcluster tensorboard: TensorBoard's own reading of the same files.
    runs, loss = serve_and_read(spec, free_base(1))
    assert {"train", "eval"} <= set(runs), runs
    assert [(step, value) for _, step, value in loss] == [(step, pytest.approx(value)) for step, value in scalars["loss"]], (loss, scalars["loss"])
