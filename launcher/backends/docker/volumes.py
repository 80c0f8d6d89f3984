"""What containers mount: the run record and the state directory at fixed paths, the spec's
docker.volumes, and the ownership that lets the container's user write to them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from launcher.errors import LaunchError

STATE_MOUNT = "/tfcluster/state"
RUN_MOUNT = "/tfcluster/run"


def host_path(raw: str, base_dir: Path) -> Path:
    """A docker.volumes host path: ``~`` expanded, relative ones from the spec's directory."""
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (base_dir / path).resolve()


def check(volumes: Sequence[str], base_dir: Path) -> None:
    """Every docker.volumes host path exists (the engine would create a root-owned directory)."""
    for item in volumes:
        host = host_path(item.split(":", 1)[0], base_dir)
        if not host.exists():
            raise LaunchError(f"docker.volumes: host path {host} does not exist; create it or fix '{item}'")


def binds(record: Any, volumes: Sequence[str], base_dir: Path) -> dict:
    """The binds of a task's container: the state directory, the run directory, docker.volumes."""
    out = {
        str(record.state_dir): {"bind": STATE_MOUNT, "mode": "rw"},
        str(record.dir): {"bind": RUN_MOUNT, "mode": "rw"},
    }
    for item in volumes:
        host, container_path, *mode = item.split(":")
        out[str(host_path(host, base_dir))] = {"bind": container_path, "mode": mode[0] if mode else "rw"}
    return out


def prepare_owner(record: Any, user: str, image_user: str) -> Optional[str]:
    """Create the run's mounted directories and return the user tasks run as (None: the image's),
    making the directories writable for it where that user is not ours."""
    dirs = [Path(record.state_dir), Path(record.dir)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    if user:
        return user
    if os.geteuid() != 0:
        # Files in the run record stay yours; HOME goes to /tmp (no passwd entry).
        return f"{os.getuid()}:{os.getgid()}"
    uid = image_user.split(":", 1)[0]
    if uid.isdigit() and uid != "0":
        gid = image_user.split(":", 1)[1] if ":" in image_user else uid
        _chown_tree(dirs[0], int(uid), int(gid) if gid.isdigit() else int(uid))
        os.chown(dirs[1], int(uid), int(gid) if gid.isdigit() else int(uid))
    elif image_user and image_user not in ("root", "0"):
        for d in dirs:  # a named user we cannot map to a uid from here
            os.chmod(d, 0o1777)
    return None


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the container's user the state directory (only what is not theirs already)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            try:
                st = os.lstat(name)
                if st.st_uid != uid or st.st_gid != gid:
                    os.lchown(name, uid, gid)
            except OSError:
                pass
