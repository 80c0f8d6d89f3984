"""The docker backend's warm standby, its pure parts (launcher/backends/docker/standby.py): who a
promotion file is for, and where it lies here and in the container."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from launcher.backends.docker import standby


@pytest.mark.parametrize("user, image_user, expected", [
    ("1000:1000", "", (1000, 1000)),  # a launcher that is not root: its own uid and gid
    (None, "1000:1001", (1000, 1001)),  # root: the image's numeric USER
    (None, "1234", (1234, 1234)),
    ("5000:staff", "", (5000, 5000)),  # a group name: the uid's own group, readable either way
    (None, "", (0, 0)),  # no USER: root in the container
    (None, "tfcluster", None),  # a name: no uid known here, so no promotion file
    ("worker", "1000:1000", None),  # docker.user wins over the image's
])
def test_the_container_user_a_promotion_file_is_for(user, image_user, expected):
    assert standby.owner(user, image_user) == expected


def test_the_promotion_file_is_on_the_run_mount_and_private(tmp_path):
    here, inside = standby.promotion_paths(tmp_path, "worker-1", 3)
    assert here == tmp_path / "standby" / "worker-1.3.json"
    assert inside == "/tfcluster/run/standby/worker-1.3.json"
    standby.write(here, {"TF_CONFIG": "{}", "TFCLUSTER_RESTART_COUNT": "1"}, (os.getuid(), os.getgid()))
    assert json.loads(here.read_text()) == {"TF_CONFIG": "{}", "TFCLUSTER_RESTART_COUNT": "1"}
    assert stat.S_IMODE(here.stat().st_mode) == 0o600 and not list(Path(here.parent).glob("*.tmp"))


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_root_gives_the_file_and_its_directory_to_the_container_user(tmp_path):
    here, _ = standby.promotion_paths(tmp_path, "worker-0", 1)
    standby.write(here, {"A": "1"}, (1000, 1001))
    for p in (here, here.parent):  # the worker reads the file, then removes it
        assert (p.stat().st_uid, p.stat().st_gid) == (1000, 1001)
