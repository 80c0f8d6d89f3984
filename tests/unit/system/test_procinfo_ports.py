"""``procinfo.port_holders``: who holds a TCP port on this machine, from /proc, for one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from launcher.system.procinfo import port_holders


def test_names_the_process_listening_and_this_one():
    script = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
              "print(s.getsockname()[1], flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", script, "marker-arg"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        argv = " ".join([sys.executable, "-c", script, "marker-arg"])
        assert port_holders(port) == [f"pid {proc.pid} ({argv[:120]})"]  # (a command line is cut at 120)
    finally:
        proc.kill()
        proc.wait()
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        argv = " ".join(open("/proc/self/cmdline").read().rstrip("\0").split("\0"))
        assert port_holders(mine.getsockname()[1]) == [f"pid {os.getpid()} ({argv[:120]})"]


def test_a_free_port_has_no_holder():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert port_holders(port) == []
