"""Fixtures for the slurm backend's integration tests: the session's real Slurm cluster (the
``slurm`` fixture in tests/support/lab_fixtures.py, tests/labs/slurm.py) checked before each test, and
spec writing / ``tfcluster`` runs pointed at it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.labs.slurm import PARTITION
from tests.support import cli
from tests.support.cli import PY, ROOT


@pytest.fixture
def lab(slurm):
    """The session's cluster, checked intact before the test; no job of an earlier test left."""
    problem = slurm.bridge_ok()
    assert problem is None, f"the slurm lab broke before this test: {problem}"
    slurm.cancel_all()
    left = slurm.out_of_service()
    slurm.resume(list(left))  # (said by the test that left them: below)
    slurm.wait_idle(30)
    yield slurm
    slurm.cancel_all()
    # A node Slurm took out of service during this test is this test's trouble, in Slurm's words;
    # it is put back so that the tests after it do not fail for it too.
    left = slurm.out_of_service()
    if left:
        slurm.resume(list(left))
        pytest.fail("Slurm took node(s) out of service during this test: "
                    + "; ".join(f"{node} {why}" for node, why in sorted(left.items())), pytrace=False)


@pytest.fixture
def make_spec(tmp_path, lab):
    """Write a cluster.yaml for the lab; returns its path. Keyword args override spec keys."""

    def make(entrypoint, tasks=None, slurm=None, **extra):
        spec = {
            "name": "slurmtest",
            "strategy": "multi_worker_mirrored",
            "backend": "slurm",
            "entrypoint": entrypoint,
            "tasks": tasks or {"worker": 2},
            "ports": {"base": 23456},
            "watchdog": {"startup_timeout": 120, "stop_grace": 3},
            "workdir": str(ROOT),
            "slurm": {"partition": PARTITION, "time": "15", "python": PY, "queue_timeout": 30, **(slurm or {})},
            **extra,
        }
        # The lab's GPUs are device files Slurm hands out (gres), which no TensorFlow can use: the
        # reference worker, given them, trains on CPU as told instead of failing fast.
        spec["devices"] = {"cpu_fallback": True, **(extra.get("devices") or {})}
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return make


def tfcluster(lab, *args, timeout=120, env=None):
    """Run the CLI like a user would, pointed at the lab (SLURM_CONF); the CompletedProcess (text)."""
    return cli.tfcluster(*args, timeout=timeout, env={**lab.env(), **(env or {})})


def start_tfcluster(lab, *args) -> subprocess.Popen:
    return cli.start_tfcluster(*args, env=lab.env())


def read_spec(path: Path) -> dict:
    return yaml.safe_load(path.read_text())
