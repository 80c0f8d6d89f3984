"""A custom training loop with TensorFlow's PreemptionCheckpointHandler, as tfcluster runs it
(docs/your-script.md, "TensorFlow's preemption handler"): on a preemption's SIGTERM (`tfcluster
down`, a GCE notice, a Spot VM's shutdown) every worker saves the step they agree on and exits 42,
which tfcluster restarts without spending restart.max_restarts; the next attempt resumes there.

    python preemption_handler.py STEPS
"""

import os
import signal
import sys
import threading

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: before any other TensorFlow call
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000

# tfcluster stops a task with SIGTERM and a grace (watchdog.stop_grace). TensorFlow watches SIGTERM
# itself off GCE, but on a GCE VM it polls the maintenance event instead: a termination watcher
# that reads SIGTERM makes it the notice everywhere.
sigterm = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: sigterm.set())
config = tf.distribute.experimental.TerminationConfig(
    termination_watcher_fn=sigterm.is_set, exit_fn=lambda: sys.exit(42), grace_period=0)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.build((None, 4))
    optimizer = tf.keras.optimizers.SGD(0.05)
    done = tf.Variable(0, dtype=tf.int64)  # steps done, saved with the model
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, done=done)
state = os.environ.get("TFCLUSTER_STATE_DIR", "state")  # shared by the attempts of a run
handler = tf.distribute.experimental.PreemptionCheckpointHandler(
    strategy.cluster_resolver, checkpoint, os.path.join(state, "preemption"), config)

x = tf.random.stateless_normal((64, 4), seed=(1, 2))
y = tf.reduce_sum(x, axis=1, keepdims=True)


@tf.function
def train_step():
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    loss = strategy.reduce("MEAN", strategy.run(step), axis=None)
    done.assign_add(1)
    return loss


start = int(done.numpy())  # 0, or the step the last save was made at (the handler restored it)
print(f"training from step {start} to {steps}", flush=True)
for i in range(start, steps):
    loss = handler.run(train_step)  # saves and exits 42 once every worker agreed on this step
    print(f"step {i + 1} loss {float(loss):.5f}", flush=True)
