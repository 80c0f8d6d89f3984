#!/usr/bin/env python3
"""A stand-in for the reference worker's steps, backups and save on SIGTERM, for a lab test of
restarts that is about where each attempt's processes run and what ends them, not about training
(tests/integration/slurm/test_slurm_faults.py's restarts in one allocation): stdlib only, no
TensorFlow, so the test pays for the restarts it checks, not for imports. What training does
across them (the agreed save, the backup restored, 0 steps redone) is checked once per backend
with the reference worker.

    steps_task.py STEPS EVERY DELAY

It serves its TF_CONFIG port (the startup watchdog sees it up), starts at the global step of the
group's backup (``TFCLUSTER_STATE_DIR/steps_task/backup``, 0 without one) and says so on its
control channel (``tfcluster-start``), waits for every task of the attempt to have read it too (a
MWMS group's restore and steps are collective: no task steps before its peers joined; without the
wait a task that Slurm started 0.1 s late read the backup its early peer had written since, one step
ahead of the group's), then makes a step every DELAY s (``tfcluster-step``), the backup written
every EVERY steps by worker:0 before its step line, as the reference worker's BackupAndRestore. At
STEPS it says ``tfcluster-result steps_run=N`` and exits 0.

SIGTERM, as the reference worker's agreed save: each task writes the step it is at, the group's
step is the highest once every task wrote its own (within 10 s: Slurm's SIGTERM reaches each node
in its own time, later on a busy machine), every task goes on to it, says
``tfcluster-saving`` and ``tfcluster-preempted global_step=N``, the backup holds it, exit 143. A
task whose peers never write theirs (a peer killed) saves nothing and exits 143. Past 120 s it
gives up (exit 3): a test that never stops or finishes it fails, not hangs."""

import json
import os
import pathlib
import signal
import socket
import sys
import time

steps, every, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
config = json.loads(os.environ["TF_CONFIG"])
me = config["cluster"][config["task"]["type"]][config["task"]["index"]]
group = sum(len(v) for v in config["cluster"].values())
task = os.environ["TFCLUSTER_TASK"]
attempt = os.environ["TFCLUSTER_RESTART_COUNT"]
state = pathlib.Path(os.environ["TFCLUSTER_STATE_DIR"]) / "steps_task"
state.mkdir(parents=True, exist_ok=True)
backup = state / "backup"
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
server.listen()
asked = []
signal.signal(signal.SIGTERM, lambda *_: asked.append(True))


def say(kind, **fields):
    line = " ".join([f"tfcluster-{kind}"] + [f"{k}={v}" for k, v in fields.items()] + [f"time={time.time():.3f}"])
    os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), (line + "\n").encode())


def write(path, text):
    """Atomically: the temporary name starts with a dot, out of a peer's ``glob`` of the names
    (``peers``), which would otherwise count it and read it half written or gone."""
    tmp = path.with_name(f".{path.name}.{task.replace(':', '-')}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def peers(kind):
    """What each task of this attempt wrote of ``kind`` (``term``, ``joined``): a list, one a task."""
    return [p.read_text() for p in state.glob(f"{kind}-{attempt}-*")]


def join(start):
    """Wait until every task of the attempt has read the backup (and so started at the same step):
    SIGTERM meanwhile (the group stopped before it formed) ends it saving nothing."""
    write(state / f"joined-{attempt}-{task.replace(':', '-')}", str(start))
    while len(peers("joined")) < group:
        if asked:
            sys.exit(128 + signal.SIGTERM)
        if time.time() > give_up:
            sys.exit(f"steps_task: {task}: its peers did not all start within 120 s")
        time.sleep(0.02)


def save(step):
    """The agreed save: the highest step of the group's, once every task wrote its own."""
    write(state / f"term-{attempt}-{task.replace(':', '-')}", str(step))
    deadline = time.time() + 10
    while len(peers("term")) < group:
        if time.time() > deadline:
            sys.exit(128 + signal.SIGTERM)  # no agreement without every peer: nothing saved
        time.sleep(0.05)
    agreed = max(map(int, peers("term")))
    say("saving", epoch=0, step=agreed, global_step=agreed)
    write(backup, str(agreed))
    say("preempted", epoch=0, step=agreed, global_step=agreed, saved=backup)
    sys.exit(128 + signal.SIGTERM)


give_up = time.time() + 120
start = int(backup.read_text()) if backup.exists() else 0
say("start", epoch=0, step=start, global_step=start, epochs=1, steps_per_epoch=steps)
join(start)
step = start
while step < steps:
    if asked:
        save(step)
    if time.time() > give_up:
        sys.exit(3)
    time.sleep(delay)
    step += 1
    if task == "worker:0" and step % every == 0:
        write(backup, str(step))
    say("step", epoch=0, step=step, global_step=step)
say("result", steps_run=steps - start)
