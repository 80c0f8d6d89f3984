#!/usr/bin/env python3
"""A task entrypoint of one's own that follows the warm-standby protocol (docs/concepts/runs.md, "Warm standby"), for
the standby tests: stdlib only, no TensorFlow. It serves its TF_CONFIG port (so the startup
watchdog sees it up), prints its task, attempt, pid, each thread's CPU policy and I/O class and
the cluster it was given, then runs until stopped (attempt 0) or exits 0 a moment later (a later
attempt).

    standby_task.py [ack | no-ack | ignore]

``ack``: the protocol; ``no-ack``: blocks SIGUSR1 and says it is ready, but once promoted never
goes on (a script that half-honours TFCLUSTER_STANDBY); ``ignore``: ignores TFCLUSTER_STANDBY.
"""

import json
import os
import signal
import socket
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ack"


def say(line):
    """A line of the protocol, on the task's control channel (a printed one is its output only)."""
    os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), (line + "\n").encode())


if os.environ.get("TFCLUSTER_STANDBY") == "1" and MODE != "ignore":
    # The protocol's lines: block SIGUSR1, (import the slow modules,) say ready, wait, take the env.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("tfcluster-standby promoted", flush=True)  # (printed: the task's output, never its protocol)
    say("tfcluster-standby ready")
    signal.sigwait({signal.SIGUSR1})
    if MODE == "no-ack":
        while True:
            time.sleep(3600)
    with open(os.environ.pop("TFCLUSTER_STANDBY_ENV")) as fh:
        os.environ.update(json.load(fh))
    say("tfcluster-standby promoted")

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", port))
server.listen()
attempt = int(os.environ.get("TFCLUSTER_RESTART_COUNT", "0"))
threads = sorted(int(t) for t in os.listdir("/proc/self/task"))
try:  # each thread's I/O class (3: idle), as the standby's priority sets it
    from launcher.contract.standbyprio import io_class
except ImportError:
    def io_class(tid):
        return "?"
print(f"standby-task key={os.environ.get('TFCLUSTER_TASK')} attempt={attempt} pid={os.getpid()} "
      f"standby={os.environ.get('TFCLUSTER_STANDBY', '-')} "
      f"sched={','.join(str(os.sched_getscheduler(t)) for t in threads)} "
      f"io={','.join(str(io_class(t)) for t in threads)} cluster={json.dumps(config['cluster'], sort_keys=True)}",
      flush=True)
if attempt == 0:
    while True:
        time.sleep(3600)
time.sleep(1.0)
sys.exit(0)
