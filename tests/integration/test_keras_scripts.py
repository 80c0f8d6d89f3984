"""A Keras 3 script, written as keras.io writes them (``import keras``, ``keras.Input``,
``keras.layers``, ``keras.callbacks``), trains unchanged under MultiWorkerMirroredStrategy on 2 local
workers through ``tfcluster up``: each task's ``import keras`` is tf_keras (forked from the run's
zygote, the local default), said in the task's first lines, and the workers train in step (the same
history on both). Keras 3 itself fails there (``ValueError: Attempt to convert a value
(PerReplica:{...})``); what only Keras 3 has is refused before any task starts
(tests/unit/spec/test_scriptcheck.py)."""

from __future__ import annotations

import json
import sys

import pytest

from launcher.contract.kerasalias import KERAS_NOTE
from tests.support.tfrun import up, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.tf]

KERAS3 = """\
import json, os, sys
import keras
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("keras-module", keras.__name__, keras.layers.Dense.__module__.split(".")[0], tf.keras.__name__.split(".")[0],
      flush=True)
rng = np.random.RandomState(0)
x = rng.rand(256, 8).astype("float32")
y = (x.sum(axis=1) > 4).astype("int64")
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
backup = keras.callbacks.BackupAndRestore(os.path.join(os.environ["TFCLUSTER_STATE_DIR"], "backup"))
history = model.fit(data, epochs=2, steps_per_epoch=4, verbose=0, callbacks=[backup])
scores = model.evaluate(data, steps=2, verbose=0, return_dict=True)
print("keras-history " + json.dumps({"loss": history.history["loss"], "eval": scores}), flush=True)
"""


def test_a_keras3_script_trains_unchanged_under_mwms_with_tf_keras(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(KERAS3)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py")
    result = up(spec)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    note = KERAS_NOTE.format(why="multi_worker_mirrored: Keras 3 model.fit cannot train under it")
    histories = {}
    for key in ("worker:0", "worker:1"):
        mine = [line[len(f"[{key}] "):] for line in out.splitlines() if line.startswith(f"[{key}] ")]
        # Said once, before the script's own first line.
        assert mine.count(note) == 1, mine[:20]
        module = [line for line in mine if line.startswith("keras-module ")]
        assert module == ["keras-module tf_keras tf_keras tf_keras"], mine[-20:]
        assert mine.index(note) < mine.index(module[0])
        histories[key] = json.loads(next(line for line in mine if line.startswith("keras-history "))[14:])
    # Trained in step: one model, the same losses on both workers.
    assert histories["worker:0"] == histories["worker:1"], histories
    assert len(histories["worker:0"]["loss"]) == 2 and "accuracy" in histories["worker:0"]["eval"]
    assert "PerReplica" not in out
