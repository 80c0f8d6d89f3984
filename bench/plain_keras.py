"""A user's own plain TF_CONFIG Keras script, with not one line for tfcluster or Ray: a
MultiWorkerMirroredStrategy from TF_CONFIG, a small dense model ``fit`` on random data (global
batch ``--batch``, every step all-reduces the gradients), nothing kept between starts. What a
benchmark needs to time it from outside, whoever launched it, is in a file of its own (a launcher's
log may reach its reader late): each start appends ``start pid=PID time=T`` to
``--marks/worker-INDEX.txt`` and each step ``step N time=T`` (wall-clock seconds).

    python plain_keras.py --steps N|@FILE --marks DIR [--batch 64]

``--steps @FILE``: the number read from FILE when the script starts (a benchmark lets a run train
until it kills a worker, then writes there how many steps the restarted script is to take).
Keras 2 (tf_keras): Keras 3's ``fit`` takes no MultiWorkerMirroredStrategy.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--steps", required=True)
ap.add_argument("--marks", required=True)
ap.add_argument("--batch", type=int, default=64)
args = ap.parse_args()
if args.steps.startswith("@"):
    with open(args.steps[1:]) as fh:
        args.steps = fh.read().strip()
steps = int(args.steps)

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
marks = open(os.path.join(args.marks, f"worker-{index}.txt"), "a", buffering=1)
marks.write(f"start pid={os.getpid()} time={time.time():.6f}\n")


class Marks(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        marks.write(f"step {batch + 1} time={time.time():.6f}\n")


strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
x = np.random.default_rng(0).normal(size=(64 * args.batch, 64)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch).with_options(options)
history = model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[Marks()])
print(f"plain-keras done worker:{index} steps={steps} loss={history.history['loss'][-1]:.4f}", flush=True)
marks.close()
