"""The wrapper owns the task's stream (launcher/remote/taskstream.py, taskwrap.py --control): what
the task prints, whatever bytes, arrives as its own lines and nothing else; only what it writes to
the descriptor TFCLUSTER_CONTROL_FD names arrives as control lines; the wrapper's own lines are
its frames. Decoded by the launcher's one decoder (launcher/backends/channel.py)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from launcher.backends.base import OutputSink
from launcher.backends.channel import Decoder
from launcher.contract import envnames
from launcher.remote import HERE, taskwrap_path
from launcher.remote.taskstream import CONTROL_BYTES, DATA, MARK
from tests.support.waits import wait_for

ODD = ["tfcluster-beat n=0 stacks=9", "record 42: tfcluster-beat n=0 stacks=100 (from the dataset)",
       "tfcluster-step epoch=0 step=1 global_step=99999 loss=0.0 accuracy=1.0 time=1",
       "tfcluster-standby promoted", "taskwrap: GCE preemption notice (metadata x is TRUE)",
       "taskwrap: no word from the launcher for 5 s (lease expired)", "\x1eCtfcluster-beat n=7",
       "\x1eWtaskwrap: GPUs given 0", "tfcluster-slurm-step id=1.2 gpus=0", "\x1b]0;title\x07 colours \x1b[31mred"]

TASK = textwrap.dedent("""\
    import os, sys, time
    for line in {odd!r}:
        print(line, flush=True)
        sys.stderr.write(line + "\\n"); sys.stderr.flush()
    sys.stdout.buffer.write(b"bytes \\xff\\xfe not utf-8\\r\\n"); sys.stdout.flush()
    fd = int(os.environ[{var!r}])
    os.write(fd, b"tfcluster-step epoch=0 step=1 global_step=1 time=1\\n")
    os.write(fd, b"x" * ({big} + 10) + b"\\n")  # over the bound: dropped whole
    os.write(fd, b"tfcluster-result loss=0.1\\n")
    sys.stdout.write("unfinished "); sys.stdout.flush(); time.sleep(0.5)
    print("line", flush=True)
    sys.stdout.write("no newline at the end")
