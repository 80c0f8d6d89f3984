"""A second real user on this machine, for the cases where another user of a shared machine is the
attacker (docs/concepts/trust.md, "Other users of the machine"): made once with ``useradd`` (no
home, no login shell), then acted as with ``runuser -u``. Needs root. The fixtures ``mallory`` (the
user) and ``base`` (a dir both users reach) are tests/hostile/conftest.py's, from here."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.prereq import require, require_root, require_tool

NAME = "tfcmallory"
# The system's own interpreter: the other user can run it (a test's virtualenv may be private).
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


def other_user() -> pwd.struct_passwd:
    """The second user, made if missing (idempotent: a second test session finds it there)."""
    require_root()
    require_tool("useradd", "passwd")
    require_tool("runuser", "util-linux")
    try:
        return pwd.getpwnam(NAME)
    except KeyError:
        pass
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
                          capture_output=True, text=True, timeout=60)
    try:
        return pwd.getpwnam(NAME)
    except KeyError:  # (made by a session beside this one meanwhile: found above next time)
        require(False, f"cannot add the user {NAME}: {made.stderr.strip()}")
        raise


def as_other(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``argv`` run as the other user (its own uid and groups, none of root's)."""
    return subprocess.run(["runuser", "-u", NAME, "--", *argv], capture_output=True, text=True, timeout=timeout)


# A Python that opens a path for reading as the other user: exit 13 for EACCES, 0 if it could
# read it, 1 for anything else (printed).
READ = ("import errno, sys\n"
        "try:\n"
        "    open(sys.argv[1], 'rb').read(1)\n"
        "except OSError as exc:\n"
        "    print(exc); sys.exit(13 if exc.errno == errno.EACCES else 1)\n")


def other_can_read(path: Path) -> int:
    """How reading ``path`` as the other user ended: 13 (EACCES), 0 (read), 1 (something else)."""
    return as_other(PYTHON, "-c", READ, str(path)).returncode


def shared_dir() -> Iterator[Path]:
    """A fresh dir under /tmp that both users can reach (root's, 0755: pytest's own tmp dirs are
    0700, where the other user could do nothing at all); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="tfc-users-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# A listener as the other user: all interfaces, as TensorFlow's server binds; it ends when its
# stdin closes. SO_REUSEADDR as gRPC's and an attacker's would: without it a TIME_WAIT left on the
# port by an earlier test's TensorFlow (the lab's hosts live for the whole shard, and most specs
# start at port 23456) failed the bind with EADDRINUSE (seen in CI), though nothing held it.
_HOLD = ("import socket, sys\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); print('held', flush=True)\n"
         "sys.stdin.read()\n")


def hold_port_as_other(port: int, tag: str = "", netns: str = "") -> subprocess.Popen:
    """The other user listening on ``port`` until the returned process's stdin is closed
    (``release``); its command line is ``PYTHON -c '# TAG<newline>import socket...' PORT``: a
    ``tag`` (a test's hostile text) near its start. ``netns``: in that network namespace (a lab
    host's)."""
    where = ["ip", "netns", "exec", netns] if netns else []
    proc = subprocess.Popen([*where, "runuser", "-u", NAME, "--", PYTHON, "-c", f"# {tag}\n{_HOLD}", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if line != "held":
        sockets = subprocess.run([*where, "ss", "-tanp", f"( sport = :{port} )"], capture_output=True, text=True)
        raise AssertionError(f"the other user could not listen on port {port}: {line!r}; "
                             f"its sockets there: {sockets.stdout.strip()[-1500:]!r}")
    return proc


def release(holder: subprocess.Popen) -> None:
    """The other user's listener (``hold_port_as_other``) closed, and waited for."""
    if holder.stdin and not holder.stdin.closed:
        holder.stdin.close()
    try:
        holder.wait(30)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait(10)


@pytest.fixture(scope="module")
def mallory() -> pwd.struct_passwd:
    """The second user (made if missing)."""
    return other_user()


@pytest.fixture
def base(mallory) -> Iterator[Path]:
    """A fresh dir under /tmp that both users can reach (``shared_dir``)."""
    yield from shared_dir()
