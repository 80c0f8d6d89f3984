"""Fixtures for the ssh backend's integration tests: spec writing for the lab of real sshd hosts
(the session fixture ``lab`` is in tests/integration/conftest.py, shared with the contract suite),
and running ``tfcluster`` as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable


@pytest.fixture
def make_spec(tmp_path, lab):
    """Write a cluster.yaml for the lab; returns its path. Keyword args override spec keys."""

    def make(entrypoint, workers=2, hosts=None, ssh=None, host_keys=None, **extra):
        """``host_keys``: {host name: {key: value}} added to that host's entry."""
        names = hosts or ["h1", "h2"]
        host_entries = [{**h, **(host_keys or {}).get(h["name"], {})} for h in lab.hosts_yaml(names)]
        spec = {
            "name": "sshtest",
            "strategy": "multi_worker_mirrored",
            "backend": "ssh",
            "entrypoint": entrypoint,
            "hosts": host_entries,
            "tasks": {"worker": workers},
            "ports": {"base": 23456},
            "watchdog": {"startup_timeout": 120, "stop_grace": 2},
            "ssh": {
                "known_hosts": str(lab.known_hosts),
                "python": PY,
                "remote_dir": str(tmp_path / "remote"),
                "workdir": str(ROOT),
                "lease": 4,
                "connect_timeout": 3,
                "probe_timeout": 1.5,
                "require": [],
                **(ssh or {}),
            },
            **extra,
        }
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return make


def pids_in_netns(lab_host) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", lab_host.netns], capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def task_processes(lab) -> dict[str, list[str]]:
    """Each lab host's processes other than sshd: what a run must not leave behind."""
    return {h.name: [cmdline(p) for p in pids_in_netns(h) if "sshd" not in cmdline(p) and cmdline(p)]
            for h in lab.hosts}
