"""launcher/backends/ssh/startsmall.py: the preflight of a worker group with a min, against a pool
whose hosts answer as scripted (connect -> {host: problem}) and a scripted clock."""

from __future__ import annotations

import contextlib

import pytest

from launcher.app.up import plan_for
from launcher.backends.ssh.startsmall import dropped_hosts, hosts_there
from launcher.errors import LaunchError
from launcher.loader.load import parse_spec

SPEC = """
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {name: h1, address: 10.0.0.1}
  - {name: h2, address: 10.0.0.2}
  - {name: h3, address: 10.0.0.3}
tasks: {worker: {count: 3, min: 2}}
elastic: {host_wait: 5}
"""


class Pool:
    """connect(names) -> the problems of the hosts scripted as down at that moment."""

    def __init__(self, down_until: dict[str, float], clock) -> None:
        self.down_until, self.clock, self.asked = down_until, clock, []

    def connect(self, names):
        self.asked.append(list(names))
        return {n: f"host {n}: timed out after 3 s" for n in names if self.clock() < self.down_until.get(n, 0)}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def test_every_host_answering_keeps_the_plan():
    spec, clock = parse_spec(SPEC), Clock()
    plan = plan_for(spec)
    said = []
    assert hosts_there(Pool({}, clock), spec, plan, said.append, clock, clock.pause) == (plan, {})
    assert said == []


def test_an_absent_worker_host_starts_the_group_smaller_at_once():
    spec, clock = parse_spec(SPEC), Clock()
    pool = Pool({"h3": 99}, clock)
    plan, absent = hosts_there(pool, spec, plan_for(spec), print, clock, clock.pause)
    assert [(t.key, t.host) for t in plan.tasks] == [("worker:0", "h1"), ("worker:1", "h2")]
    assert list(absent) == ["h3"] and clock.now == 0  # no wait: min is met


def test_below_min_it_waits_for_hosts_and_starts_once_enough_answer():
    spec, clock = parse_spec(SPEC), Clock()
    pool = Pool({"h2": 2.5, "h3": 99}, clock)
    said: list[str] = []
    shown: list[str] = []

    @contextlib.contextmanager
    def countdown(text):  # (Console.countdown redraws text() on a terminal; here: read once a pause)
        pauses = clock.pause

        def pause(seconds):
            shown.append(text())
            pauses(seconds)
        clock_pause[0] = pause
        yield

    clock_pause = [clock.pause]
    recorded: list = []
    plan, absent = hosts_there(pool, spec, plan_for(spec), said.append, clock, lambda s: clock_pause[0](s),
                               countdown, recorded.append)
    assert [t.host for t in plan.tasks] == ["h1", "h2"] and list(absent) == ["h3"]
    # The countdown line is the record's host_wait event as the panel and status say it.
    assert shown[:2] == ["waiting for 1 more host of worker (min 2): 5 s left of elastic.host_wait=5 s (h2, h3 not "
                         "answering)",
                         "waiting for 1 more host of worker (min 2): 4 s left of elastic.host_wait=5 s (h2, h3 not "
                         "answering)"], shown
    assert [(e.kind, e.hosts, e.have, e.need, e.wait) for e in recorded] == [("host_wait", ["h2", "h3"], 1, 2, 5.0)]
    assert 2.5 <= clock.now <= 3.0, clock.now
    assert len(said) == 1 and said[0].startswith("h2, h3 not answering: 1 worker can start now, below "
                                                 "tasks.worker.min=2; waiting up to elastic.host_wait=5 s for hosts")


def test_below_min_after_host_wait_one_line_names_the_hosts():
    spec, clock = parse_spec(SPEC), Clock()
    with pytest.raises(LaunchError) as got:
        hosts_there(Pool({"h2": 99, "h3": 99}, clock), spec, plan_for(spec), lambda _l: None, clock, clock.pause)
    assert len(got.value.lines) == 1 and clock.now == 5.0
    assert got.value.lines[0] == ("h2, h3 not answering after elastic.host_wait=5 s: 1 worker can start now, below "
                                  "tasks.worker.min=2 (host h2: timed out after 3 s; host h3: timed out after 3 s); "
                                  "bring them back, list more hosts under hosts: (spares), or lower tasks.worker.min")


def test_a_chief_host_that_does_not_answer_is_the_usual_error_at_once():
    spec = parse_spec(SPEC.replace("tasks: {worker: {count: 3, min: 2}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}"))
    clock = Clock()
    with pytest.raises(LaunchError) as got:
        hosts_there(Pool({"h1": 99}, clock), spec, plan_for(spec), lambda _l: None, clock, clock.pause)
    assert got.value.lines == ("host h1: timed out after 3 s", "nothing was started: 1 of 3 hosts unreachable")
    assert clock.now == 0


def test_only_dropped_sessions_of_worker_hosts_start_the_group_without_them():
    spec = parse_spec(SPEC)
    plan = plan_for(spec)
    closed = "host h3: the connection closed during preflight (sshd stopped, the host went down or the link dropped)"
    assert dropped_hosts((closed, "no task was started"), plan) == ["h3"]
    assert dropped_hosts((closed, "host h2: workdir /x does not exist there; create it", "no task was started"),
                         plan) == []  # another problem: the error stands
    chief = parse_spec(SPEC.replace("tasks: {worker: {count: 3, min: 2}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}"))
    assert dropped_hosts(("host h1: preflight could not run (EOF); check the host",), plan_for(chief)) == []
