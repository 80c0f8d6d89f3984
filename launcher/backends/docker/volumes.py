"""What containers mount: the run record and the state directory at fixed paths, the spec's
docker.volumes, and the ownership that lets the container's user write to them: the directories
are given to that user's uid (a name is looked up in the image), never opened to everyone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

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


def prepare_owner(record: Any, user: str, ids: Optional[tuple[int, int]]) -> Optional[str]:
    """Create the run's mounted directories and return the user tasks run as (None: the image's
    or docker.user as given). ``ids``: the (uid, gid) that user is (``container_ids``), given the
    directories (kept 0700: no one else can write them, nor plant a checkpoint) where it is not
    this user; None: root's or this user's own."""
    dirs = [Path(record.state_dir), Path(record.dir)]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    if not user and os.geteuid() != 0:
        # Files in the run record stay yours; HOME goes to /tmp (no passwd entry).
        return f"{os.getuid()}:{os.getgid()}"
    if ids is not None and os.geteuid() == 0:
        _chown_tree(dirs[0], *ids)
        os.chown(dirs[1], *ids)
    return user or None


def container_ids(user: str, files: Callable[[], tuple[str, str]]) -> Optional[tuple[int, int]]:
    """The (uid, gid) of the container user ``user`` (``NAME|UID[:GROUP|GID]``, docker.user or the
    image's USER); None for root (or none given). A name is looked up in the image's own
    /etc/passwd and /etc/group (``files()`` reads them: only when a name needs it); LaunchError
    when the image does not have it."""
    name, _, group = user.partition(":")
    if name in ("", "root", "0"):
        return None
    passwd = groups = ""
    if not name.isdigit() or (group and not group.isdigit()):
        passwd, groups = files()
    if name.isdigit():
        uid, gid = int(name), int(name)
    else:
        entry = _entry(passwd, name)
        if entry is None or not (entry[2].isdigit() and entry[3].isdigit()):
            raise LaunchError(f"docker: the image's user '{name}' is not in its /etc/passwd, so its directories "
                              f"cannot be given to it; fix: set docker.user to a numeric UID:GID")
        uid, gid = int(entry[2]), int(entry[3])
    if group.isdigit():
        gid = int(group)
    elif group:
        entry = _entry(groups, group)
        if entry is None or not entry[2].isdigit():
            raise LaunchError(f"docker: the image's group '{group}' is not in its /etc/group; "
                              f"fix: set docker.user to a numeric UID:GID")
        gid = int(entry[2])
    return None if uid == 0 else (uid, gid)


def _entry(text: str, name: str) -> Optional[list[str]]:
    """The fields of ``name``'s line of a passwd or group file's ``text``."""
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == name:
            return fields
    return None


def image_files(client: Any, image: str, labels: dict) -> tuple[str, str]:
    """The image's /etc/passwd and /etc/group (a container created, never started, read, removed)."""
    import io
    import tarfile

    out = []
    created = client.api.create_container(image, command=["true"], entrypoint=[], labels=labels)
    try:
        for path in ("/etc/passwd", "/etc/group"):
            try:
                stream, _ = client.api.get_archive(created["Id"], path)
            except Exception:  # noqa: BLE001 - none there: no name is found in it
                out.append("")
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream)[:4 << 20])) as tar:
                member = tar.next()
                data = tar.extractfile(member).read() if member is not None and member.isfile() else b""
            out.append(data.decode("utf-8", "replace"))
    finally:
        client.api.remove_container(created["Id"], force=True)
    return out[0], out[1]


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
