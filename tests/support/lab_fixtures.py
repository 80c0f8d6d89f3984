"""Session fixtures shared by the suites that need a lab: the ssh lab, the Slurm lab, the private
Docker engine and its images (used by tests/integration/ssh/, slurm/, docker/, the backend
contract suite and tests/hostile/ssh/ and docker/). A plugin (tests/conftest.py's
``pytest_plugins``), so every folder sees the same fixture and a session starts each at most once."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.docker_warmup import docker_prereqs, docker_warmup
from tests.support.prereq import require, require_root, require_tool


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory):
    """One TFDS data dir per session: the offline digits dataset is built once, by the first run."""
    return tmp_path_factory.mktemp("tfds")


# ---------------------------------------------------------------- ssh: a lab of sshd hosts


@pytest.fixture(scope="session")
def lab():
    """Three hosts in network namespaces, each with its own sshd (see tests/labs/ssh.py)."""
    from tests.labs.ssh import Lab, have_prereqs

    require_root()
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("ssh-keygen", "openssh-client"),
                      ("nft", "nftables")):
        require_tool(tool, pkg)
    reason = have_prereqs()
    require(reason is None, reason or "")
    root = Path(tempfile.mkdtemp(prefix="tfcs-lab-"))
    # Private per-host dirs (own tmpfs each) for the state dir tests; every other path is shared.
    yield from _running(Lab(root, count=3, private=root / "private"), root)


def _running(lab, root: Path):
    """Start ``lab``, yield it for the session, stop it and remove ``root`` (also if the start fails)."""
    try:
        lab.start()
    except Exception:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield lab
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- slurm: a real Slurm cluster


@pytest.fixture(scope="session")
def slurm():
    """munged, slurmctld and one slurmd per network namespace (see tests/labs/slurm.py)."""
    from tests.labs.slurm import SlurmLab, have_prereqs

    require_root()
    reason = have_prereqs()
    require(reason is None, reason or "")
    root = Path(tempfile.mkdtemp(prefix="tfsl-lab-"))
    yield from _running(SlurmLab(root, count=3), root)


# ---------------------------------------------------------------- docker: a private engine
#
# The session's one warm-up (tests/support/docker_warmup.py, started at collection by
# tests/conftest.py when docker tests are selected).


@pytest.fixture(scope="session")
def docker_engine():
    """The private engine, from the session's warm-up (started at collection by tests/conftest.py
    when docker tests are selected, else now); stopped, with what it built cached, at the end."""
    docker_prereqs()
    warmup = docker_warmup()
    try:
        yield warmup.engine()
    finally:
        warmup.close()


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    from tests.labs import docker as eng

    docker_warmup().images()
    return eng.BASE_IMAGE


@pytest.fixture(scope="session")
def wheelhouse_url(docker_engine) -> str:
    warmup = docker_warmup()
    warmup.images()
    return warmup.wheelhouse_url


@pytest.fixture(scope="session")
def worker_image(docker_engine) -> str:
    """docker/Dockerfile built on the debootstrap base, offline (layers cached across sessions)."""
    from tests.labs import docker as eng

    warmup = docker_warmup()
    warmup.images()
    os.environ.setdefault("TFCLUSTER_TEST_IMAGE_BUILD_SECONDS", f"{warmup.build_seconds:.0f}")
    return eng.WORKER_IMAGE
