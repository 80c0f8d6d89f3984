"""The host agent's reachability probe: a target that answers late is found, one that never
answers is named once the deadline passes (loopback only)."""

from __future__ import annotations

import socket
import threading
import time

from launcher.backends.ssh.commands import probe_deadline
from launcher.remote.agent import _probe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_late_listener_is_found_within_the_deadline():
    port = _free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def late():
        time.sleep(0.6)
        listener.bind(("127.0.0.1", port))
        listener.listen(8)

    threading.Thread(target=late, daemon=True).start()
    try:
        assert _probe([["worker:1", "127.0.0.1", port]], timeout=0.5, deadline=3.0) == [["worker:1", None]]
    finally:
        listener.close()


def test_nobody_listening_is_named_after_the_deadline():
    port = _free_port()
    started = time.monotonic()
    (result,) = _probe([["worker:1", "127.0.0.1", port]], timeout=0.5, deadline=1.0)
    took = time.monotonic() - started
    assert result == ["worker:1", "Connection refused"]
    assert 0.7 <= took < 2.5, took


def test_deadline_grows_with_host_count():
    assert [probe_deadline(3.0, n) for n in (1, 2, 8, 16, 32, 64)] == [3.0, 3.0, 3.0, 6.0, 12.0, 24.0]


def test_the_state_dir_marker_rides_on_the_first_exchange_and_the_probe_and_goes_with_the_agent(tmp_path):
    """state.sync auto: the chief's agent writes the marker in its first exchange, another host's
    agent looks for it in its reachability request (no round trip of their own), and the writer
    removes it when it ends (or at "go")."""
    import json
    import subprocess
    import sys

    from launcher.remote import source

    marker = tmp_path / "state" / ".tfcluster-shared-marker-x"
    agent = subprocess.Popen([sys.executable, "-S", "-c", source("agent.py"), "tag"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        first = {"require": [], "workdir": str(tmp_path), "run_dir": str(tmp_path / "run"),
                 "state_dir": str(tmp_path / "state"), "files": {}, "ports": [],
                 "marker": {"op": "write", "path": str(marker)}}
        agent.stdin.write(json.dumps(first) + "\n")
        agent.stdin.flush()
        reply = json.loads(agent.stdout.readline())
        assert reply["marker"] is True and reply["error"] is None and marker.exists(), reply
        agent.stdin.write(json.dumps({"targets": [], "timeout": 0.5, "deadline": 0.5,
                                      "marker": {"op": "check", "path": str(marker)}}) + "\n")
        agent.stdin.flush()
        assert json.loads(agent.stdout.readline()) == {"results": [], "marker": True}
        agent.stdin.write(json.dumps({"targets": [], "timeout": 0.5, "deadline": 0.5,
                                      "marker": {"op": "check", "path": str(marker) + "-not"}}) + "\n")
        agent.stdin.flush()
        assert json.loads(agent.stdout.readline()) == {"results": [], "marker": False}
        agent.stdin.close()
        assert agent.wait(timeout=30) == 0
        assert not marker.exists()
    finally:
        if agent.poll() is None:
            agent.kill()
