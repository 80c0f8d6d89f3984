"""A real zygote (launcher/remote/zygote.py) for tests, importing ``json`` rather than TensorFlow,
and wrappers asking it for their tasks: shared by the zygote's unit tests and the ssh backend's
host-command tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backends.zygotes import PAD_BYTES, TITLE_BYTES
from launcher.contract import envnames
from launcher.remote import HERE, taskwrap_path
from tests.support.waits import wait_for

PAD = {envnames.ZYGOTE_PAD: "x" * PAD_BYTES}


def base_env() -> dict:
    """This test's environment without pytest's per-phase variable (it changes between the
    fixture and the test, and a zygote serves only the environment it started with)."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


@pytest.fixture
def zygote(tmp_path):
    """A zygote at tmp_path/z.sock (started with the pad, as the local backend starts it); its
    lines in tmp_path/zygote.log. Yields the socket's path."""
    sock = str(tmp_path / "z.sock")
    log = open(tmp_path / "zygote.log", "wb")
    proc = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), "--socket", sock, "--import", "json",
                             "--pad", envnames.ZYGOTE_PAD, "--title", "t" * TITLE_BYTES],
                            stdout=log, stderr=subprocess.STDOUT, env={**base_env(), **PAD}, start_new_session=True)
    wait_for(lambda: "ready" in (tmp_path / "zygote.log").read_text(), 30, what="the zygote's ready line")
    yield sock
    proc.kill()
    proc.wait()
    log.close()


def wrap(sock: str, cmd: list[str], env: dict | None = None, cwd: Path | None = None,
         pidfile: Path | None = None, wait: float = 60) -> subprocess.Popen:
    opts = ["--zygote", sock, "--zygote-wait", f"{wait:g}"] + (["--pidfile", str(pidfile)] if pidfile else [])
    return subprocess.Popen([sys.executable, str(taskwrap_path()), *opts, "--", *cmd], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**base_env(), **(env or {})}, cwd=cwd)


def finish(p: subprocess.Popen, timeout: float = 30) -> tuple[str, str]:
    """Wait with the lifeline (stdin) still open, then read both streams."""
    p.wait(timeout=timeout)
    return p.stdout.read().decode(), p.stderr.read().decode()


def task_pid(pidfile: Path) -> int:
    """The task's pid its wrapper wrote (once it had it from the zygote: the task may print first)."""
    wait_for(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 3, 10, what=f"{pidfile}")
    return int(pidfile.read_text().split()[1])


def zygote_pid(tmp_path: Path) -> int:
    return int((tmp_path / "zygote.log").read_text().split("pid=")[1].split()[0])
