"""What becomes of a host's fork server that ended, decided the same on every backend
(launcher/backends/zygotes.py ``Restarts``), and over ssh at the next start on that host
(launcher/backends/ssh/zygote.py ``ensure``): started again at most RESTARTS times a run, then
cold with one line naming the host and why; never again where it said it serves nothing; each
decision a zygote_ended event whose note the console says. The ssh keeper's channel is scripted
here (what the host agent says: launcher/remote/zygotehost.py keep)."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.ssh.zygote import Keeper, ensure, served
from launcher.backends.zygotes import RESTARTS, Restarts
from launcher.record import events as ev
from launcher.record.view import RunModel
from launcher.ui.eventlines import INFO, Said, said


def test_a_zygote_that_ended_is_started_again_up_to_the_bound_then_its_host_starts_cold():
    r = Restarts("h1")
    notes = [r.ended(137) for _ in range(RESTARTS)]
    assert [e.restart for e in notes] == [1, 2, 3] and not r.off
    assert notes[0].said == "host h1's zygote ended (exit 137); a new one starts (1 of 3)"
    last = r.ended(None)
    assert last.restart is None and last.host == "h1" and last.code is None
    assert last.said == ("host h1's zygote ended (exit unknown); its tasks start cold from now on: "
                         "host h1's zygote ended 4 times (last exit unknown)")
    assert r.off == last.cold


def test_a_zygote_that_said_it_serves_nothing_is_never_started_again_and_its_words_stay_one_line():
    r = Restarts("h2")
    event = r.ended(0, "the import opened /dev/nvidia0\x1b]0;pwned\x07\nsecond line")
    assert event.restart is None and r.off == event.cold
    assert "\n" not in event.said and "\x1b" not in event.said and "\\x1b" in event.said
    assert event.said.startswith("host h2's zygote ended (exit 0); its tasks start cold from now on: the import opened")
    failed = Restarts("h3").not_started("cannot bind /tmp/x/z.sock (Permission denied)")
    assert failed.said == ("host h3's zygote: its tasks start cold from now on: a new one could not start "
                           "(cannot bind /tmp/x/z.sock (Permission denied))")


def test_the_local_runs_note_names_the_run_not_a_host():
    r = Restarts("localhost", "the run's zygote")
    assert r.ended(137).said == "the run's zygote ended (exit 137); a new one starts (1 of 3)"


def test_the_event_says_its_note_to_a_person_and_reads_back_as_written():
    event = Restarts("h1").ended(137)
    assert said(event, RunModel()) == [Said(INFO, (event.said,))]
    back = ev.parse_event(json.loads(json.dumps(event.to_json())))
    assert back == event


# ---- over ssh: the keeper's channel, scripted -------------------------------------------------

class Channel:
    """A keeper's channel: what the agent says (``says``: lines, each given out once asked for),
    and what it was sent; ``answer``: what it answers a restart with."""

    def __init__(self, answer=None) -> None:
        self.incoming = b""
        self.sent: list[bytes] = []
        self.closed = False
        self.answer = answer
        self.timeout = None

    def say(self, *objs) -> None:
        self.incoming += b"".join(o if isinstance(o, bytes) else json.dumps(o).encode() + b"\n" for o in objs)

    def recv_ready(self) -> bool:
        return bool(self.incoming)

    def recv(self, n: int) -> bytes:
        if not self.incoming:
            if self.closed:
                return b""
            raise socket.timeout()
        data, self.incoming = self.incoming[:n], self.incoming[n:]
        return data

    def settimeout(self, t) -> None:
        self.timeout = t

    def exit_status_ready(self) -> bool:
        return False

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)
        if data == b'{"restart":true}\n' and self.answer is not None:
            self.say(self.answer)


def host_and_pool(answer=None):
    chan = Channel(answer)
    hs = SimpleNamespace(name="h1", zygote="/tmp/tfcluster-zygote-x/z.sock", keeper=Keeper(chan),
                         zygote_restarts=Restarts("h1"))
    written: list = []
    pool = SimpleNamespace(write=written.append, zygote_cwd=".", hosts={"h1": hs})
    return hs, pool, chan, written


def test_over_ssh_the_next_start_after_the_keeper_said_so_starts_a_new_one_on_the_same_socket():
    hs, pool, chan, written = host_and_pool(answer={"restarted": {"socket": "/tmp/tfcluster-zygote-x/z.sock"}})
    ensure(pool, hs)  # nothing said: nothing asked, nothing written
    assert (chan.sent, written) == ([], [])
    # garbage: not JSON, not an object, nested past Python's limit (json.loads: RecursionError)
    chan.say(b"garbage, not json\n", [1, 2], b"[" * 200_000 + b"\n", {"ended": 137, "cold": ""})
    ensure(pool, hs)
    assert chan.sent == [b'{"restart":true}\n'] and hs.zygote == "/tmp/tfcluster-zygote-x/z.sock"
    assert [e.said for e in written] == ["host h1's zygote ended (exit 137); a new one starts (1 of 3)"]
    ensure(pool, hs)  # (said once: not started twice)
    assert len(chan.sent) == 1 and chan.timeout is None


def test_over_ssh_past_the_bound_the_host_starts_cold_and_its_socket_is_never_asked_again():
    hs, pool, chan, written = host_and_pool(answer={"restarted": {"socket": "/tmp/tfcluster-zygote-x/z.sock"}})
    for _ in range(RESTARTS + 1):
        chan.say({"ended": 137, "cold": ""})
        ensure(pool, hs)
    assert len(chan.sent) == RESTARTS and hs.zygote is None
    assert written[-1].said == ("host h1's zygote ended (exit 137); its tasks start cold from now on: "
                                "host h1's zygote ended 4 times (last exit 137)")
    assert served(pool, hs, ["python", "-m", "worker"], True) is None
    assert ssh_zygote.order(pool, SimpleNamespace(tasks=()), "h1") is None  # (a host probed again: none either)


@pytest.mark.parametrize("answer, why", [
    ({"restarted": {"error": "cannot bind /tmp/tfcluster-zygote-x/z.sock: a symlink"}},
     "a new one could not start (cannot bind /tmp/tfcluster-zygote-x/z.sock: a symlink)"),
    ({"restarted": {"socket": "/elsewhere/z.sock"}}, "a new one could not start (an answer without its socket)"),
])
def test_over_ssh_a_new_one_that_cannot_start_leaves_the_host_cold_in_one_line(answer, why):
    hs, pool, chan, written = host_and_pool(answer=answer)
    chan.say({"ended": 137, "cold": ""})
    ensure(pool, hs)
    assert hs.zygote is None and written[-1].cold == why


def test_over_ssh_a_server_that_said_it_serves_nothing_or_a_keeper_gone_is_not_started_again():
    hs, pool, chan, written = host_and_pool()
    chan.say({"ended": 0, "cold": "the import opened /dev/nvidia0: a fork would not have its CUDA"})
    ensure(pool, hs)
    assert chan.sent == [] and hs.zygote is None
    assert written[-1].said.endswith("its tasks start cold from now on: the import opened /dev/nvidia0: a fork "
                                     "would not have its CUDA")
    hs, pool, chan, written = host_and_pool()
    chan.closed = True  # the agent killed: its server went with it (its lifeline)
    ensure(pool, hs)  # (no way given to start a new keeper: tests/unit/backends/ssh/test_ssh_zygote_keeper.py has it)
    assert chan.sent == [] and hs.zygote is None
    assert written[-1].cold == "a new one could not start (its keeper (the host agent) ended)"


def test_over_ssh_a_keeper_that_never_answers_a_restart_is_waited_for_a_bounded_time(monkeypatch):
    monkeypatch.setattr(ssh_zygote, "RESTART_WAIT", 0.05)
    hs, pool, chan, written = host_and_pool(answer=None)
    chan.say({"ended": 137, "cold": ""})
    ensure(pool, hs)
    assert hs.zygote is None and written[-1].cold == "a new one could not start (its keeper did not answer within 0.05 s)"
