"""A real limit on how many processes one process may make (tests of a fork that fails with
EAGAIN, as it does under systemd's per-user TasksMax or a container's pids limit): a pids
cgroup around it (cgroup v1's pids hierarchy, or v2 where the pids controller is enabled), or,
for a user other than root, RLIMIT_NPROC."""

from __future__ import annotations

import contextlib
import os
import resource
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest


def _pids_root() -> "Path | None":
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    v2 = Path("/sys/fs/cgroup")
    try:
        if "pids" in (v2 / "cgroup.subtree_control").read_text().split() and os.access(v2, os.W_OK):
            return v2
    except OSError:
        pass
    return None


@contextlib.contextmanager
def pid_limit(pid: int) -> Iterator[Callable[["int | str"], None]]:
    """Yields ``limit(n)``: from then on, process ``pid`` and what it forks may hold at most ``n``
    processes (threads count) in all (a pids cgroup's pids.max; "max": none). Skips the test where
    neither a pids cgroup nor RLIMIT_NPROC (not root: root is exempt from it) can be used. With
    RLIMIT_NPROC the count is the whole user's: ``n`` below it fails every fork, "max" lifts it."""
    root = _pids_root()
    if root is not None:
        group = root / f"tfcluster-test-{uuid.uuid4().hex[:8]}"
        group.mkdir()
        parent = Path(f"/proc/{pid}/cgroup").read_text()
        try:
            (group / "cgroup.procs").write_text(str(pid))

            def limit(n: "int | str") -> None:
                (group / "pids.max").write_text(str(n))

            limit.exact = True  # type: ignore[attr-defined]  # (n counts this process and its own only)
            limit.current = lambda: int((group / "pids.current").read_text())  # type: ignore[attr-defined]
            yield limit
        finally:
            # Back where it was (its members, once gone, leave the group empty), then removed.
            line = [l for l in parent.splitlines() if l.split(":")[1] in ("pids", "")][0]
            home = root / line.split(":", 2)[2].lstrip("/")
            for member in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (home / "cgroup.procs").write_text(member)
            with contextlib.suppress(OSError):
                group.rmdir()
        return
    if os.getuid() == 0:
        pytest.skip("no pids cgroup to use, and root is exempt from RLIMIT_NPROC")
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NPROC)

    def limit(n: "int | str") -> None:
        resource.prlimit(pid, resource.RLIMIT_NPROC, (hard, hard) if n == "max" else (1, hard))

    limit.exact = False  # type: ignore[attr-defined]
    try:
        yield limit
    finally:
        with contextlib.suppress(OSError):
            resource.prlimit(pid, resource.RLIMIT_NPROC, (soft, hard))
