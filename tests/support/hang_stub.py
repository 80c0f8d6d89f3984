"""A stand-in for tests/support/hang_script.py (a user's own MultiWorkerMirroredStrategy fit script
that stops making progress), stdlib only: the hang watchdog's decisions on local (which task is
stuck, where, with its stacks; what a task prints never steering the run) checked at the speed of
a Python start instead of two TensorFlow imports and a collective's setup. The same command line
and modes (generator, silent, busy, deadlock), the same functions and statements where each stops
(tests/support/hang_live.py's STUCK), the same LIES.

What the supervisor reads of a task it reads here as it does of TensorFlow (launcher/contract/
liveness.py): once the module ``<tf>.python.eager.context`` is loaded, its ``Context.call_function``
is wrapped and every call that returns counts as progress. This script writes such a module (a
package named as TensorFlow's, under a ``site-packages`` folder of its own in the run's state dir,
so its frames are TensorFlow's by their path, launcher/record/stacks.py) and runs each training
step as one call of it: the step's compute, then its all-reduce, which waits inside the call for
every peer to have done the same step, as a collective does. A task stuck in its own code leaves
its peers waiting inside "TensorFlow", as under MultiWorkerMirroredStrategy.

It never names TensorFlow or its Keras (launcher/contract/usestf.py reads a script's text for them:
then the run's zygote and a standby would import the real one), hence the split name below. It
waits for the liveness to wrap the call before its first step (a real task's import and tracing
take that long: a step made before would not count).
"""

import argparse
import importlib
import json
import os
import socket
import sys
import threading
import time

# What --lies prints: the very lines of tests/support/hang_script.py's LIES (test_hang.py checks
# that the two agree).
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

TF = "tensor" "flow"  # (split: see above)
STEP_SECONDS = 0.05  # one step's compute
# The stand-in's eager context: one call is one training step, its all-reduce included.
CONTEXT = '''\
import os
import time


class Context:
    def call_function(self, steps, me, peers, n):
        time.sleep(%r)  # the step's compute
        open(os.path.join(steps, "%%s-%%d" %% (me, n)), "w").close()
        while not all(os.path.exists(os.path.join(steps, "%%s-%%d" %% (p, n))) for p in peers):
            time.sleep(0.01)  # the all-reduce: every peer's step n
''' % STEP_SECONDS

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
peers = [f"worker:{i}" for i in range(len(config["cluster"]["worker"]))]
attempt = os.environ.get("TFCLUSTER_RESTART_COUNT", "0")
target = me == args.task and not (args.stall_once and attempt != "0")


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

state = os.environ.get("TFCLUSTER_STATE_DIR") or os.getcwd()
site = os.path.join(state, f"stand-in-{me.replace(':', '-')}-{os.getpid()}", "site-packages")
package = os.path.join(site, TF, "python", "eager")
os.makedirs(package)
for depth in range(3):
    folder = os.path.join(site, *[TF, "python", "eager"][:depth + 1])
    with open(os.path.join(folder, "__init__.py"), "w"):
        pass
with open(os.path.join(package, "context.py"), "w") as fh:
    fh.write(CONTEXT)
sys.path.insert(0, site)
context = importlib.import_module(TF + ".python.eager.context")
# Up as a TensorFlow server is, after the import (the stub checks the port is still free once
# TensorFlow is imported: launcher/contract/portcheck.py), as the strategy starts its server: the
# TF_CONFIG port served (the startup watchdog sees it).
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("", int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1])))
server.listen(8)
steps_dir = os.path.join(state, f"stand-in-steps-{attempt}")
os.makedirs(steps_dir, exist_ok=True)
deadline = time.time() + (20 if os.environ.get("TFCLUSTER_TASK") else 0)  # (under tfcluster: its liveness)
while not getattr(context.Context.call_function, "tfcluster_counted", False) and time.time() < deadline:
    time.sleep(0.05)  # (the liveness looks for the module once a second)
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
        yield [1.0] * 4, [1.0]


def metrics_thread():
    while True:
        say(f"{me} metrics: ok")
        time.sleep(1)


held = threading.Lock()


class Trouble:
    def on_train_batch_end(self, batch, logs=None):
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


class Model:
    """fit's loop: a batch of 4 from the input, the step (one counted call, its all-reduce
    inside), then the callbacks."""

    def fit(self, data, steps_per_epoch, callbacks):
        call = context.Context()
        for batch in range(steps_per_epoch):
            [next(data) for _ in range(4)]
            call.call_function(steps_dir, me, peers, batch)
            for callback in callbacks:
                callback.on_train_batch_end(batch)


if args.mode == "silent":
    threading.Thread(target=metrics_thread, daemon=True).start()
model = Model()
say(f"{me} starts training")  # (as a real one's first lines: its log is never empty)
model.fit(examples(), steps_per_epoch=args.steps, callbacks=[Trouble()])
say(f"{me} done")
sys.exit(0)
