"""The preflight's first exchange with a host agent (launcher/backends/ssh/probe.py
``first_exchange``): a reply, a silent agent, and an agent that ended without replying, also
when it ended before the request could be sent (a missing interpreter exits at once; the lab
suite once got "preflight could not run (OSError: Socket is closed)" for it instead of the
one line that names the interpreter)."""

from __future__ import annotations

import json
import socket

from launcher.backends.ssh.probe import first_exchange, other
from launcher.plan.hostreport import Problem, ProblemKind


class FakeChannel:
    """What first_exchange uses of a paramiko channel: ``closed`` at the send raises what
    paramiko raises; replies come from ``out``; ``status`` None = still running."""

    def __init__(self, out: bytes = b"", err: bytes = b"", status=None, closed: bool = False, silent=False):
        self.out, self.err, self.status, self.closed, self.silent = out, err, status, closed, silent
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        if self.closed:
            raise socket.error("Socket is closed")  # paramiko.Channel._send
        self.sent += data

    def recv(self, n: int) -> bytes:
        if self.silent:
            raise socket.timeout("timed out")
        data, self.out = self.out[:n], self.out[n:]
        return data

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, n: int) -> bytes:
        data, self.err = self.err[:n], self.err[n:]
        return data

    def exit_status_ready(self) -> bool:
        return self.status is not None

    def recv_exit_status(self) -> int:
        return self.status


REQ = {"require": [], "ports": [23456]}
REPLY = {"python": "3.11.7", "hostname": "h1", "workdir": "/w", "run_dir": "/r", "state_dir": "/s",
         "deps": {"tensorflow": [True, "2.16.1"]}, "ports": {"23456": None}}
NOT_FOUND = ("host h1: python '/nonexistent/python3' not found; install Python 3 there or set hosts[h1].python / "
             "ssh.python to its full path")


def test_a_reply_is_returned_and_the_request_was_sent():
    chan = FakeChannel(out=json.dumps(REPLY).encode() + b"\n")
    assert first_exchange("h1", "python3", chan, REQ, 60) == (REPLY, None)
    assert json.loads(chan.sent) == REQ


def test_an_interpreter_that_is_missing_is_named_whether_or_not_the_request_could_be_sent():
    err = b"bash: line 1: /nonexistent/python3: No such file or directory\n"
    ended_after_send = FakeChannel(err=err, status=127)
    ended_before_send = FakeChannel(err=err, status=127, closed=True)
    assert first_exchange("h1", "/nonexistent/python3", ended_after_send, REQ, 60) == (None, other("h1", NOT_FOUND))
    assert first_exchange("h1", "/nonexistent/python3", ended_before_send, REQ, 60) == (None, other("h1", NOT_FOUND))


def test_a_session_that_went_away_without_a_word_and_an_agent_that_never_answers():
    gone = FakeChannel(status=-1, closed=True)
    assert first_exchange("h2", "python3", gone, REQ, 60) == (None, Problem(ProblemKind.DROPPED, "h2", (
        "host h2: the connection closed during preflight (sshd stopped, the host went down or the link "
        "dropped); check the host")))
    silent = FakeChannel(silent=True)  # (its session is there: not a host going away)
    assert first_exchange("h2", "python3", silent, REQ, 2) == (None, other("h2", (
        "host h2: the preflight agent did not answer within 2 s (ssh.preflight_timeout); the host is "
        "overloaded or its Python is stalled: check its load, or raise ssh.preflight_timeout")))


def test_a_send_that_fails_on_an_open_channel_is_still_one_line():
    class Broken(FakeChannel):
        def sendall(self, data: bytes) -> None:
            raise OSError("Broken pipe")

    assert first_exchange("h3", "python3", Broken(), REQ, 60) == (
        None, Problem(ProblemKind.DROPPED, "h3", "host h3: preflight could not run (OSError: Broken pipe); check the host"))
