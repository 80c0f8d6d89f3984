"""Who the docker backend gives a run's mounted dirs to (launcher/backends/docker/volumes.py): the
container user's uid, a name looked up in the image's own /etc/passwd, never a dir open to all."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest

from launcher.backends.docker import volumes
from launcher.errors import LaunchError

PASSWD = "root:x:0:0:root:/root:/bin/bash\ntfcluster:x:1234:2345::/home/tfcluster:/bin/sh\n"
GROUP = "root:x:0:\nstaff:x:50:\n"


def _files():
    return PASSWD, GROUP


def _never():
    raise AssertionError("the image's files are read only for a name")


@pytest.mark.parametrize("user, expected", [
    ("", None), ("root", None), ("0", None), ("0:0", None),
    ("1000", (1000, 1000)), ("1000:1001", (1000, 1001)),
])
def test_numbers_need_no_look_up(user, expected):
    assert volumes.container_ids(user, _never) == expected


@pytest.mark.parametrize("user, expected", [
    ("tfcluster", (1234, 2345)), ("tfcluster:staff", (1234, 50)), ("tfcluster:7", (1234, 7)), ("1000:staff", (1000, 50)),
])
def test_a_name_is_looked_up_in_the_images_files(user, expected):
    assert volumes.container_ids(user, _files) == expected


def test_a_name_the_image_does_not_have_is_one_line_with_the_fix():
    with pytest.raises(LaunchError) as info:
        volumes.container_ids("nobody-here", _files)
    assert str(info.value) == ("docker: the image's user 'nobody-here' is not in its /etc/passwd, so its directories "
                               "cannot be given to it; fix: set docker.user to a numeric UID:GID")
    with pytest.raises(LaunchError, match="group 'wheel' is not in its /etc/group"):
        volumes.container_ids("tfcluster:wheel", _files)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving dirs to another uid needs root")
def test_as_root_the_dirs_go_to_the_uid_and_stay_private(tmp_path):
    record = SimpleNamespace(state_dir=tmp_path / "state", dir=tmp_path / "run")
    for d in (record.state_dir, record.dir):
        d.mkdir(mode=0o700)
    (record.state_dir / "ckpt").write_text("x")
    assert volumes.prepare_owner(record, "", (1234, 2345)) is None
    for path in (record.state_dir, record.dir, record.state_dir / "ckpt"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (1234, 2345)
        assert not st.st_mode & 0o022, oct(st.st_mode)
    assert stat.S_IMODE(record.state_dir.stat().st_mode) == 0o700
