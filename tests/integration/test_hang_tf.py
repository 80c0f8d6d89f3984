"""A hang inside TensorFlow is named (launcher/supervise/tfplace.py): 2 local workers train with
Keras ``fit`` under MultiWorkerMirroredStrategy; after 6 steps worker 1's input pipeline opens a
FIFO nothing writes to (a ``TextLineDataset``: TensorFlow's own thread blocks in the kernel, no
frame of the user's and no Python frame of TensorFlow's tells), while worker 0 waits for it in the
step's collective. The watchdog's failure names worker 1, in its input pipeline, with the blocked
thread of TensorFlow's; the record's stacks of each task hold its TensorFlow threads."""

from __future__ import annotations

import sys

import pytest

import launcher.record.events as ev
from tests.support.records import of
from tests.support.specs import local_spec
from tests.support.tfrun import assert_no_processes, events, run_dir, up

pytestmark = [pytest.mark.integration, pytest.mark.tf]

SCRIPT = """\
import json, os
import numpy as np
import tensorflow as tf
import tf_keras as keras

strategy = tf.distribute.MultiWorkerMirroredStrategy()
me = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = np.random.RandomState(0).rand(64, 4).astype("float32")
# The same pipeline on both workers (a different one would trace different collectives): 6 batches,
# then lines of a file; worker 1's file is a FIFO nothing writes to.
lines = os.path.join(os.environ["TFCLUSTER_STATE_DIR"], f"lines-{me}")
if me == 1:
    os.mkfifo(lines)
else:
    with open(lines, "w") as fh:
        fh.write("x\\n" * 64)
data = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1))).batch(8).take(6).concatenate(
    tf.data.TextLineDataset(lines).map(lambda line: (tf.zeros((4,)), 0.0)).batch(8).repeat())
options = tf.data.Options()  # each worker its own data, as written (no sharding by file)
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = data.with_options(options)
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer="sgd")
model.fit(data, epochs=1, steps_per_epoch=50, verbose=0)
"""


@pytest.mark.timeout(600)  # a start of two TensorFlow workers, a 15 s stall, stacks and py-spy's dumps
def test_a_task_stuck_in_its_input_pipeline_inside_tensorflow_is_named(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    spec = local_spec(tmp_path, f"{sys.executable} train.py", name="demo", env={"TF_CPP_MIN_LOG_LEVEL": '"2"'},
                      watchdog="{startup_timeout: 240, stop_grace: 2, hang_timeout: 15}")
    result = up(spec, timeout=400)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]
    failure = of(events(spec), ev.Failure)
    # The stall's record keeps each task's count of TensorFlow calls (the verdict's other evidence):
    # both counted their steps (forked from the zygote, the script reaches fit within the first
    # beat: with the hook a beat late, on a quiet machine, both counts stayed 0).
    (stalled,) = of(events(spec), ev.GroupStalled)
    counts = stalled.counts
    assert sorted(counts) == ["worker:0", "worker:1"] and min(counts.values()) >= 1, stalled
    assert len(failure) == 1 and failure[0].task == "worker:1", (failure, counts, out[-4000:])
    reason = failure[0].reason
    assert reason.startswith("stuck ") and " inside TensorFlow, in its input pipeline: TensorFlow's thread tf_" in reason
    assert "blocked in system call" in reason and "while the others wait in their step" in reason, reason
    assert f"worker:1 failed: {reason}" in result.stderr
    for key in ("worker-0", "worker-1"):
        text = (run_dir(spec) / "stacks" / "1" / f"{key}.txt").read_text()
        assert "threads of TensorFlow (from /proc: name, system call, kernel wait):" in text, text[-2000:]
    assert_no_processes(spec)
