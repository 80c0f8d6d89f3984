"""Shared test helpers: find processes of a run by their environment, wait with timeouts."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable


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


def flat(rows) -> list:
    """The numbers of a list of tuples, in order: what ``pytest.approx`` compares (pytest 9.2
    refuses nested data structures, so ``flat(a) == approx(flat(b))`` instead of ``a == approx(b)``)."""
    return [x for row in rows for x in row]


def wait_for(predicate: Callable[[], object], timeout: float, interval: float = 0.1, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def task_pids(run_id: str, key: str) -> list[int]:
    """The active task processes (not their taskwrap wrappers, not warm standbys) of task
    ``key`` in run ``run_id``."""
    out = []
    for pid in pids_with_env("TFCLUSTER_RUN_ID", run_id):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"TFCLUSTER_TASK={key}".encode() in env and b"taskwrap.py" not in cmd \
                and b"TFCLUSTER_STANDBY=1" not in env:
            out.append(pid)
    return out


def task_pid(run_id: str, key: str) -> int:
    """The one active process of task ``key`` (raises if it is not running)."""
    pids = task_pids(run_id, key)
    if not pids:
        raise RuntimeError(f"no process for {key}")
    return pids[0]


def script_spec(tmp_path: Path, script: str, tasks: str = "{worker: 2}", extra: str = "", *,
                strategy: str = "multi_worker_mirrored", watchdog: str = "{stop_grace: 1}") -> Path:
    """A cluster.yaml (run name ``t``) whose every task runs ``script`` (written to task.py)
    with this Python on fresh local ports; ``extra`` is appended YAML."""
    from tests.netutil import free_base

    (tmp_path / "task.py").write_text(textwrap.dedent(script))
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: t
        strategy: {strategy}
        entrypoint: [{json.dumps(sys.executable)}, task.py]
        tasks: {tasks}
        ports: {{base: {free_base()}}}
        watchdog: {watchdog}
    """) + textwrap.dedent(extra))
    return path
