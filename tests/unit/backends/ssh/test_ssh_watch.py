"""launcher/backends/ssh/watch.py: a lost host counts as back only after answering every probe
for elastic.settle seconds; a flapping host never does."""

from __future__ import annotations

from launcher.backends.ssh.watch import HostWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_host_is_back_after_answering_without_a_break_for_settle_seconds():
    clock, up = Clock(), {"h2": False, "h3": True}
    watch = HostWatch(lambda name: up[name], clock=clock)
    watch.watch(["h2", "h3"], start=False)
    for second in range(12):
        clock.now = float(second)
        if second == 4:
            up["h2"] = True
        watch.probe_once()
        expected = (["h2"] if second >= 4 + 5 else []) + (["h3"] if second >= 5 else [])
        assert watch.settled(5.0) == expected, second


def test_an_answer_counts_from_when_it_came_not_from_when_the_probe_began():
    """A probe that opens a new connection can take seconds and span a short outage of the link
    (the handshake is delivered late) yet succeed: the unbroken run starts at its answer."""
    clock = Clock()

    def slow_probe(name):
        clock.now += 3.0  # the link was down for part of these 3 s
        return True

    watch = HostWatch(slow_probe, clock=clock)
    watch.watch(["h2"], start=False)
    watch.probe_once()  # began at 0, answered at 3
    clock.now = 7.0
    assert watch.settled(5.0) == []  # 7 - 0 >= 5, but only 4 s since the answer
    clock.now = 8.0
    assert watch.settled(5.0) == ["h2"]


def test_a_flapping_host_never_settles_and_a_failed_probe_restarts_its_clock():
    clock = Clock()
    pattern = [True, True, True, False, False, False] * 4  # up 3 s, down 3 s
    watch = HostWatch(lambda name: pattern[int(clock.now)], clock=clock)
    watch.watch(["h2"], start=False)
    for second in range(len(pattern)):
        clock.now = float(second)
        watch.probe_once()
        assert watch.settled(5.0) == [], second
        assert watch.settled(2.0) == (["h2"] if second % 6 == 2 else []), second


def test_a_probe_that_raises_is_a_host_that_does_not_answer_and_forget_stops_watching():
    clock = Clock()

    def probe(name):
        raise OSError("no route to host")

    watch = HostWatch(probe, clock=clock)
    watch.watch(["h2"], start=False)
    watch.probe_once()
    assert watch.settled(0.0) == []
    ok = HostWatch(lambda name: True, clock=clock)
    ok.watch(["h2"], start=False)
    ok.probe_once()
    assert ok.settled(0.0) == ["h2"]
    ok.forget("h2")
    assert ok.settled(0.0) == []


def test_a_host_that_announced_its_preemption_is_back_only_after_it_went_away():
    clock, up = Clock(), {"h2": True}
    watch = HostWatch(lambda name: up[name], clock=clock)
    watch.going("h2")
    watch.watch(["h2"], start=False)
    for second in range(10):  # still up in its notice: never back
        clock.now = float(second)
        watch.probe_once()
        assert watch.settled(3.0) == [], second
    up["h2"] = False
    clock.now = 10.0
    watch.probe_once()
    up["h2"] = True
    for second in range(11, 16):
        clock.now = float(second)
        watch.probe_once()
    assert watch.settled(3.0) == ["h2"]  # answered from 11 to 15 after going away at 10
