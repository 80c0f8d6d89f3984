"""A host's fork server whose keeper (the host agent kept over its own channel) ended: killed,
its session gone, its server ended with it (its lifeline). The next start on the host that the
server would serve decides (launcher/backends/ssh/zygote.py ``ensure``): a new keeper, the host's
preflight once more, its server on the socket the last one had (a standby's wrapper that waits
asks that path), said in one line and recorded; where that fails, or past the restarts' bound,
the host's tasks start cold from now on, said in one line. And which socket path a new server
may take again (launcher/remote/privsock.py ``earlier``): only one a server's private dir held."""

from __future__ import annotations

import os
import tempfile
import threading

from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.zygotes import RESTARTS, Restarts
from launcher.errors import LaunchError
from launcher.remote import privsock


class GoneKeeper:
    """A keeper whose channel closed (its agent SIGKILLed): nothing said, an exit code."""

    def __init__(self, said=None) -> None:
        self.lock = threading.Lock()
        self.said = said
        self.restarts = 0

    @property
    def exit_code(self):
        return 0

    def ended(self):
        said, self.said = self.said, None
        return said

    def restart(self):  # pragma: no cover - a gone keeper is never asked
        self.restarts += 1
        return {"error": "asked a keeper that is gone"}


class Serving(GoneKeeper):
    """The new keeper: its channel open, its server serving."""

    @property
    def exit_code(self):
        return None


class Host:
    def __init__(self, keeper) -> None:
        self.name, self.zygote, self.keeper = "h1", "/tmp/tfcluster-zygote-x/z.sock", keeper
        self.zygote_restarts = Restarts("h1")


class Pool:
    def __init__(self) -> None:
        self.events, self.zygote_again = [], {}

    def write(self, event) -> None:
        self.events.append(event)


def test_a_new_keeper_starts_the_server_again_on_the_same_socket():
    pool, old = Pool(), GoneKeeper()
    hs = Host(old)
    asked = []

    def again():  # the host's preflight once more: its new agent kept (zygote.keep)
        asked.append(dict(pool.zygote_again))
        hs.keeper, hs.zygote = Serving(), pool.zygote_again["h1"]

    ssh_zygote.ensure(pool, hs, again)
    assert asked == [{"h1": "/tmp/tfcluster-zygote-x/z.sock"}] and pool.zygote_again == {}
    assert hs.zygote == "/tmp/tfcluster-zygote-x/z.sock" and hs.keeper is not old and old.restarts == 0
    (event,) = pool.events
    assert (event.host, event.code, event.restart, event.cold) == ("h1", None, 1, ""), event
    assert event.said == "host h1's zygote ended (exit unknown); a new one starts (1 of 3)"
    ssh_zygote.ensure(pool, hs, again)  # the new keeper serves: nothing more
    assert len(pool.events) == 1 and len(asked) == 1


def test_what_the_keeper_said_before_it_ended_is_taken_first():
    """It said its server ended with a reason to stay cold (the import opened an NVIDIA device):
    cold, and no new keeper is started for nothing."""
    pool = Pool()
    hs = Host(GoneKeeper(said={"ended": 0, "cold": "its import opened /dev/nvidia0"}))
    ssh_zygote.ensure(pool, hs, lambda: (_ for _ in ()).throw(AssertionError("started again")))
    (event,) = pool.events
    assert hs.zygote is None and event.cold == "its import opened /dev/nvidia0", event


def test_a_new_keeper_that_cannot_start_leaves_the_host_cold_in_one_line():
    pool = Pool()
    hs = Host(GoneKeeper())

    def again():
        raise LaunchError("host h1: preflight could not run (connection refused); check the host", "no task was started")

    ssh_zygote.ensure(pool, hs, again)
    ended, not_started = pool.events
    assert ended.restart == 1 and hs.zygote is None and pool.zygote_again == {}
    assert not_started.said == ("host h1's zygote: its tasks start cold from now on: a new one could not start "
                                "(its keeper (the host agent) ended; a new one: host h1: preflight could not run "
                                "(connection refused); check the host)"), not_started.said
    ssh_zygote.ensure(pool, hs, again)  # cold: nothing more asked
    assert len(pool.events) == 2


def test_past_the_bound_no_new_keeper_is_started():
    pool, hs = Pool(), Host(GoneKeeper())
    hs.zygote_restarts.count = RESTARTS
    ssh_zygote.ensure(pool, hs, lambda: (_ for _ in ()).throw(AssertionError("started again")))
    (event,) = pool.events
    assert hs.zygote is None and event.cold.startswith("host h1's zygote ended 4 times"), event


def test_only_a_path_a_servers_private_dir_held_is_taken_again():
    folder = privsock.private_dir()
    try:
        path = os.path.join(folder, "z.sock")
        assert privsock.earlier(path) == path
        assert privsock.earlier(os.path.join(folder, "other.sock")) is None
        assert privsock.earlier(os.path.relpath(path)) is None
        assert privsock.earlier(None) is None and privsock.earlier(["/tmp"]) is None
        other = tempfile.mkdtemp(prefix="somebody-")
        assert privsock.earlier(os.path.join(other, "z.sock")) is None  # not a server's dir
        os.rmdir(other)
        link = folder + "-link"
        os.symlink(folder, link)
        assert privsock.earlier(os.path.join(link, "z.sock")) is None  # (a name that is not its dir)
        os.unlink(link)
    finally:
        os.rmdir(folder)
    assert privsock.earlier(path) is None  # its dir gone: a new one is made
