"""launcher/backends/ssh/pool.py: the host pool's membership and bookkeeping, without a network
(no host is connected here; the runner is scripted)."""

from __future__ import annotations

import time
from pathlib import Path

from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.pool import HostPool
from launcher.plan.hostloss import LossKind
from launcher.spec.model import Host

DIRS = ("base/t/RUN", "base/t/state", "base/t/work")


def _pool(tmp_path: Path, names=("a", "b"), **kw) -> HostPool:
    return HostPool([Host(name=n, ssh=f"root@{n}") for n in names], SSHOptions(), tmp_path, DIRS, **kw)


def test_hosts_start_with_the_dirs_and_added_hosts_copy_those_the_probe_made_absolute(tmp_path):
    pool = _pool(tmp_path)
    try:
        assert list(pool.hosts) == ["a", "b"]
        assert (pool.hosts["a"].run_dir, pool.hosts["a"].state_dir, pool.hosts["a"].workdir) == DIRS
        pool.hosts["a"].run_dir = "/home/u/base/t/RUN"  # what a probe answers
        pool.add_hosts([Host(name="c", ssh="root@c"), Host(name="a", ssh="root@elsewhere")])
        assert list(pool.hosts) == ["a", "b", "c"] and pool.hosts["a"].spec.ssh == "root@a"  # known: kept
        assert pool.hosts["c"].run_dir == "/home/u/base/t/RUN"
        empty = _pool(tmp_path, names=())
        empty.add_hosts([Host(name="d", ssh="root@d")])
        assert (empty.hosts["d"].run_dir, empty.hosts["d"].state_dir, empty.hosts["d"].workdir) == DIRS
        empty.close()
    finally:
        pool.close()


def test_a_preempted_host_is_told_once_and_lost_at_once(tmp_path):
    told = []
    pool = _pool(tmp_path, on_preempted=told.append)
    try:
        pool.host_preempted("a")
        pool.host_preempted("a")
        assert told == ["a"]
        before = time.time()
        lost = pool.lost_hosts(["a"], wait=30.0)
        assert list(lost) == ["a"] and lost["a"].kind is LossKind.PREEMPTED and lost["a"].host == "a"
        assert lost["a"].text.startswith("preempted: GCE notice at ") and not lost["a"].suspect
        assert lost["a"].since is not None and lost["a"].since <= before  # when the notice came
        assert "a" not in pool.preempted
        pool.unwatch(["a"])  # not watched: nothing to forget
    finally:
        pool.close()


def test_commands_go_through_the_runner(tmp_path):
    calls = []

    def runner(name, command, stdin, timeout):
        calls.append((name, command, timeout))
        return 0, "ok"

    pool = _pool(tmp_path, runner=runner)
    try:
        assert pool.run_on("b", "true") == (0, "ok")
        assert calls == [("b", "true", 30.0)]
    finally:
        pool.close()


def test_a_probe_whose_own_session_the_host_dropped_is_a_break_even_if_it_would_connect_again(tmp_path):
    """A host that shuts down with its sshd still accepting, then reboots within one round of
    probes, must not look as if it had answered all along: the probe's own connection, closed by
    the host since the last round, counts as a failed probe (tests/labs/ssh.py shutdown)."""

    class Dead:
        def is_active(self):
            return False

    class Conn:
        class client:
            @staticmethod
            def get_transport():
                return Dead()

        closed = False

        def close(self):
            self.closed = True

    pool = _pool(tmp_path)
    try:
        conn = Conn()
        pool._probes["a"] = conn
        assert pool._probe("a") is False
        assert "a" not in pool._probes and conn.closed
    finally:
        pool.close()


def test_a_bounded_look_counts_a_host_that_has_not_answered_by_then_as_silent_and_waits_no_longer(tmp_path):
    """A host shutting down can accept the connection and never send sshd's banner: with a
    bound (its loss is already known), the look ends then; without one, it is waited for."""
    import threading
    import time

    pool = _pool(tmp_path, names=("a", "b", "c"))
    release = threading.Event()
    answers = {"a": lambda: True, "b": lambda: release.wait(30) and False, "c": lambda: False}
    pool._answers = lambda name: answers[name]()
    try:
        started = time.monotonic()
        silent = pool.lost_hosts(["a", "b", "c"], 0.0, look={"b": 0.2, "c": 0.2})
        took = time.monotonic() - started
        assert set(silent) == {"b", "c"} and took < 10, (silent, took)  # b did not answer within 0.2 s
        assert {loss.kind for loss in silent.values()} == {LossKind.UNREACHABLE} and silent["b"].suspect
        assert silent["c"].text == "unreachable for 0 s" and silent["c"].since is not None
        assert not release.is_set()
        answers["b"] = lambda: True
        assert pool.lost_hosts(["a", "b"], 0.0) == {}
    finally:
        release.set()
        pool.close()
