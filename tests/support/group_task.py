#!/usr/bin/env python3
"""A stand-in for a worker of an elastic group, for the tests of hosts that come and go on a lab
(tests/integration/ssh/test_ssh_elastic*.py, test_ssh_gce.py): stdlib only, no TensorFlow, so a test pays for the
membership it checks (sessions that die, hosts that settle, replans, grows), not for imports.
What training does across those changes (the agreed save, 0 steps redone, the state copy) is
checked once per backend with the reference worker.

    group_task.py OUT WANT [HOLD]

It serves its TF_CONFIG port ("up" as a TF server is: the startup watchdog and the port probe see
it), writes ``OUT/<attempt>-<group size>-<task>`` holding its host's name, and prints
``group of <size> attempt <attempt>``. A group smaller than WANT, or an attempt below HOLD (default
0), waits to be stopped: SIGTERM ends it with exit 143 after the line ``stopped in attempt
<attempt>``, as the reference worker's save on SIGTERM does (the grow path's graceful stop, a host's
shutdown, a preemption notice). A group of
WANT in an attempt from HOLD on exits 0 once every task of that attempt has written its file.
Past 120 s it gives up (exit 3): a test that never grows or restarts the group fails, not hangs.
"""

import json
import os
import pathlib
import signal
import socket
import sys
import time

out, want = pathlib.Path(sys.argv[1]), int(sys.argv[2])
hold = int(sys.argv[3]) if len(sys.argv) > 3 else 0
config = json.loads(os.environ["TF_CONFIG"])
workers = config["cluster"]["worker"]
me = config["cluster"][config["task"]["type"]][config["task"]["index"]]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
server.listen()
attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
task = os.environ["TFCLUSTER_TASK"]


def stopped(*_):
    print(f"stopped in attempt {attempt}", flush=True)
    sys.exit(128 + signal.SIGTERM)


signal.signal(signal.SIGTERM, stopped)
(out / f"{attempt}-{len(workers)}-{task.replace(':', '-')}").write_text(socket.gethostname())
print(f"group of {len(workers)} attempt {attempt}", flush=True)
deadline = time.time() + 120
if len(workers) < want or attempt < hold:
    while time.time() < deadline:
        time.sleep(0.1)
    sys.exit(3)
while len(list(out.glob(f"{attempt}-{want}-*"))) < want:
    if time.time() > deadline:
        sys.exit(3)
    time.sleep(0.1)
