"""Fixtures for the docker integration tests: a private dockerd for the session, and images.

The engine is started with its own data root, exec root, socket and pidfile and
``--iptables=false`` (it touches no firewall rule of the machine), and stopped at the end.
Without root or the tools these tests skip with a reason; under CI=true they fail.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.prereq import require, require_root, require_tool

from . import engine as eng


def _prereqs() -> None:
    require_root()
    require_tool("dockerd", "docker.io")
    require_tool("docker", "docker.io")
    require_tool("debootstrap", "debootstrap")
    require(Path("/sys/fs/cgroup").is_dir(), "no cgroup file system: containers cannot run here")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[eng.Engine]:
    _prereqs()
    with eng.session_lock():
        engine = eng.start_dockerd(timeout=60)
        _cleanup(engine)  # containers a killed earlier session left in the cached data root
        try:
            yield engine
        finally:
            _cleanup(engine)
            eng.stop_dockerd(engine)


def _cleanup(engine: eng.Engine) -> None:
    """Remove whatever a failed test left in the private engine (it is ours alone)."""
    try:
        client = engine.client()
        for c in client.containers.list(all=True):
            c.remove(force=True)
        for n in client.networks.list():
            if n.name not in ("bridge", "host", "none"):
                n.remove()
        client.close()
    except Exception as exc:  # noqa: BLE001
        eng.log(f"cleanup of the private engine failed: {exc}")


@pytest.fixture(scope="session")
def base_image(docker_engine: eng.Engine) -> str:
    eng.ensure_base_image(docker_engine)
    return eng.BASE_IMAGE


@pytest.fixture(scope="session")
def wheelhouse_url() -> Iterator[str]:
    wheels = eng.ensure_wheelhouse()
    with eng.serve_dir(wheels) as url:
        yield url


@pytest.fixture(scope="session")
def worker_image(docker_engine: eng.Engine, base_image: str, wheelhouse_url: str) -> str:
    """docker/Dockerfile built on the debootstrap base, offline (layers cached across sessions)."""
    took = eng.build_worker_image(docker_engine, wheelhouse_url)
    os.environ.setdefault("TFCLUSTER_TEST_IMAGE_BUILD_SECONDS", f"{took:.0f}")
    return eng.WORKER_IMAGE
