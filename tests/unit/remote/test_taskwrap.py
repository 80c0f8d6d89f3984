"""taskwrap.py with real processes: exit codes, group cleanup, and the lifeline."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from launcher.remote import HERE, TASK_FILES, taskwrap_path
from tests.support.processes import pids_with_env
from tests.support.waits import wait_for


def wrap(cmd: list[str], *opts: str, env_tag: str = "", **kw) -> subprocess.Popen:
    env = dict(os.environ, TFCLUSTER_TEST_TAG=env_tag)
    return subprocess.Popen([sys.executable, str(taskwrap_path()), *opts, "--", *cmd], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env, **kw)


def finish(p: subprocess.Popen, timeout: float = 20) -> bytes:
    """Wait with stdin (the lifeline) still open, unlike communicate(), then read the output."""
    p.wait(timeout=timeout)
    return p.stdout.read()


def test_exit_code_passes_through():
    p = wrap([sys.executable, "-c", "import sys; print('hi'); sys.exit(7)"])
    out = finish(p)
    assert p.returncode == 7 and b"hi" in out


def test_signal_death_becomes_128_plus_n():
    p = wrap([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    finish(p)
    assert p.returncode == 128 + signal.SIGKILL


def test_missing_command_is_127():
    p = wrap(["/nonexistent/prog"])
    out = finish(p)
    assert p.returncode == 127 and b"cannot run '/nonexistent/prog'" in out


def test_killpg_sigterm_reaches_task_and_wrapper_reports_it():
    p = wrap([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    assert p.stdout.readline().strip() == b"up"
    os.killpg(p.pid, signal.SIGTERM)
    finish(p)
    assert p.returncode == 128 + signal.SIGTERM


def test_the_stacks_signal_to_the_group_reaches_a_task_under_the_stub_and_the_wrapper_survives_it(tmp_path):
    # Docker's init and slurm's scancel signal the whole group: the stub's task writes its stacks
    # (launcher/contract/liveness.py), the wrapper stays, and the run goes on to its own exit code.
    from launcher.supervise.standby import stub_command

    task = tmp_path / "task.py"
    task.write_text("import sys, time; print('up', flush=True); time.sleep(1.5); sys.exit(5)")
    p = wrap(stub_command([sys.executable, str(task)]))
    assert p.stdout.readline().startswith(b"tfcluster-beat n=0 stacks=12")
    assert p.stdout.readline().strip() == b"up"
    os.killpg(p.pid, signal.SIGUSR2)
    out = finish(p)
    assert p.returncode == 5, out
    assert b"(most recent call first):" in out and f'"{task}", line 1 in <module>'.encode() in out, out


def test_lifeline_eof_kills_task_and_grandchildren():
    tag = f"lifeline-{os.getpid()}-{time.time()}"
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
              "print('up', flush=True); time.sleep(120)")
    p = wrap([sys.executable, "-c", script], "--grace", "1", env_tag=tag)
    assert p.stdout.readline().strip() == b"up"
    wait_for(lambda: len(pids_with_env("TFCLUSTER_TEST_TAG", tag)) == 3, 10, what="wrapper, task and grandchild")
    p.stdin.close()  # what happens when the launcher dies
    p.wait(timeout=20)
    wait_for(lambda: not pids_with_env("TFCLUSTER_TEST_TAG", tag), 10, what="every process of the group to exit")


def test_task_ignoring_sigterm_is_killed_after_grace_on_lifeline_loss():
    tag = f"stubborn-{os.getpid()}-{time.time()}"
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
    p = wrap([sys.executable, "-c", script], "--grace", "0.5", env_tag=tag)
    assert p.stdout.readline().strip() == b"up"
    started = time.monotonic()
    p.stdin.close()
    p.wait(timeout=20)
    assert time.monotonic() - started < 10
    wait_for(lambda: not pids_with_env("TFCLUSTER_TEST_TAG", tag), 10, what="the stubborn task to die")


def test_lease_expiry_kills_group():
    tag = f"lease-{os.getpid()}-{time.time()}"
    p = wrap([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"], "--lease", "1",
             "--grace", "0.5", env_tag=tag)
    assert p.stdout.readline().strip() == b"up"
    # stdin stays open but silent: the lease must expire on its own
    p.wait(timeout=20)
    out = p.stdout.read()
    assert b"lease expired" in out
    wait_for(lambda: not pids_with_env("TFCLUSTER_TEST_TAG", tag), 10, what="the task to die")


def test_leftover_grandchild_is_killed_when_task_exits():
    tag = f"leftover-{os.getpid()}-{time.time()}"
    script = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])"
    p = wrap([sys.executable, "-c", script], env_tag=tag)
    finish(p)
    assert p.returncode == 0
    wait_for(lambda: not pids_with_env("TFCLUSTER_TEST_TAG", tag), 10, what="the grandchild to be killed")


def test_pidfile_written(tmp_path):
    pidfile = tmp_path / "task.pid"
    p = wrap([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"], "--pidfile", str(pidfile))
    assert p.stdout.readline().strip() == b"up"
    wrapper_pid, task_pid, started = map(int, pidfile.read_text().split())
    assert started == int(open(f"/proc/{wrapper_pid}/stat").read().rsplit(")", 1)[1].split()[19])
    assert wrapper_pid == p.pid and os.getpgid(task_pid) == p.pid
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=10)


def test_task_stdin_is_devnull_not_the_lifeline():
    p = wrap([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], "--lease", "5")
    p.stdin.write(b"lease bytes\n")
    p.stdin.flush()
    out = finish(p)
    assert p.returncode == 0 and out.strip() == b"''"


def test_the_docker_image_runs_the_same_wrapper():
    """The image copies the file taskwrap_path() names (and the rest of launcher.remote.TASK_FILES
    beside it) out of the installed package, and its tfcluster.lifeline label runs that copy as a
    file (a user's ``launcher/`` in the working directory would replace ``python -m
    launcher.remote.taskwrap``)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    text = (root / "launcher" / "image" / "Dockerfile").read_text()
    package = ".".join(taskwrap_path().parent.relative_to(root).parts)
    assert f"import {package} as r" in text
    assert "shutil.copy(r.HERE / n, \"/usr/local/lib/tfcluster/\") for n in (*r.TASK_FILES" in text
    assert taskwrap_path().name in TASK_FILES and taskwrap_path().parent == HERE
    assert 'LABEL tfcluster.lifeline="python /usr/local/lib/tfcluster/taskwrap.py"' in text
    assert "-m launcher" not in text.split("LABEL tfcluster.lifeline", 1)[1].splitlines()[0]


