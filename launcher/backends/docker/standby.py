"""Warm standby on docker (restart.warm_standby; the protocol: launcher/supervise/standby.py).

A standby is a container of its own for the task, on the run's network but without the task's
DNS name (``worker-0``, the network alias TF_CONFIG dials) while the current attempt's container
holds it, and named ``<task's container>-standby-<n>``. It is labelled like every container of
the run (``tfcluster down`` and ``close`` remove it by id and label) plus ``tfcluster.standby``.

Its promotion file is on the run directory's bind mount (host ``<run>/standby/<slug>.<n>.json``,
the container's ``/tfcluster/run/standby/...``), owned by the user the container runs as (the
worker reads it, then removes it; a name is that user's uid in the image, volumes.container_ids).
Where no uid is known (a name, not as root), no file is given: the standby keeps the environment
it started with, which on docker is the next attempt's (the plan never changes here: no elastic
moves).

Promoting: the previous container of the task is removed (its name and address freed), the
standby reconnected to the network with the task's alias (its TF server has not started, so a
new IP is harmless; the engine rewrites its /etc/hosts) and renamed like the task, the file
written, then SIGUSR1 to the container: its init (tini -g in tfcluster's image, or the engine's)
passes it to the task's process group, where the lifeline wrapper ignores it and the waiting
worker takes it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Mapping, Optional

from launcher.backends.docker import containers, volumes
from launcher.backends.standbyfile import write_promotion
from launcher.plan.build import PlannedTask

LABEL_STANDBY = "tfcluster.standby"
SUBDIR = "standby"


def owner(user: Optional[str], image_user: str) -> Optional[tuple[int, int]]:
    """The uid and gid a task's container runs as (``user``: what the backend passes as the
    container's user, else the image's USER); None where it is a name (unknown from here)."""
    raw = user or image_user or "0"
    uid, _, gid = raw.partition(":")
    if not uid.isdigit():
        return None
    return int(uid), int(gid) if gid.isdigit() else int(uid)


def promotion_paths(run_dir: Path, slug: str, number: int) -> tuple[Path, str]:
    """A standby's promotion file: its path here and in the container (the run dir's mount)."""
    name = f"{slug}.{number}.json"
    return Path(run_dir) / SUBDIR / name, f"{volumes.RUN_MOUNT}/{SUBDIR}/{name}"


def write(path: Path, env: Mapping[str, str], uid_gid: tuple[int, int]) -> None:
    """The promotion file (mode 0600), owned like its directory by the container's user, who
    reads and then removes it."""
    write_promotion(path, env)
    if os.geteuid() == 0 and uid_gid != (0, 0):
        for p in (path.parent, path):
            st = os.stat(p)
            if (st.st_uid, st.st_gid) != uid_gid:
                os.chown(p, *uid_gid)


def promote(client: Any, handles: dict, network_id: Optional[str], handle: Any, name: str,
            owner: Optional[tuple[int, int]], task: PlannedTask, environment: Mapping[str, str]) -> None:
    """Make ``handle``'s standby container the task (see the module's docstring): the task's
    alias on the run's network ``network_id``, its container ``name``, ``handles`` (task key ->
    the task's container) updated, ``environment`` (what a cold start's container would get) in
    its promotion file, owned by ``owner``. The engine's errors propagate (the tasks' seam makes
    them a LaunchError: the task then starts cold)."""
    api = client.api
    old = handles.pop(task.key, None)
    if old is not None and old is not handle:  # free the task's alias and name
        containers.close_quietly(old.lifeline)
        containers.remove(client, old.id)
    api.disconnect_container_from_network(handle.id, network_id)
    api.connect_container_to_network(handle.id, network_id, aliases=[task.address])
    handle.forget_ip()
    api.rename(handle.id, name)
    handle.name = name
    path = getattr(handle, "promotion", None)
    if path is not None:
        write(path, environment, owner)
    api.kill(handle.id, signal=int(signal.SIGUSR1))  # raises if the container is gone: start cold
    handles[task.key] = handle
