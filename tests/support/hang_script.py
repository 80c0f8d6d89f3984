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

``--lies``: every task first prints every line of tfcluster's protocol it knows (LIES, odd
arguments and all: a data set's text, a user's debug print), on stdout and on stderr, then the
fake beat ``tfcluster-beat n=N tf=1`` every second, N rising, for as long as it runs: none of it
may steer the supervisor (docs/concepts/trust.md, rule 9). ``--stall-once``: the task stops only
in the run's first attempt (TFCLUSTER_RESTART_COUNT 0): restarted, it trains to the end.
"""

import argparse
import json
import os
import sys
import threading
import time

# What --lies prints (tests/support/hang_live.py reads this list from here): each a line tfcluster
# once read, or would, as its own.
LIES = [
    "tfcluster-beat n=0 stacks=9",
    "tfcluster-beat n=0 stacks=100",
    "record 42: tfcluster-beat n=0 stacks=9 (from the dataset)",
    "tfcluster-start epoch=0 step=0 global_step=99990 epochs=1 steps_per_epoch=99999 global_batch=1 time=1795000000.000",
    "tfcluster-first_step epoch=0 step=0 global_step=99991 time=1795000001.000",
    "tfcluster-step epoch=0 step=99999 global_step=99999 loss=0.0001 accuracy=1.0000 time=1795000002.000",
    "tfcluster-epoch epoch=7 global_step=99999 loss=0.0001 accuracy=1.0000 time=1795000003.000",
    "tfcluster-backup global_step=99999 seconds=999.000 time=1795000004.000",
    "tfcluster-saving epoch=0 step=1 global_step=99999 time=1795000005.000",
    "tfcluster-preempted epoch=0 step=1 global_step=99999 saved=/tmp/fake time=1795000006.000",
    "tfcluster-eval checkpoint=ckpt-99 global_step=99999 loss=0.0000 accuracy=1.0000",
    "tfcluster-result task=worker:0 steps_run=99999 examples_per_sec=1000000000.0 loss=0.0000 accuracy=1.0000",
    "tfcluster-saved path=/tmp/fake",
    "tfcluster-server task=worker:0 target=grpc://fake:1",
    "tfcluster-worker_lost task=worker:1 time=1795000007.000",
    "tfcluster-ps_lost task=ps:0 time=1795000008.000",
    "tfcluster-standby waiting",
    "tfcluster-standby ready after=0.1s waited=0.0s",
    "tfcluster-standby promoted",
    "tfcluster-slurm-step id=1.2 node=fake gpus=0,1",
    "tfcluster-zygote: serving",
    "taskwrap: GCE preemption notice (metadata instance/preempted is TRUE): stopping the task gracefully",
    "taskwrap: no word from the launcher for 5 s (lease expired); stopping task group 1",
    "taskwrap: GPUs given 0,1",
    "taskwrap: GPU figures 1234 99",
    "\x1eCtfcluster-beat n=77 stacks=9",
    "\x1eWtaskwrap: GCE preemption notice",
]

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("mode")
parser.add_argument("--task", default="worker:1")
parser.add_argument("--after", type=int, default=5)
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--pause", type=float, default=0.0)
parser.add_argument("--lies", action="store_true")
parser.add_argument("--stall-once", action="store_true")
args = parser.parse_args()

config = json.loads(os.environ["TF_CONFIG"])
me = f"{config['task']['type']}:{config['task']['index']}"
target = me == args.task and not (args.stall_once and os.environ.get("TFCLUSTER_RESTART_COUNT", "0") != "0")


def say(line, stream=sys.stdout):
    """One line in one write. tfcluster runs tasks with PYTHONUNBUFFERED=1, under which ``print``
    writes the text and its newline apart: two threads' lines then interleave in the stream ("a
    beatfetching ...", seen over ssh, where stdout and stderr are one pipe)."""
    stream.write(line + "\n")
    stream.flush()


def lies_thread():
    n = 1
    while True:
        say(f"tfcluster-beat n={n} tf=1 in=0.00")  # a count that rises: no stall, if believed
        n += 1
        time.sleep(1)


if args.lies:
    for lie in LIES:
        say(lie)
        say(lie, sys.stderr)
    threading.Thread(target=lies_thread, daemon=True).start()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
served = [0]


def stuck_now():
    # (a test waits for this line to look at the run while it is stuck, before the watchdog acts)
    say(f"{me} is stuck now ({args.mode})")


def retry_forever():
    while True:
        say("fetching the next shard failed; retrying in 1 s")
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
        say(f"{me} metrics: ok")
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
say(f"{me} done")
sys.exit(0)
