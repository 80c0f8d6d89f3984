"""The ssh backend's host-side commands (launcher/backends/ssh/commands.py) run by a real sh
against a task a real zygote forked (one that imports ``json``): the task is not its wrapper's
child but its waiter's, and its group is its own. SIGSTOP and SIGCONT reach it (a wrapper cannot
pass them on), the stacks' signal reaches its process, py-spy dumps it, and ``down`` proves it
the run's own; a process that merely claims the pid is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from launcher.backends import pyspy
from launcher.backends.ssh.commands import down_command, native_stacks_command, process_signal_command, signal_command
from launcher.contract import envnames
from tests.support.waits import wait_for
from tests.support.zygotes import base_env, task_pid, wrap, zygote  # noqa: F401 - zygote: a fixture

BLOCKED = ("import signal, threading, time\n"
           "signal.signal(signal.SIGUSR2, lambda *a: print('usr2', flush=True))\n"
           "print('up', flush=True)\n"
           "while True: time.sleep(0.05)\n")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout


def test_a_forked_task_is_signalled_dumped_and_proven_by_the_hosts_commands(zygote, tmp_path):
    pidfile = tmp_path / "remote" / "run" / "pids" / "worker-0.0.pid"  # (its run-unique tail: the last four parts)
    pidfile.parent.mkdir(parents=True)
    p = wrap(zygote, [sys.executable, "-c", BLOCKED], pidfile=pidfile, env={envnames.RUN_ID: "r1"})
    try:
        assert p.stdout.readline() == b"up\n"
        task = task_pid(pidfile)
        assert Path(f"/proc/{task}/stat").read_text().rsplit(")", 1)[1].split()[1] != str(p.pid)  # not its child
        assert sh(signal_command(signal.SIGSTOP, [str(pidfile)])) == f"sent {pidfile}\n"
        wait_for(lambda: state(task) == "T", 10, what="the forked task stopped")
        sh(signal_command(signal.SIGCONT, [str(pidfile)]))
        wait_for(lambda: state(task) != "T", 10, what="the forked task running again")
        assert sh(process_signal_command(signal.SIGUSR2, [str(pidfile)])) == f"sent {pidfile}\n"
        assert p.stdout.readline() == b"usr2\n"
        if pyspy.find(sys.executable) is not None:
            out = subprocess.run(["sh", "-c", native_stacks_command(str(pidfile))], capture_output=True, text=True,
                                 timeout=60)
            text = pyspy.from_remote(out.returncode, out.stdout)
            assert text.startswith(f"native frames (py-spy dump --native, pid {task}):"), out
        # down: proven the run's own (its waiter names it), stopped with its wrapper.
        said = sh(down_command([str(pidfile.parent.parent)], 2.0, "r1"))
        assert said == f"stopped {pidfile}\n", said
        p.wait(timeout=30)
        wait_for(lambda: not os.path.exists(f"/proc/{task}") or state(task) == "Z", 10, what="the task's end")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_a_pid_file_naming_a_process_that_is_not_the_wrappers_task_is_refused(zygote, tmp_path):
    """The pid file names another process of the user (not the wrapper's child, not forked for it):
    no signal reaches it, and down says it is not the run's."""
    pidfile = tmp_path / "remote" / "run" / "pids" / "worker-0.0.pid"
    pidfile.parent.mkdir(parents=True)
    p = wrap(zygote, [sys.executable, "-c", BLOCKED], pidfile=pidfile, env={envnames.RUN_ID: "r1"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={**base_env(),
                                                                                         envnames.RUN_ID: "r1"})
    try:
        assert p.stdout.readline() == b"up\n"
        task_pid(pidfile)
        wrapper, _task, start = pidfile.read_text().split()
        pidfile.write_text(f"{wrapper} {other.pid} {start}\n")
        assert sh(process_signal_command(signal.SIGUSR2, [str(pidfile)])) == f"gone {pidfile}\n"
        said = sh(down_command([str(pidfile.parent.parent)], 2.0, "r1"))
        assert said == f"notown {pidfile} process {other.pid} is not the task of wrapper {wrapper}\n", said
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
