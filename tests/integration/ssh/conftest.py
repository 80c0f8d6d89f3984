"""Fixtures for the ssh backend's integration tests: spec writing for the lab of real sshd hosts
(``make_spec``, from tests/support/ssh_helpers.py; the session fixture ``lab`` is in
tests/support/lab_fixtures.py, shared with the contract suite and tests/hostile/ssh/), and the lab
hosts' processes."""

from __future__ import annotations

from pathlib import Path

# The lab's spec writer (a fixture) and this Python, shared with tests/hostile/ssh/.
from tests.support.ssh_helpers import PY, ROOT, make_spec, pids_in_netns  # noqa: F401


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def task_processes(lab) -> dict[str, list[str]]:
    """Each lab host's processes other than sshd: what a run must not leave behind."""
    return {h.name: [cmdline(p) for p in pids_in_netns(h) if "sshd" not in cmdline(p) and cmdline(p)]
            for h in lab.hosts}
