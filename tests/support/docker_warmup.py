"""The session's one Docker warm-up (tests/labs/docker.py ``Warmup``): the private
engine and the two locally built images take about three minutes on a fresh machine, so
tests/conftest.py starts it as soon as the session knows it has docker tests (the build then
overlaps every other test), and the docker fixtures in tests/support/lab_fixtures.py use the same one.

The engine is started with its own data root, exec root, socket and pidfile and
``--iptables=false`` (it touches no firewall rule of the machine), and stopped at the end.
Without root or the tools the docker tests skip with a reason; under CI=true they fail."""

from __future__ import annotations

from pathlib import Path

from tests.support.prereq import require, require_root, require_tool

_WARMUP = []


def docker_prereqs() -> None:
    """Skip (under CI=true fail) unless this machine can run the private engine."""
    require_root()
    require_tool("dockerd", "docker.io")
    require_tool("docker", "docker.io")
    require_tool("debootstrap", "debootstrap")
    require(Path("/sys/fs/cgroup").is_dir(), "no cgroup file system: containers cannot run here")


def docker_prereqs_met() -> bool:
    try:
        docker_prereqs()
    except BaseException:  # noqa: BLE001 - skip or fail is the fixture's to say
        return False
    return True


def docker_warmup():
    """The session's one warm-up, started at the first call."""
    from tests.labs import docker as eng

    if not _WARMUP:
        _WARMUP.append(eng.Warmup().start())
    return _WARMUP[0]


def wait_for_the_engine() -> None:
    """If the session started a warm-up, wait until it holds the private engine (or failed to: the
    fixture says so), which may take another session's whole docker run (the lock, tests/labs/docker.py)."""
    if _WARMUP:
        _WARMUP[0].wait_for_engine()


def close_docker_warmup() -> None:
    """Close the warm-up if the session started one (its engine stopped, what it built cached)."""
    if _WARMUP:
        _WARMUP[0].close()
