"""A user's own plain TF_CONFIG script, with not one line for tfcluster: MultiWorkerMirroredStrategy
from TF_CONFIG, a custom loop whose every step all-reduces 1.0 from each worker (the sum is the
number of workers, or the cluster is broken), progress kept as a user would keep it (worker 0's
last step in a file under --state), exit code --exit once --steps steps are done. Each start prints
what a cold start and a warm standby's promotion must agree on: argv, sys.path[0], __file__,
__name__, __spec__, its pid and its parent's (the task wrapper's), and whether SIGUSR1 is blocked.

    python plain_tf_config.py --steps N|@FILE --delay S --state DIR [--exit CODE]

``--steps @FILE``: the number read from FILE when the script starts (a test ends a run it lets
train until the standbys are ready by writing a near number there).
"""

import argparse
import json
import os
import signal
import sys
import time

import tensorflow as tf

ap = argparse.ArgumentParser()
ap.add_argument("--steps", required=True)
ap.add_argument("--delay", type=float, default=0.1)
ap.add_argument("--state", required=True)
ap.add_argument("--exit", type=int, default=0)
args = ap.parse_args()
if args.steps.startswith("@"):
    with open(args.steps[1:]) as fh:
        args.steps = fh.read().strip()
args.steps = int(args.steps)

def parent_of(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


config = json.loads(os.environ["TF_CONFIG"])
me = f"{config['task']['type']}:{config['task']['index']}"
print("plain-start " + json.dumps({
    "task": me, "pid": os.getpid(), "ppid": os.getppid(), "gppid": parent_of(os.getppid()), "argv": sys.argv, "path0": sys.path[0], "file": __file__, "name": __name__,
    "spec": repr(__spec__), "usr1_blocked": signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, []),
    "sigint": repr(signal.getsignal(signal.SIGINT)), "sigterm": repr(signal.getsignal(signal.SIGTERM)),
}, sort_keys=True), flush=True)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
progress = os.path.join(args.state, "step")
start = 0
if os.path.exists(progress):
    with open(progress) as fh:
        start = int(fh.read() or 0)
for step in range(start, args.steps):
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
    print(f"plain-step {step + 1} sum={float(total):g}", flush=True)
    if config["task"]["index"] == 0:
        with open(progress + ".tmp", "w") as fh:
            fh.write(str(step + 1))
        os.replace(progress + ".tmp", progress)
    time.sleep(args.delay)
print(f"plain-done {me} steps={args.steps}", flush=True)
sys.exit(args.exit)
