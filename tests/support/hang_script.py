"""A user's own MultiWorkerMirroredStrategy Keras ``fit`` script (not one line for tfcluster), tiny,
that stops making progress one way or another (the hang watchdog's integration tests):

    python hang_script.py MODE [--task worker:1] [--after STEPS]

MODE, on the task whose TF_CONFIG says ``--task`` (after ``--after`` steps; every other task trains on),
which prints ``TASK is stuck now (MODE)`` as it stops:

* ``generator``: its input generator stops returning, printing a retry line every second;
* ``silent``: its input generator sleeps, printing nothing, while a metrics thread on every task
  prints every second;
* ``busy``: a Keras callback spins in a busy loop;
* ``deadlock``: a Keras callback takes a lock a thread of its own holds for ever;
* ``pause``: a callback pauses ``--pause`` seconds once, then training goes on (no hang);
* ``slow``: a callback pauses ``--pause`` seconds after every batch (a straggler: the others wait);
* ``none``: trains to the end.
"""

import argparse
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("mode")
parser.add_argument("--task", default="worker:1")
parser.add_argument("--after", type=int, default=5)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--pause", type=float, default=0.0)
args = parser.parse_args()

config = json.loads(os.environ["TF_CONFIG"])
me = f"{config['task']['type']}:{config['task']['index']}"
target = me == args.task
strategy = tf.distribute.MultiWorkerMirroredStrategy()
served = [0]


def stuck_now():
    # (a test waits for this line to look at the run while it is stuck, before the watchdog acts)
    print(f"{me} is stuck now ({args.mode})", flush=True)


def retry_forever():
    while True:
        print(f"fetching the next shard failed; retrying in 1 s", flush=True)
        time.sleep(1)


def silent_stall():
    time.sleep(100000)


def examples():
    while True:
        served[0] += 1
        if target and served[0] > args.after * 4 and args.mode in ("generator", "silent"):
            stuck_now()
        if target and served[0] > args.after * 4 and args.mode == "generator":
            retry_forever()
        if target and served[0] > args.after * 4 and args.mode == "silent":
            silent_stall()
        yield np.ones(4, np.float32), np.ones(1, np.float32)


def metrics_thread():
    while True:
        print(f"{me} metrics: ok", flush=True)
        time.sleep(1)


held = threading.Lock()


class Trouble(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if target and args.mode == "slow":
            time.sleep(args.pause)
        if not target or batch != args.after:
            return
        if args.mode == "busy":
            stuck_now()
            n = 0
            while True: n += 1  # (one line: the stack's frame is on it whenever it is taken)
        if args.mode == "deadlock":
            threading.Thread(target=held.acquire, daemon=True).start()
            time.sleep(0.5)
            stuck_now()
            with held:
                pass
        if args.mode == "pause":
            time.sleep(args.pause)


if args.mode == "silent":
    threading.Thread(target=metrics_thread, daemon=True).start()
data = tf.data.Dataset.from_generator(
    examples, output_signature=(tf.TensorSpec((4,), tf.float32), tf.TensorSpec((1,), tf.float32))).batch(4)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = data.with_options(options)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[Trouble()])
print(f"{me} done", flush=True)
sys.exit(0)
