"""A task the zygote forks under a wrapper that owns its stream (taskwrap.py --control,
launcher/remote/taskstream.py) gets what a cold start under that wrapper gets: its output on the
wrapper's data frames, a control channel that TFCLUSTER_CONTROL_FD names (a pipe it can write,
the same descriptors open), its exit code; a deferred standby's protocol goes on the control
channel, never as output. Real processes: a zygote that imports ``json``
(tests/support/zygotes.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from launcher.backends.base import OutputSink
from launcher.backends.channel import Decoder
from launcher.contract import envnames
from launcher.remote import taskwrap_path
from tests.support.waits import wait_for
from tests.support.zygotes import base_env, zygote, zygote_pid  # noqa: F401 - zygote: a fixture

# What the task sees of its descriptors and its control channel, printed; then a control line and
# an exit code of its own.
TASK = ("import json, os, stat, sys; fd = int(os.environ[VAR]); "
        "print(json.dumps({'fifo': stat.S_ISFIFO(os.fstat(fd).st_mode), 'fds': len(os.listdir('/proc/self/fd')), "
        "'stdout_is_stderr': os.fstat(1).st_ino == os.fstat(2).st_ino, 'inheritable': os.get_inheritable(fd), "
        "'ppid': int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])}), flush=True); "
        "sys.stderr.write('tfcluster-standby ready (printed, not said)\\n'); sys.stderr.flush(); "
        "os.write(fd, b'tfcluster-step epoch=0 step=1 global_step=1 time=1\\n'); sys.exit(3)"
        ).replace("VAR", repr(envnames.CONTROL_FD))


def decode(wire: bytes) -> tuple[list[str], list[str]]:
    lines, control = [], []
    decoder = Decoder("worker:0", OutputSink(lambda k, t: lines.append(t), lambda k, t: control.append(t)))
    decoder.feed(wire)
    decoder.end()
    return lines, control


def run(opts: list[str], cmd: list[str], env: dict | None = None) -> tuple[int, list[str], list[str]]:
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--control", envnames.CONTROL_FD, *opts, "--", *cmd],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                         env={**base_env(), **(env or {})})  # (stdin: the lifeline, open while it runs)
    wire = p.stdout.read()
    p.stdin.close()
    return p.wait(timeout=60), *decode(wire)


def test_a_forked_task_gets_its_control_channel_as_a_cold_start_does(zygote, tmp_path):
    cmd = [sys.executable, "-c", TASK]
    code, lines, control = run(["--zygote", zygote], cmd)
    cold_code, cold_lines, cold_control = run([], cmd)
    assert code == cold_code == 3, (lines, cold_lines)
    assert "taskwrap: started without the zygote" not in "\n".join(lines)
    forked, cold = json.loads(lines[0]), json.loads(cold_lines[0])
    assert forked["ppid"] == zygote_pid(tmp_path) and cold["ppid"] != forked["ppid"]  # (served: the zygote's grandchild)
    assert {**forked, "ppid": 0} == {**cold, "ppid": 0} == {"fifo": True, "fds": cold["fds"], "stdout_is_stderr": True,
                                                             "inheritable": True, "ppid": 0}
    assert lines[1:] == cold_lines[1:] == ["tfcluster-standby ready (printed, not said)"]
    assert control == cold_control == ["tfcluster-step epoch=0 step=1 global_step=1 time=1"]


def test_a_deferred_standby_says_its_protocol_on_the_control_channel(zygote, tmp_path):
    """Waiting and ready while nothing is forked, promoted once SIGUSR1 came: control lines, never
    output; then the task forked in the promoted environment, its channel its own."""
    promotion = tmp_path / "promotion.json"
    promotion.write_text(json.dumps({"TFCLUSTER_TEST_OWN": "promoted"}))
    env = {envnames.STANDBY: "1", envnames.STANDBY_ENV: str(promotion)}
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--control", envnames.CONTROL_FD, "--zygote", zygote,
                          "--standby-defer", f"{envnames.STANDBY},{envnames.STANDBY_ENV}", "--",
                          sys.executable, "-c", TASK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         start_new_session=True, env={**base_env(), **env})
    wire = b""
    while b"ready after=" not in wire:
        chunk = p.stdout.readline()
        assert chunk, wire
        wire += chunk
    os.killpg(p.pid, signal.SIGUSR1)
    wire += p.stdout.read()
    p.stdin.close()
    assert p.wait(timeout=60) == 3, wire
    lines, control = decode(wire)
    assert [c.split()[:2] for c in control] == [["tfcluster-standby", "waiting"], ["tfcluster-standby", "ready"],
                                                ["tfcluster-standby", "promoted"], ["tfcluster-step", "epoch=0"]]
    assert json.loads(lines[0])["fifo"] is True and json.loads(lines[0])["ppid"] == zygote_pid(tmp_path)
    wait_for(lambda: not promotion.exists(), 10, what="the promotion file taken")