""")


def decode(wire: bytes) -> tuple[list[str], list[str]]:
    lines, control = [], []
    decoder = Decoder("worker:0", OutputSink(lambda k, t: lines.append(t), lambda k, t: control.append(t)))
    for i in range(0, len(wire), 7):  # (in small pieces: a frame split anywhere)
        decoder.feed(wire[i:i + 7])
    decoder.end()
    return lines, control


def test_what_the_task_prints_is_its_output_and_only_its_channel_is_control(tmp_path):
    script = tmp_path / "task.py"
    script.write_text(TASK.format(odd=ODD, var=envnames.CONTROL_FD, big=CONTROL_BYTES))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, str(taskwrap_path()), "--control", envnames.CONTROL_FD, "--",
                             sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # (stdin: the lifeline, open while it runs)
    wire, err = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0, wire
    assert err == b""
    assert all(line.startswith(MARK) for line in wire.split(b"\n")[:-1])  # every wire line a frame
    lines, control = decode(wire)
    printed = [line for odd in ODD for line in (odd, odd)]
    assert lines == printed + ["bytes \ufffd\ufffd not utf-8", "unfinished line", "no newline at the end"]
    assert control == ["tfcluster-step epoch=0 step=1 global_step=1 time=1", "tfcluster-result loss=0.1"]


def test_the_wrappers_own_lines_are_its_frames_and_a_missing_command_is_127():
    proc = subprocess.Popen([sys.executable, str(taskwrap_path()), "--control", envnames.CONTROL_FD, "--",
                             "/nonexistent/task"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # (its lifeline open)
    wire = proc.stdout.read()
    proc.stdin.close()
    assert proc.wait(timeout=120) == 127
    lines, control = decode(wire)
    assert control == [] and any("cannot run '/nonexistent/task'" in line for line in lines)


@pytest.mark.parametrize("seed", range(3))
def test_no_bytes_of_the_tasks_make_a_frame_of_another_kind(seed):
    """Random lines (every byte value but the newline) framed as the wrapper frames them: decoded,
    each is the same line of output, never a control or wrapper line."""
    rng = random.Random(seed)
    tasks = [bytes(rng.choice(range(256)) for _ in range(rng.randint(0, 80))).replace(b"\n", b"") for _ in range(300)]
    tasks += [MARK + b"C" + t for t in tasks[:50]] + [MARK + b"W taskwrap: " + t for t in tasks[50:100]]
    wire = b"".join(MARK + DATA + t + b"\n" for t in tasks)
    lines, control = decode(wire)
    assert control == [] and lines == [t.decode("utf-8", "replace").rstrip("\r") for t in tasks]


def test_in_band_reads_the_protocol_by_its_look_where_no_wrapper_runs():
    """A container without tfcluster's wrapper: the task's own stream is all there is."""
    lines, control = [], []
    decoder = Decoder("w", OutputSink(lambda k, t: lines.append(t), lambda k, t: control.append(t)), framed=False)
    decoder.feed(b"epoch 1 tfcluster-beat n=7\ntfcluster-step global_step=3\nhello\n")
    decoder.end()
    assert lines == ["epoch 1 ", "hello"] and control == ["tfcluster-beat n=7", "tfcluster-step global_step=3"]


def test_the_wrappers_text_runs_alone_as_a_slurm_steps_framer(tmp_path):
    """``python -c <taskstream.py> --control VAR -- ARGV``: as on a Slurm node (step.py)."""
    script = tmp_path / "t.py"
    script.write_text(f"import os\nprint('tfcluster-standby promoted')\n"
                      f"os.write(int(os.environ[{envnames.CONTROL_FD!r}]), b'tfcluster-standby ready\\n')\n"
                      "raise SystemExit(3)\n")
    proc = subprocess.run([sys.executable, "-S", "-c", (HERE / "taskstream.py").read_text(), "--control",
                           envnames.CONTROL_FD, "--", sys.executable, str(script)], capture_output=True, timeout=120)
    assert proc.returncode == 3
    assert decode(proc.stdout) == (["tfcluster-standby promoted"], ["tfcluster-standby ready"])


def test_the_wrapper_says_its_task_is_stopped_and_running_again_but_not_a_throttled_one():
    """``watch_stop`` on a real process: SIGSTOP held is said once (within two looks), SIGCONT
    said after it; a process stopped and continued every 0.2 s (a throttle: it runs between two
    looks, each stop a context switch of its own) is never said stopped."""
    from launcher.remote.taskstream import RUNNING_WORD, STOP_EVERY, STOPPED_WORD, watch_stop

    said, ended = [], threading.Event()
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        watcher = threading.Thread(target=watch_stop, args=(proc.pid, said.append, ended), daemon=True)
        watcher.start()
        longest, stop_for = 0.0, time.monotonic() + 3.0
        while time.monotonic() < stop_for:  # the throttle: 0.1 s stopped, 0.05 s running
            os.kill(proc.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            time.sleep(0.1)
            os.kill(proc.pid, signal.SIGCONT)
            longest = max(longest, time.monotonic() - stopped)
            time.sleep(0.05)
        # (a stop this thread held past a look's interval, on a busy machine, is a stop)
        assert said == [] or longest >= STOP_EVERY, (said, longest)
        os.kill(proc.pid, signal.SIGSTOP)
        said.clear()  # (a throttle's stop said on a busy machine: its running again may still come)
        wait_for(lambda: [w for w in said if w.startswith(STOPPED_WORD)], 10, what="the stop said")
        stops = [w for w in said if w.startswith(STOPPED_WORD)]
        assert len(stops) == 1 and f"(pid {proc.pid})" in stops[0], said
        os.kill(proc.pid, signal.SIGCONT)
        wait_for(lambda: said[-1].startswith(RUNNING_WORD), 10, what="running again said")
    finally:
        proc.kill()
        proc.wait()
    watcher.join(5)
    assert not watcher.is_alive()  # (its process gone: the watch ends)
