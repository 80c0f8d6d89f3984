"""``launcher/contract/portcheck.py``: who holds a TCP port on this machine (from /proc, for one
line), and the task's own check of its TensorFlow port right before its script runs (the task stub
carries the module's text: a real stub process is tried here)."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import threading
import time

from launcher.contract.portcheck import TASK_EXIT_PORT_TAKEN, port_holders, port_taken_line, task_port
from launcher.supervise.diagnose import hint, port_taken
from launcher.supervise.standby import stub_command

ME = pwd.getpwuid(os.getuid()).pw_name


def _listener(*extra: str) -> tuple[subprocess.Popen, int, str]:
    script = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
              "print(s.getsockname()[1], flush=True); time.sleep(120)")
    argv = [sys.executable, "-c", "exec(__import__('os').environ['L'])", *extra]  # (short: the line cuts at 120)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, "L": script})
    return proc, int(proc.stdout.readline()), " ".join(argv)


def test_names_the_process_listening_its_user_and_this_one():
    proc, port, argv = _listener("marker-arg")
    try:
        assert port_holders(port) == [f"pid {proc.pid} of user {ME} ({argv[:120]})"]  # (cut at 120)
    finally:
        proc.kill()
        proc.wait()
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        argv = " ".join(open("/proc/self/cmdline").read().rstrip("\0").split("\0"))
        assert port_holders(mine.getsockname()[1]) == [f"pid {os.getpid()} of user {ME} ({argv[:120]})"]


def test_a_holders_command_line_is_escaped():
    proc, port, _ = _listener("\x1b]0;owned\x07\nsecond line")
    try:
        (held,) = port_holders(port)
    finally:
        proc.kill()
        proc.wait()
    assert "\x1b" not in held and "\n" not in held and "\x07" not in held
    assert "\\x1b]0;owned\\x07\\nsecond line" in held


def test_a_free_port_has_no_holder():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert port_holders(port) == []


def _tf_config(port: int, index: int = 1) -> str:
    return json.dumps({"cluster": {"worker": ["localhost:1", f"localhost:{port}"]},
                       "task": {"type": "worker", "index": index}})


def test_the_task_port_is_its_own_address_in_tf_config():
    assert task_port(_tf_config(23457)) == ("worker:1", 23457)
    assert task_port(_tf_config(23457, index=0)) == ("worker:0", 1)
    evaluator = json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "evaluator", "index": 0}})
    for text in (None, "", "{", "[]", evaluator, '{"task": {"type": "worker", "index": 5}, "cluster": {"worker": []}}'):
        assert task_port(text) is None, text


def test_a_taken_port_is_one_line_naming_its_holder_and_a_free_one_none():
    proc, port, argv = _listener()
    try:
        line = port_taken_line({"TF_CONFIG": _tf_config(port)})
    finally:
        proc.kill()
        proc.wait()
    assert line == (f"tfcluster: port {port} of worker:1 is taken by pid {proc.pid} of user {ME} ({argv[:120]}); "
                    "stop it, or change ports.base in the spec")
    assert port_taken_line({"TF_CONFIG": _tf_config(port)}) is None
    assert port_taken_line({}) is None
    # What the supervisor makes of it: the failure's reason and hint, only with the exit code the line comes with.
    who = f"pid {proc.pid} of user {ME} ({argv[:120]})"
    assert port_taken(["x", line], TASK_EXIT_PORT_TAKEN) == f"port {port} taken by {who}"
    assert port_taken(["x", line], 1) is None
    assert hint(["x", line]) == f"port {port} taken by pid {proc.pid} of user {ME} ({argv[:120]}): " \
                                "stop it, or change ports.base in the spec"


def test_the_stub_checks_the_port_right_before_the_script_and_exits_98(tmp_path):
    script = tmp_path / "task.py"
    script.write_text("print('the script ran', flush=True)\n")
    proc, port, _ = _listener()
    try:
        env = {**os.environ, "TF_CONFIG": _tf_config(port)}
        res = subprocess.run(stub_command([sys.executable, str(script)]), env=env, capture_output=True, text=True,
                             timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert res.returncode == TASK_EXIT_PORT_TAKEN, res.stderr
    assert "the script ran" not in res.stdout
    assert res.stderr.splitlines()[-1].startswith(f"tfcluster: port {port} of worker:1 is taken by pid {proc.pid} ")
    assert "Traceback" not in res.stderr
    # Free again: the script runs.
    res = subprocess.run(stub_command([sys.executable, str(script)]), env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "the script ran" in res.stdout, res.stderr


def test_a_cold_start_checks_again_once_the_script_has_imported_the_module(tmp_path):
    # The port is free before the script; the script takes it (as another process would, during
    # its import of TensorFlow: a stand-in module here), then imports it: exit 98 out of the import.
    (tmp_path / "heavy.py").write_text("print('heavy imported', flush=True)\n")
    script = tmp_path / "task.py"
    script.write_text("import json, os, socket, sys\n"
                      "port = int(json.loads(os.environ['TF_CONFIG'])['cluster']['worker'][1].rsplit(':', 1)[1])\n"
                      "s = socket.socket(); s.bind(('0.0.0.0', port)); s.listen()\n"
                      "import heavy\n"
                      "print('after the import', flush=True)\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stub = stub_command([sys.executable, str(script)])
    stub[stub.index("-c") + 1] = stub[stub.index("-c") + 1].replace(
        "check_task_port_once_imported()\n", "check_task_port_once_imported('heavy')\n")
    res = subprocess.run(stub, env={**os.environ, "TF_CONFIG": _tf_config(port)}, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == TASK_EXIT_PORT_TAKEN, res.stdout + res.stderr
    assert "heavy imported" in res.stdout and "after the import" not in res.stdout
    assert res.stderr.splitlines()[-1].startswith(f"tfcluster: port {port} of worker:1 is taken by pid ")


def test_a_port_freed_within_the_grace_is_not_taken():
    # (a listener of the task's previous attempt, on its way out)
    proc, port, _ = _listener()
    timer = threading.Timer(0.5, proc.kill)
    timer.start()
    try:
        started = time.monotonic()
        assert port_taken_line({"TF_CONFIG": _tf_config(port)}, grace=20) is None
        assert time.monotonic() - started < 15
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
