"""The one private unix-socket bind of the fork server (launcher/remote/privsock.py), used by its
three starters (the local backend, the ssh host agent, zygote.py on its own): a socket others
have no access to (umask 077) in a dir of this user's own no one else can enter; a stale socket
of ours replaced; a planted symlink, a file, another user's socket or dir refused, in one line
naming the path."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys

import pytest

from launcher.remote import HERE
from launcher.remote.privsock import NotPrivate, bind_private, private_dir

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a path to another user needs root")


@pytest.fixture
def home():
    """A private dir as the starters make it (0700), removed after."""
    import shutil

    d = private_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_private_socket_is_its_owners_alone_in_a_0700_dir_and_replaces_a_stale_one_of_ours(home):
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700
    path = os.path.join(home, "z.sock")
    first = bind_private(path)
    assert stat.S_IMODE(os.lstat(path).st_mode) & 0o077 == 0 and stat.S_ISSOCK(os.lstat(path).st_mode)
    first.close()  # (a server that ended: its socket file stays)
    again = bind_private(path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(path)  # listening
    finally:
        again.close()


def test_a_planted_symlink_or_file_at_the_path_is_refused_in_one_line(home, tmp_path):
    path = os.path.join(home, "z.sock")
    target = tmp_path / "elsewhere"
    os.symlink(target, path)
    with pytest.raises(NotPrivate) as got:
        bind_private(path)
    assert str(got.value) == f"{path} is a symlink; refusing to bind a socket there"
    assert os.path.islink(path) and not target.exists()  # (nothing followed, nothing removed)
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(NotPrivate, match=f"^{path} is there already and is not a socket; refusing to replace it$"):
        bind_private(path)


@pytest.mark.parametrize("how, problem", [
    ("symlink", "{dir} is a symlink, not a dir of this user's own"),
    ("open", "{dir} can be entered by others (mode 0755; it must be 0700)"),
    ("missing", "{dir}: No such file or directory"),
])
def test_a_dir_others_could_enter_or_swap_is_refused(home, tmp_path, how, problem):
    if how == "symlink":
        d = str(tmp_path / "link")
        os.symlink(home, d)
    elif how == "open":
        d = home
        os.chmod(d, 0o755)
    else:
        d = str(tmp_path / "gone")
    path = os.path.join(d, "z.sock")
    with pytest.raises(NotPrivate) as got:
        bind_private(path)
    assert str(got.value) == f"cannot bind {path}: " + problem.format(dir=d)
    assert not os.path.exists(os.path.join(home, "z.sock"))


@as_root
def test_another_users_socket_or_dir_is_refused(home):
    path = os.path.join(home, "z.sock")
    bind_private(path).close()
    os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(NotPrivate) as got:
        bind_private(path)
    assert str(got.value).startswith(f"{path} is a socket of ") and "not this user's; refusing to replace it" in str(got.value)
    assert os.lstat(path).st_uid == NOBODY  # (left as it was)
    os.chown(home, NOBODY, NOBODY)
    with pytest.raises(NotPrivate, match=f"^cannot bind {path}: {home} is owned by .*, not by this user$"):
        bind_private(path)


def test_the_zygote_on_its_own_binds_the_same_way_and_says_why_not_in_one_line(tmp_path):
    """zygote.py without --listen-fd: in a dir others can enter, one line and exit 2."""
    os.chmod(tmp_path, 0o755)
    sock = str(tmp_path / "z.sock")
    got = subprocess.run([sys.executable, str(HERE / "zygote.py"), "--socket", sock, "--import", "json"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr == (f"tfcluster-zygote: cannot bind {sock}: {tmp_path} can be entered by others "
                          "(mode 0755; it must be 0700)\n"), got.stderr
    assert not os.path.exists(sock)
