"""launcher/backends/pyspy.py: where py-spy is found, what of its output is kept (escaped, bounded),
what a dump that gave nothing says, and a real dump of a real process blocked on a lock."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from launcher.backends import pyspy
from launcher.system import procinfo
from tests.support.waits import wait_for


def _exe(path, text="#!/bin/sh\nexit 0\n"):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_found_beside_the_interpreter_before_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    beside = _exe(bin_dir / "py-spy")
    on_path = tmp_path / "path"
    on_path.mkdir()
    _exe(on_path / "py-spy")
    monkeypatch.setenv("PATH", str(on_path))
    assert pyspy.find(str(bin_dir / "python")) == str(beside)
    beside.chmod(0o644)  # not executable: not it
    assert pyspy.find(str(bin_dir / "python")) == str(on_path / "py-spy")
    assert pyspy.find("python") == str(on_path / "py-spy")  # a bare name: PATH only
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert pyspy.find(str(bin_dir / "python")) is None


def test_its_output_is_escaped_and_bounded():
    out = "Thread 7 (idle): \"evil\x1b]0;owned\x07\"\n" + "".join(f"    frame{i} (libc.so.6)\n" for i in range(1000))
    text = pyspy.shown(out.encode(), 7)
    lines = text.splitlines()
    assert lines[0] == "native frames (py-spy dump --native, pid 7):"
    assert "\x1b" not in text and "\x07" not in text and "evil" in lines[1]
    assert len(lines) == 1 + pyspy.MAX_LINES + 1 and lines[-1] == f"... {1001 - pyspy.MAX_LINES} more lines"
    # py-spy's own header names the process by its whole command line (the stub's text: long): not kept
    headed = pyspy.shown(b"Process 9: python -c\n" + b"stub line\n" * 300 + b"Python v3.11.7 (/usr/bin/python3)\n\n"
                         b"Thread 9 (idle): \"MainThread\"\n    f (a.py:1)\n", 9).splitlines()
    assert headed[1].startswith("Python v3.11.7") and "stub line" not in "\n".join(headed) and len(headed) == 5
    long = pyspy.shown(b"x" * 5000, 1).splitlines()[1]
    assert len(long) == pyspy.MAX_LINE


def test_a_dump_that_gave_nothing_says_why_in_one_line():
    said = pyspy.failed(1, b"\nError: Permission denied (os error 13)\nmore\n")
    assert said.startswith("native frames: py-spy gave none (Error: Permission denied (os error 13))")
    assert "ptrace_scope" in said and "\n" not in said
    assert pyspy.failed(3, b"") == "native frames: py-spy gave none (exit 3)"


def test_what_the_host_printed_is_read_as_the_local_dump_is():
    assert pyspy.from_remote(0, "nospy\n") == pyspy.NOT_FOUND
    assert pyspy.from_remote(0, "held 42\n", 3) == pyspy.HELD.format(limit=3)
    assert pyspy.from_remote(0, "gone\n") == "" and pyspy.from_remote(0, "nopid\n") == ""
    assert pyspy.from_remote(255, "pid 4\nThread 4 (idle)\n") == ""  # the session failed: nothing said
    kept = pyspy.from_remote(0, "pid 42\nThread 42 (idle): \"MainThread\"\n    f (a.py:1)\n")
    assert kept.splitlines()[0] == "native frames (py-spy dump --native, pid 42):" and "f (a.py:1)" in kept
    refused = pyspy.from_remote(0, "pid 42\nError: Operation not permitted\n")
    assert refused.startswith("native frames: py-spy gave none (Error: Operation not permitted)")


def test_the_remote_command_checks_the_child_and_finds_py_spy_in_a_real_shell(tmp_path):
    # The host's side, run by a real sh: a wrapper (whose cmdline names the pid file's tail) with a
    # Python child blocked on a lock; py-spy beside the child's interpreter (this virtualenv's).
    if pyspy.find(sys.executable) is None:
        pytest.fail("py-spy is not installed beside this python (pip install -e '.[test]')")
    pidfile = tmp_path / "a" / "b" / "c" / "worker-0.pid"
    pidfile.parent.mkdir(parents=True)
    child_code = "import threading; l = threading.Lock(); l.acquire(); l.acquire()"
    wrapper = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[2:])",
                                str(pidfile), sys.executable, "-c", child_code])
    try:
        def child() -> int:
            with open(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children") as fh:
                kids = fh.read().split()
            return int(kids[0]) if kids else 0
        wait_for(child, 30, what="the wrapper's child started")
        # (blocked on its lock, past its start-up: a dump before would show the interpreter starting)
        wait_for(lambda: "futex" in open(f"/proc/{child()}/wchan").read(), 30, what="the child blocked on its lock")
        pidfile.write_text(f"{wrapper.pid} {child()} 0\n")
        from launcher.backends.ssh.commands import native_stacks_command
        out = subprocess.run(["sh", "-c", native_stacks_command(str(pidfile))], capture_output=True, text=True,
                             timeout=60)
        text = pyspy.from_remote(out.returncode, out.stdout)
        assert text.startswith(f"native frames (py-spy dump --native, pid {child()}):"), out
        assert "<module> (<string>:1)" in text and ".so" in text, text  # its Python frame and native ones
        os.kill(child(), 9)
        wait_for(lambda: wrapper.poll() is not None, 30, what="the wrapper ended with its child")
        gone = subprocess.run(["sh", "-c", native_stacks_command(str(pidfile))], capture_output=True, text=True,
                              timeout=60)
        assert pyspy.from_remote(gone.returncode, gone.stdout) == "", gone.stdout
    finally:
        wrapper.kill()
        subprocess.run(["pkill", "-9", "-f", child_code], check=False)
        wrapper.wait()


def test_a_local_dump_of_a_real_blocked_process(tmp_path, monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import threading; l = threading.Lock(); l.acquire(); l.acquire()"])
    try:
        wait_for(lambda: "futex" in open(f"/proc/{proc.pid}/wchan").read() or
                 open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "S",
                 30, what="the process blocked on its lock")
        text = pyspy.dump_local(proc.pid, sys.executable)
        assert text.startswith(f"native frames (py-spy dump --native, pid {proc.pid}):"), text
        assert "<module> (<string>:1)" in text and "(libc" in text, text
        assert "Process " not in text and "Python v" in text, text
        # Not beside a python that has none, nor on PATH: one line says so.
        monkeypatch.setenv("PATH", str(tmp_path))
        assert pyspy.dump_local(proc.pid, "python") == pyspy.NOT_FOUND
    finally:
        proc.kill()
        proc.wait()


def test_tensorflows_threads_are_read_from_proc_and_from_the_hosts_lines(tmp_path):
    from launcher.backends.pyspy import THREADS, from_remote, thread_states

    for tid, name, call, wait in (("11", "python", "202 0x1", "futex_do_wait"), ("12", "tf_Compute", "257 0xff 0x1",
                                   "wait_for_partner"), ("13", "tf_data\x1b[2J", "0 0x3", "pipe_read")):
        folder = tmp_path / "42" / "task" / tid
        folder.mkdir(parents=True)
        for f, v in (("comm", name), ("syscall", call), ("wchan", wait)):
            (folder / f).write_text(v + "\n")
    assert thread_states(42, root=str(tmp_path)).splitlines() == [
        THREADS, "  tid 12 tf_Compute: syscall 257 in wait_for_partner", "  tid 13 tf_data\\x1b[2J: syscall 0 in pipe_read"]
    assert thread_states(43, root=str(tmp_path)) == ""
    out = "threads\n  tid 12 tf_Compute 257 wait_for_partner\n  tid 14 tf_Compute futex_do_wait\nend threads\nnospy\n"
    assert from_remote(0, out).splitlines()[1:] == [
        THREADS, "  tid 12 tf_Compute: syscall 257 in wait_for_partner", "  tid 14 tf_Compute: syscall - in futex_do_wait"]


# A process py-spy takes long to unwind (500 threads, each 30 Python calls deep: held stopped about
# 0.4 s by a dump on a quiet machine, longer on a busy one), counting on into a file while it runs.
MANY = ("import sys, threading, time\n"
        "def deep(n):\n    return deep(n - 1) if n else time.sleep(3600)\n"
        "[threading.Thread(target=deep, args=(30,), daemon=True).start() for _ in range(500)]\n"
        "n = 0\n"
        "while True:\n    n += 1; open(sys.argv[1], 'w').write(str(n)); time.sleep(0.02)\n")


def _counting(tmp_path):
    count = tmp_path / "count"
    proc = subprocess.Popen([sys.executable, "-c", MANY, str(count)])
    wait_for(lambda: count.exists() and count.read_text().strip(), 60, what="the process counting, its threads up")
    return proc, count


def _runs_on(proc, count) -> None:
    """``proc`` is neither stopped nor traced, and its count goes on."""
    assert procinfo.state(proc.pid) not in ("t", "T", ""), procinfo.state(proc.pid)
    seen = int(count.read_text() or 0)
    wait_for(lambda: int(count.read_text() or 0) > seen + 5, 30, what="the count to go on after the dump")


def test_a_dump_that_holds_the_task_past_the_limit_is_ended_and_the_task_runs_on(tmp_path):
    """A task py-spy holds stopped past PAUSE_LIMIT would miss TensorFlow's heartbeats (10 s late
    ends it): the dump is killed, the task runs on, one line says why. Here with a limit of 0 (the
    first look that finds it stopped by py-spy): the real py-spy, a real process."""
    if pyspy.find(sys.executable) is None:
        pytest.fail("py-spy is not installed beside this python (pip install -e '.[test]')")
    proc, count = _counting(tmp_path)
    try:
        held = pyspy.dump_local(proc.pid, sys.executable, 60, pause_limit=0)
        assert held == pyspy.HELD.format(limit=0), held
        _runs_on(proc, count)
        # With room (the default limit) the same process's dump is whole.
        whole = pyspy.dump_local(proc.pid, sys.executable, 60)
        assert whole.startswith(f"native frames (py-spy dump --native, pid {proc.pid}):"), whole[:300]
        assert "deep (<string>:3)" in whole, whole[:2000]
        _runs_on(proc, count)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("shell", ["sh", "bash"])  # (a host's login shell: dash or bash)
def test_the_hosts_dump_is_ended_the_same_way_in_a_real_shell(tmp_path, shell):
    """The ssh host's side of the same bound (remote_command: the task's state read every 0.1 s,
    the time from /proc/uptime), run by a real shell, with the same process as a wrapper's child."""
    if pyspy.find(sys.executable) is None:
        pytest.fail("py-spy is not installed beside this python (pip install -e '.[test]')")
    from launcher.backends.ssh.commands import native_stacks_command

    pidfile = tmp_path / "a" / "b" / "c" / "worker-0.pid"
    pidfile.parent.mkdir(parents=True)
    count = tmp_path / "count"
    wrapper = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[2:])",
                                str(pidfile), sys.executable, "-c", MANY, str(count)])
    try:
        wait_for(lambda: count.exists() and count.read_text().strip(), 60, what="the child counting, its threads up")
        with open(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children") as fh:
            child = int(fh.read().split()[0])
        pidfile.write_text(f"{wrapper.pid} {child} 0\n")
        temp = tmp_path / "tmp"  # (where the host's side keeps py-spy's output: nothing left there after)
        temp.mkdir()
        for limit, expect in ((0, "held"), (pyspy.PAUSE_LIMIT, "whole")):
            out = subprocess.run([shell, "-c", native_stacks_command(str(pidfile), limit)], capture_output=True,
                                 text=True, timeout=60, env={**os.environ, "TMPDIR": str(temp)})
            text = pyspy.from_remote(out.returncode, out.stdout, limit)
            assert not list(temp.iterdir()), list(temp.iterdir())
            if expect == "held":
                assert f"held {child}" in out.stdout.splitlines() and text == pyspy.HELD.format(limit=0), out
            else:
                assert text.startswith(f"native frames (py-spy dump --native, pid {child}):"), out.stdout[:500]
                assert "deep (<string>:3)" in text, text[:2000]
            assert procinfo.state(child) not in ("t", "T", ""), (limit, procinfo.state(child))
            seen = int(count.read_text() or 0)
            wait_for(lambda: int(count.read_text() or 0) > seen + 5, 30, what=f"the count to go on after the dump ({limit})")
    finally:
        wrapper.kill()
        subprocess.run(["pkill", "-9", "-f", "def deep"], check=False)
        wrapper.wait()
