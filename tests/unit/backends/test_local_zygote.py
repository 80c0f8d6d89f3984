"""The local backend's zygote (launcher/backends/zygotes.py LocalZygote) with real processes (a
zygote that imports ``json``, not TensorFlow): its socket is bound before it starts, so a
wrapper never waits on a server that is gone; one that ended is started again at the next start
on the same path; one that said it serves nothing (an import that opened an NVIDIA device, made
real in a mount namespace with such a device node) is never asked again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backends.zygotes import LOG, RESTARTS, LocalZygote
from launcher.remote import taskwrap_path
from tests.support.waits import wait_for

GRANDPARENT = "import os; print(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])"


def env_of() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def ready_pids(run_dir: Path) -> list[int]:
    text = (run_dir / LOG).read_text() if (run_dir / LOG).exists() else ""
    return [int(l.split("pid=")[1].split()[0]) for l in text.splitlines() if " ready pid=" in l]


def ask(sock: str, code: str, wait: float = 600) -> tuple[int, str, str]:
    """A wrapper asking ``sock`` for ``python -c code``: (exit, stdout, stderr)."""
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", sock, "--zygote-wait", f"{wait:g}", "--",
                          sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env_of())
    p.wait(timeout=120)  # (its lifeline, stdin, open meanwhile; 600 s were it waiting for a server)
    return p.returncode, p.stdout.read(), p.stderr.read()


@pytest.fixture
def local(tmp_path):
    written: list = []
    z = LocalZygote(tmp_path, tmp_path, grace=2.0, write=written.append)
    z.written = written  # (its zygote_ended events)
    yield z
    z.close()


def test_a_zygote_that_died_is_noticed_at_once_and_started_again(local, tmp_path):
    assert local.ensure(([sys.executable], ("json",)), env_of())
    sock = local.path()
    code, out, err = ask(sock, GRANDPARENT)  # (queued while it starts: no wait for a socket)
    (first,) = wait_for(lambda: ready_pids(tmp_path), 30, what="the zygote's ready line")
    assert (code, out, err) == (0, f"{first}\n", ""), err
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: local.proc.poll() is not None, 10, what="the zygote's wrapper ending with it")
    code, out, err = ask(sock, "print('ran')")
    assert (code, out) == (0, "ran\n") and err.startswith("taskwrap: started without the zygote: no zygote serves "), err
    assert local.ensure()  # the next start: a new one, on the same path
    assert local.path() == sock and "a new one starts (1 of 3)" in (tmp_path / LOG).read_text()
    assert [(e.host, e.code, e.restart, e.said) for e in local.written] == [
        ("localhost", 137, 1, "the run's zygote ended (exit 137); a new one starts (1 of 3)")]
    code, out, err = ask(sock, GRANDPARENT)
    second = wait_for(lambda: ready_pids(tmp_path)[1:], 30, what="the second zygote's ready line")[0]
    assert (code, out, err) == (0, f"{second}\n", "") and second != first, err


def test_a_zygote_that_keeps_dying_is_given_up(local, tmp_path):
    for n in range(RESTARTS + 1):
        assert local.ensure(([sys.executable], ("json",)), env_of())
        pid = wait_for(lambda: ready_pids(tmp_path)[n:], 30, what=f"zygote {n}'s ready line")[0]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: local.proc.poll() is not None, 10, what="the zygote's wrapper ending with it")
    assert not local.ensure(([sys.executable], ("json",)), env_of())
    assert f"its tasks start cold from now on: the run's zygote ended {RESTARTS + 1} times" in (tmp_path / LOG).read_text()


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare"), reason="a mount namespace needs root")
def test_an_import_that_opened_an_nvidia_device_is_not_served_and_never_waited_for(local, tmp_path):
    """The zygote's interpreter runs in a mount namespace whose /dev has a node named nvidia0 (the
    null device), and its import opens it, as CUDA's does: the zygote serves nothing, says why, a
    wrapper asking meanwhile starts cold at once with that reason, and the run never asks again."""
    (tmp_path / "opens_nvidia.py").write_text("import os\n_fd = os.open('/dev/nvidia0', os.O_RDONLY)\n")
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec unshare -m sh -c 'mount -t tmpfs none /dev && mknod -m 666 /dev/null c 1 3 "
                      "&& mknod -m 666 /dev/nvidia0 c 1 3 && exec \"$0\" \"$@\"' " f"{sys.executable} \"$@\"\n")
    python.chmod(0o755)
    env = {**env_of(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    assert local.ensure(([str(python)], ("opens_nvidia",)), env)
    code, out, err = ask(local.path(), "print('ran')")
    assert (code, out) == (0, "ran\n"), err
    why = "the import opened /dev/nvidia0: a fork would not have its CUDA; every task of this host starts cold"
    assert err == f"taskwrap: started without the zygote: {why}\n", err
    wait_for(lambda: local.proc.poll() is not None, 30, what="the zygote's end")
    assert local.proc.returncode == 0
    assert not local.ensure() and not local.socket_for([sys.executable, "-m", "worker"], env)[0]
    assert f"its tasks start cold from now on: {why}" in (tmp_path / LOG).read_text()
