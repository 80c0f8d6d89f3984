"""The launcher's side of the ssh lease: silence grows while a host does not answer."""

from __future__ import annotations

import threading

from launcher.backends.ssh.heartbeat import KEEPALIVE, Heartbeat
from tests.support.waits import wait_for


class FakeTransport:
    def __init__(self) -> None:
        self.answer = threading.Event()
        self.answer.set()
        self.asked: list[str] = []

    def is_active(self) -> bool:
        return True

    def global_request(self, kind: str, wait: bool = True):
        self.asked.append(kind)
        self.answer.wait(5)  # a cut link: no reply


def test_silence_is_time_since_the_last_answer():
    now = [100.0]
    beat = Heartbeat(interval=0.01, clock=lambda: now[0])
    t = FakeTransport()
    assert beat.silence("h2") == 0.0  # not watched
    beat.watch("h2", lambda: t)
    try:
        wait_for(lambda: t.asked, 5, what="a keepalive")
        assert t.asked[0] == KEEPALIVE
        t.answer.clear()  # the link goes down
        wait_for(lambda: len(t.asked) >= 2, 5, what="an unanswered keepalive")
        now[0] += 7.5
        assert beat.silence("h2") == 7.5
        beat.heard("h2")  # a fresh connection to the host
        assert beat.silence("h2") == 0.0
    finally:
        beat.close()
        t.answer.set()
