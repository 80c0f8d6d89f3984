import json
import os
import sys
import time
from pathlib import Path

import pytest

# Tests import the project from the checkout even without `pip install -e .`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The labs' session fixtures (ssh, slurm, docker), for every folder that starts one.
pytest_plugins = ["tests.support.lab_fixtures"]


# ---------------------------------------------------------------- one test's environment is its own
#
# A pytest runs hundreds of files, in an order that depends on the shard (tests/run.sh's queue): a
# variable one test set in os.environ and left (CUDA_VISIBLE_DEVICES=0, from code under test that
# sets it for the process it runs in, where monkeypatch.delenv of an absent variable recorded
# nothing to undo) reached a later test's worker in one CI shard and not in the others. Every
# test's os.environ is put back as it was before the test.


@pytest.fixture(autouse=True)
def _environment_restored():
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


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


# ---------------------------------------------------------------- shards at once (tests/run.sh)
#
# One pytest kept the 2 cores 58% busy (TFCLUSTER_TEST_CPU_LOG): the lab tests wait on leases,
# host watches and Slurm, the local ones on step delays and watchdogs. Three pytests at once (the
# labs', the local tests in two fixed halves) kept them 76 % busy (2026-12-02), but the labs'
# took 29 min beside local halves of 22 and 16. So the labs' tests are two shards, labs-1 (the
# ssh lab's) and labs-2 (Slurm's and docker's: their own namespaces, prefix and subnet, and their
# own engine; the docker tests last, while their image builds in the background), and with
# --queue the local tests are shared out file by file among the pytests as each comes free
# (tests/support/shardqueue.py), a lab pytest after its own tests: tests/run.sh's default since
# this round's stand-ins took TensorFlow out of the decision tests (23 min against the fixed split's
# 27, 2026-12-02). local-1 (the unit and hostile tests and every other file of tests/integration,
# sorted) and local-2 (the rest) remain, for a fixed split. Each pytest's tests run one at a time, in the order they always did. The local
# tests share nothing between runs but the machine: each run has its own id, record dir and random
# ports (tests/support/ports.py); the two lab shards share no namespace, bridge, daemon or port
# (tests/labs/: the ssh lab's and the Slurm lab's prefixes and subnets differ, dockerd runs with
# --bridge=none).

SHARDS = ("labs", "labs-1", "labs-2", "local", "local-1", "local-2")  # "labs", "local": both halves


def pytest_addoption(parser):
    parser.addoption("--shard", choices=SHARDS, default=None,
                     help="only this shard: labs-1 (the ssh lab's tests), labs-2 (the slurm and docker "
                          "labs'), local-1 and local-2 (every other test, in two halves), or labs, local "
                          "(both halves)")
    parser.addoption("--queue", default=None, metavar="DIR",
                     help="share the local tests with the other pytests given this DIR, file by file as "
                          "each comes free, after this one's own shard (tests/support/shardqueue.py)")


def _integration_files(root: Path) -> list[str]:
    return sorted(f"tests/integration/{p.name}" for p in (root / "tests" / "integration").glob("test_*.py"))


def shard_of(item) -> str:
    nodeid = item.nodeid
    if not nodeid.startswith("tests/unit/"):
        if any(part in nodeid for part in ("/slurm/", "/docker/", "[slurm]", "[docker]")):
            return "labs-2"
        if any(part in nodeid for part in ("/ssh/", "[ssh]")):
            return "labs-1"
    files = _integration_files(Path(str(item.config.rootpath)))
    path = nodeid.split("::", 1)[0]
    return "local-2" if path in files and files.index(path) % 2 == 0 else "local-1"


def _in_shard(item, shard: str) -> bool:
    own = shard_of(item)
    return own == shard or own.startswith(shard + "-")


def _shared(item) -> bool:
    """Whether, with --queue, whichever pytest comes free first runs the test: the local ones."""
    return shard_of(item).startswith("local-")


def pytest_collection_modifyitems(session, config, items):
    shard = config.getoption("--shard")
    if shard:
        queue = config.getoption("--queue")
        keep = [item for item in items if _in_shard(item, shard) or (queue and _shared(item))]
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    items.sort(key=_needs_docker)  # stable: the docker tests last, every other order kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    queue = session.config.getoption("--queue")
    if not queue:
        return None  # pytest's own loop
    from tests.support.shardqueue import runtestloop

    return runtestloop(session, _shared, Path(queue))


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


# ---------------------------------------------------------------- where the suite's time goes (opt-in)
#
# TFCLUSTER_TEST_CPU_LOG=FILE appends one JSON line per test: its wall time (setup to teardown) and
# the whole machine's busy CPU seconds meanwhile (/proc/stat; tasks on lab hosts run outside
# pytest's process tree, so the machine is the only place they all add up). Run the suite alone.
# ``own_cpu_s`` is this pytest's and the children it waited for (the launchers it ran and, through
# them, local tasks): on a machine shared with others the figure to compare (a lab host's tasks are
# counted when its sshd ends, at the session's end; a detached supervisor, never).
# ``group_cpu_s``, when pytest runs in a cgroup of its own (``cgexec -g cpuacct:NAME``, or its pid
# written to a new cgroup's cgroup.procs): everything that cgroup ran meanwhile, whoever waited for
# it (detached supervisors, the lab hosts' sessions and Slurm steps, which the lab fixtures start
# from pytest), plus the private docker engine's containers (cgroup ``docker``): on a shared
# machine, a test's whole CPU.

def _busy_cpu_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _group_cpu_s():
    """CPU seconds of this pytest's cgroup and the docker containers' (cgroup v1 cpuacct, or v2),
    or None when pytest's cgroup is the machine's root (then it would count everyone's)."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, where in lines:
        if "cpuacct" in controllers.split(","):
            if where == "/":
                return None
            return sum(_read_ns(f"/sys/fs/cgroup/cpuacct{group}/cpuacct.usage") for group in (where, "/docker")) / 1e9
    for hierarchy, _, where in lines:
        if hierarchy == "0" and where != "/":
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                usage = _read_usage_usec(f"{root}{where}/cpu.stat")
                if usage is not None:
                    return usage / 1e6
    return None


def _read_ns(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def _read_usage_usec(path: str):
    try:
        with open(path) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("usage_usec "))
    except (OSError, ValueError, StopIteration):
        return None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # (outside pytest-timeout's, whose clock starts in its own)
def pytest_runtest_protocol(item, nextitem):
    if _needs_docker(item) and "tests.support.docker_warmup" in sys.modules:
        # The private engine is one a machine: a suite beside this one (tests/race_hunt.sh) may hold
        # it for its whole docker run, longer than a test's own timeout, so the wait for it is here,
        # before that timeout starts, bounded by the warm-up's own (TFCLUSTER_TEST_DOCKER_WAIT_S).
        sys.modules["tests.support.docker_warmup"].wait_for_the_engine()
    path = os.environ.get("TFCLUSTER_TEST_CPU_LOG")
    if not path:
        yield
        return
    wall, cpu, own, group = time.monotonic(), _busy_cpu_s(), _own_cpu_s(), _group_cpu_s()
    yield
    line = {"test": item.nodeid, "wall_s": round(time.monotonic() - wall, 2),
            "cpu_s": round(_busy_cpu_s() - cpu, 2), "own_cpu_s": round(_own_cpu_s() - own, 2)}
    if group is not None:
        line["group_cpu_s"] = round(_group_cpu_s() - group, 2)
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
