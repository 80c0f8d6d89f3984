#!/usr/bin/env python3
"""A stand-in for a synchronous TensorFlow group's coordination service, for the lab tests of a
task that a lost peer aborts (tests/integration/ssh/test_ssh_partition.py): stdlib only, no
TensorFlow, so a test pays for the blame it checks (the silent host is the root cause, the
survivor's exit its consequence), not for imports and training.

    peer_task.py TIMEOUT

What it keeps of TensorFlow's rules (tensorflow/core/distributed_runtime/coordination): the
leader (the group's first task, worker:0 here, as TF's service_leader is the chief or worker 0)
hears a heartbeat from every other task; one that sends none for TIMEOUT s makes the leader
abort with the words TensorFlow prints ("... The following tasks are unhealthy (stopped sending
heartbeats): /job:worker/replica:0/task:N") and exit 1. A task that loses its leader keeps
trying, as TensorFlow's agent does, until the launcher stops it: its host's loss is the
launcher's to find (ssh.lease). Every task serves its TF_CONFIG port (the startup watchdog and
the port probe see it up). The leader prints ``peers up`` once every other task has sent a
heartbeat (the moment a test may cut a host off), then ``tick N`` lines.

An attempt from 1 on prints ``ATTEMPT N`` and exits 0: the group restarted, which the test checks.
Past 120 s the leader gives up (exit 3): a test whose cut never lands fails, not hangs."""

import json
import os
import socket
import sys
import threading
import time

timeout = float(sys.argv[1])
config = json.loads(os.environ["TF_CONFIG"])
kind, index = config["task"]["type"], int(config["task"]["index"])
keys = [(k, i) for k in config["cluster"] for i in range(len(config["cluster"][k]))]
me = config["cluster"][kind][index]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
server.listen()
attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
print(f"ATTEMPT {attempt}", flush=True)
if attempt:
    sys.exit(0)

leader_key = keys[0]
if (kind, index) != leader_key:
    host, port = config["cluster"][leader_key[0]][leader_key[1]].rsplit(":", 1)
    while True:  # a heartbeat every 0.5 s; a lost leader is retried, never given up on
        try:
            with socket.create_connection((host, int(port)), timeout=2) as conn:
                conn.settimeout(2)
                while True:
                    conn.sendall(f"{kind}:{index}\n".encode())
                    time.sleep(0.5)
        except OSError:
            time.sleep(0.5)

last: dict[str, float] = {}


def hear(conn: socket.socket) -> None:
    for line in conn.makefile("r"):
        last[line.strip()] = time.monotonic()


def accept() -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=hear, args=(conn,), daemon=True).start()


threading.Thread(target=accept, daemon=True).start()
others = [f"{k}:{i}" for k, i in keys[1:]]
deadline = time.monotonic() + 120
while not all(k in last for k in others):
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.1)
print("peers up", flush=True)
tick = 0
while time.monotonic() < deadline:
    silent = [k for k in others if time.monotonic() - last[k] > timeout]
    if silent:
        k, i = silent[0].split(":")
        # (as TensorFlow 2.x words an all-reduce the coordination service aborted: tests/unit/
        # supervise/test_diagnose.py holds a whole one)
        print("tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
              f"Collective ops is aborted by: Error reported from /job:{leader_key[0]}/task:{leader_key[1]}: "
              "The following tasks are unhealthy (stopped sending heartbeats):\n"
              f"/job:{k}/replica:0/task:{i}\n"
              "The tasks have crashed. Check the task logs for an earlier error, or scheduler events "
              "(e.g. preemption, eviction) to debug further.", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"tick {tick}", flush=True)
    tick += 1
    time.sleep(0.5)
sys.exit(3)
