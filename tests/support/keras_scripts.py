"""A Keras 3 script (as keras.io writes them) and what its run under MultiWorkerMirroredStrategy must
show, shared by the local and ssh tests (tests/integration/test_keras_scripts.py,
tests/integration/ssh/test_ssh_tf_users.py)."""

from __future__ import annotations

import json

from launcher.contract.kerasalias import KERAS_NOTE

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


def check_keras3_run(code: int, out: str, keys: tuple[str, ...] = ("worker:0", "worker:1")) -> None:
    """The run of KERAS3 succeeded; each task said once, before the script's first line, that its
    ``import keras`` is tf_keras, used tf_keras, and trained in step with the others."""
    assert code == 0, out[-5000:]
    note = KERAS_NOTE.format(why="multi_worker_mirrored: Keras 3 model.fit cannot train under it")
    histories = {}
    for key in keys:
        mine = [line[len(f"[{key}] "):] for line in out.splitlines() if line.startswith(f"[{key}] ")]
        assert mine.count(note) == 1, mine[:20]
        module = [line for line in mine if line.startswith("keras-module ")]
        assert module == ["keras-module tf_keras tf_keras tf_keras"], mine[-20:]
        assert mine.index(note) < mine.index(module[0])
        histories[key] = json.loads(next(line for line in mine if line.startswith("keras-history "))[14:])
    # Trained in step: one model, the same losses on every worker.
    assert all(h == histories[keys[0]] for h in histories.values()), histories
    assert len(histories[keys[0]]["loss"]) == 2 and "accuracy" in histories[keys[0]]["eval"]
    assert "PerReplica" not in out
