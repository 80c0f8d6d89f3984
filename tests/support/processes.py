"""A run's processes, found by their environment (``TFCLUSTER_RUN_ID``, ``TFCLUSTER_TASK``) in /proc."""

from __future__ import annotations

import os
from pathlib import Path


def pids_with_env(name: str, value: str) -> list[int]:
    """PIDs whose initial environment has ``name=value`` (how tests find a run's tasks)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            found.append(int(entry))
    return found


def task_pids(run_id: str, key: str) -> list[int]:
    """The active task processes (not their taskwrap wrappers, not waiting warm standbys) of task
    ``key`` in run ``run_id``. A promoted standby keeps TFCLUSTER_STANDBY=1 in its initial
    environment (what /proc shows), so the active ones are told by their attempt: a waiting
    standby was started for the next one (TFCLUSTER_RESTART_COUNT one higher), and an attempt's
    processes are stopped before the next attempt's start: the lowest attempt alive is the active one."""
    by_attempt: dict[int, list[int]] = {}
    for pid in pids_with_env("TFCLUSTER_RUN_ID", run_id):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"TFCLUSTER_TASK={key}".encode() in env and b"taskwrap.py" not in cmd:
            counts = [e.split(b"=", 1)[1] for e in env if e.startswith(b"TFCLUSTER_RESTART_COUNT=")]
            attempt = int(counts[0]) if counts and counts[0].isdigit() else 0
            by_attempt.setdefault(attempt, []).append(pid)
    return by_attempt[min(by_attempt)] if by_attempt else []


def task_pid(run_id: str, key: str) -> int:
    """The one active process of task ``key`` (raises if it is not running)."""
    pids = task_pids(run_id, key)
    if not pids:
        raise RuntimeError(f"no process for {key}")
    return pids[0]


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
