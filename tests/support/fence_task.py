#!/usr/bin/env python3
"""A stand-in for a TensorFlow task that outlives its host's loss (a paused VM that runs again),
for tests/integration/ssh/test_ssh_standby.py's stale task: stdlib only, no TensorFlow, so the
test pays for the fence it checks (a lost host's old task can reach nothing of the next attempt),
not for imports and training.

    fence_task.py OUT

What it keeps of TensorFlow's runtime: every task serves its TF_CONFIG port and keeps dialling
every other address of its cluster (its coordination agent's heartbeats, a collective's peers),
every 0.2 s, for as long as it runs, a SIGTERM included (the reference worker, asked to save,
waits for its peers), until KEEP s after the SIGTERM (3) it exits 143. Each address a task
reached is sent one line, ``<task> attempt <N>``, which the listener there appends to
``OUT/heard-<attempt>-<task>`` (its own attempt and task): had the next attempt's task the old
one's address, the old task's line would be in the new one's file (TensorFlow's "Incarnation ID
mismatch": the new attempt aborted). Each dialling round appends its time to
``OUT/dials-<attempt>-<task>``. It follows the warm-standby protocol (as standby_task.py), prints
``task <task> attempt <N> serving`` once it serves, and an attempt from 1 on exits 0 once
``OUT/stop`` exists. Past 120 s it gives up (exit 3): a test that never stops it fails, not hangs."""

import json
import os
import pathlib
import signal
import socket
import sys
import threading
import time

KEEP = 3.0
out = pathlib.Path(sys.argv[1])


def say(line):
    """A line of the standby protocol, on the task's control channel."""
    os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), (line + "\n").encode())


if os.environ.get("TFCLUSTER_STANDBY") == "1":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    say("tfcluster-standby ready")
    signal.sigwait({signal.SIGUSR1})
    with open(os.environ.pop("TFCLUSTER_STANDBY_ENV")) as fh:
        os.environ.update(json.load(fh))
    say("tfcluster-standby promoted")

config = json.loads(os.environ["TF_CONFIG"])
kind, index = config["task"]["type"], int(config["task"]["index"])
key = f"{kind}:{index}"
attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
me = config["cluster"][kind][index]
peers = [a for k, addresses in config["cluster"].items() for i, a in enumerate(addresses) if (k, i) != (kind, index)]
name = f"{attempt}-{key.replace(':', '-')}"
termed: list[float] = []
signal.signal(signal.SIGTERM, lambda *_: termed.append(time.monotonic()))

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
server.listen()


def hear(conn: socket.socket) -> None:
    with conn, open(out / f"heard-{name}", "a") as log:
        for line in conn.makefile("r"):
            log.write(line)
            log.flush()


def accept() -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=hear, args=(conn,), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
print(f"task {key} attempt {attempt} serving", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if termed and time.monotonic() - termed[0] > KEEP:
        sys.exit(128 + signal.SIGTERM)
    if attempt and (out / "stop").exists():
        sys.exit(0)
    for address in peers:
        host, port = address.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=0.5) as conn:
                conn.sendall(f"{key} attempt {attempt}\n".encode())
        except OSError:
            pass  # nobody there (yet, or any more): dialled again next round
    with open(out / f"dials-{name}", "a") as log:
        log.write(f"{time.time():.3f}\n")
    time.sleep(0.2)
sys.exit(3)
