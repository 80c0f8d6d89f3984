import sys
from pathlib import Path

# Tests import the project from the checkout even without `pip install -e .`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- prerequisites, by marker


def pytest_runtest_setup(item):
    """A test marked ``tf`` needs TensorFlow, tf-keras and tensorflow-datasets: without them it is
    skipped with the reason, and under CI=true it fails (tests/support/prereq.py), before any of
    its fixtures is set up."""
    if item.get_closest_marker("tf") is not None:
        from tests.support.prereq import require_tf

        require_tf()


# ---------------------------------------------------------------- the docker images, in the background
#
# The docker tests need a private engine and two locally built images: about three minutes on a
# fresh machine (tests/support/docker_warmup.py). They run last, and the warm-up starts as soon as
# the session knows it has docker tests, so the build overlaps everything else.


def _needs_docker(item) -> bool:
    return "/docker/" in item.nodeid or "[docker]" in item.nodeid


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_needs_docker)  # stable: the docker tests last, every other order kept


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return  # runs no test: no engine to warm up (nor another session's lock to wait for)
    if any(_needs_docker(item) for item in session.items):
        from tests.support.docker_warmup import docker_prereqs_met, docker_warmup

        if docker_prereqs_met():
            docker_warmup()


def pytest_sessionfinish(session, exitstatus):
    if "tests.support.docker_warmup" in sys.modules:  # (imported by whoever started one)
        sys.modules["tests.support.docker_warmup"].close_docker_warmup()