def test_gpu_watch_reports_what_its_task_group_holds_on_its_gpus(tmp_path):
    """--gpu-watch with the fake nvidia-smi (2 GPUs): each task lists its own pid as a compute app
    holding 777 MiB on GPU 0; the GPU task's wrapper writes the figure (and the fake's 37 % on
    GPU 0) once it sees it. A task with CUDA_VISIBLE_DEVICES=-1, started first, gets no watch:
    no line by the time the GPU task's has come."""
    from tests.support.gpus import fake_bin

    apps = tmp_path / "apps"
    env = dict(os.environ, PATH=f"{fake_bin(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
               FAKE_NVIDIA_SMI_GPUS="2", FAKE_NVIDIA_SMI_APPS_FILE=str(apps))
    hold = ("import os, sys, time; fh = open(sys.argv[1], 'a'); fh.write('%d:777\\n' % os.getpid()); fh.close(); "
            "time.sleep(60)")

    def run(visible: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(taskwrap_path()), "--gpu-watch", "0.2", "--",
                                 sys.executable, "-c", hold, str(apps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, env=dict(env, CUDA_VISIBLE_DEVICES=visible))

    cpu = run("-1")
    wait_for(lambda: apps.exists() and apps.read_text().count(":777") == 1, 30, what="the CPU task to list itself")
    p = run("0")
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"taskwrap: GPU figures [777, 37]\n" not in seen and time.monotonic() < deadline:
            seen += p.stdout.readline()
    finally:
        for proc in (p, cpu):
            os.killpg(proc.pid, signal.SIGKILL)
    assert b"taskwrap: GPU figures [777, 37]\n" in seen, seen.decode(errors="replace")[-2000:]
    p.communicate(timeout=10)
    assert b"GPU figures" not in cpu.communicate(timeout=10)[0]


def _blocked_in_pipe_write(pid: int) -> bool:
    """One of ``pid``'s threads sleeps in a write to a full pipe (its kernel wait channel)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan") as fh:
                if "pipe" in fh.read():
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("through", ["taskwrap", "boot"])
def test_a_daemon_thread_blocked_on_stderr_cannot_hold_or_change_the_exit_code(tmp_path, through):
    """The wrapper's stderr is a pipe its reader has stopped draining (full). Its GPU watch (a daemon
    thread; a fake nvidia-smi with 2 GPUs, the task on GPU 0) writes the task's first figures and
    blocks in that write; the task then exits on its own. The wrapper must exit at once with the
    task's code. Through ``sys.stderr`` (a buffered stream with a lock, PYTHONUNBUFFERED unset as
    on a cluster host) that blocked write held the stream's lock: the interpreter's flush at the
    end of the script waited for it for as long as the reader did not read, and a flush at
    interpreter shutdown behind such a write aborts ("Fatal Python error: _enter_buffered_busy:
    could not acquire lock for <stderr> at interpreter shutdown, possibly due to daemon threads":
    SIGABRT, 134 over ssh). ``boot``: as the ssh backend and the host agent start it (boot.py reads
    the task's environment from stdin, then runs taskwrap's main in its own process)."""
    from tests.support.gpus import fake_bin

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    pidfile = tmp_path / "pids"
    # Python's stderr is a buffered stream with a lock unless PYTHONUNBUFFERED is set (as it is
    # in some shells and CI images, not on a cluster host reached over ssh): the wrapper as a host runs it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(PATH=f"{fake_bin(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}", FAKE_NVIDIA_SMI_GPUS="2",
               FAKE_NVIDIA_SMI_APPS_FILE=str(tmp_path / "apps"), CUDA_VISIBLE_DEVICES="0")
    script = "import time; print('up', flush=True); time.sleep(120)"
    wrapper = [sys.executable, str(taskwrap_path())]
    if through == "boot":
        wrapper = [sys.executable, str(taskwrap_path().with_name("boot.py")), str(taskwrap_path())]
    p = subprocess.Popen([*wrapper, "--gpu-watch", "0.2", "--pidfile", str(pidfile), "--", sys.executable, "-c", script],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=write_end, start_new_session=True, env=env)
    os.close(write_end)
    if through == "boot":
        task_env = json.dumps({"TFCLUSTER_TEST_TAG": "boot"}).encode()
        p.stdin.write(b"%d\n%s" % (len(task_env), task_env))
        p.stdin.flush()
    drained = bytearray()
    held = None
    try:
        assert p.stdout.readline().strip() == b"up"
        task = int(pidfile.read_text().split()[1])
        wait_for(lambda: _blocked_in_pipe_write(p.pid), 20, what="the GPU watch to block writing to stderr")
        os.kill(task, signal.SIGUSR2)  # the task ends on its own: the wrapper's code is 128 + SIGUSR2
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            held = "the wrapper did not exit within 15 s of its task while its stderr was not read"
    finally:
        deadline = time.monotonic() + 15
        while p.poll() is None and time.monotonic() < deadline:
            if select.select([read_end], [], [], 0.5)[0]:
                drained += os.read(read_end, 65536)
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        os.close(read_end)
        p.stdin.close()
    said = bytes(drained).replace(b"x", b"").decode(errors="replace")
    assert held is None and p.returncode == 128 + signal.SIGUSR2, \
        f"{held or 'the wrapper exited ' + str(p.returncode) + ', not the task code'}; it said: {said[-1500:]}"
