#!/usr/bin/env python3
"""A stand-in for a worker that is stopped the graceful way, for the tests of a terminal that goes
away (tests/integration/test_terminal_closed.py, locally; tests/integration/ssh/test_ssh_console.py,
over ssh): stdlib only, no TensorFlow. What a worker so stopped saves and where the next ``up``
resumes is checked with the reference worker (test_worker_resize.py, test_ssh_state.py).

    saver_task.py DELAY

It serves its TF_CONFIG port (so the run is ready), prints ``line N`` every DELAY s, and on
SIGTERM says ``saved at N`` and exits 143, as the reference worker does. Past 240 s it gives up
(exit 3): a test that never stops it fails, not hangs."""

import json
import os
import signal
import socket
import sys
import time

delay = float(sys.argv[1])
c = json.loads(os.environ["TF_CONFIG"])
me = c["cluster"][c["task"]["type"]][c["task"]["index"]]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("", int(me.rsplit(":", 1)[1])))
server.listen(8)
n = 0


def term(*_):
    print(f"saved at {n}", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, term)
give_up = time.time() + 240
while time.time() < give_up:
    n += 1
    print(f"line {n}", flush=True)
    time.sleep(delay)  # (its own cadence: the tests wait on its lines)
sys.exit(3)
