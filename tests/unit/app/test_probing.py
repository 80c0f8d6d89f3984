"""launcher/app/probing.py: ``up``'s probe stage, probe -> launcher/plan/preflight.py -> probe until
the plan is stable, for a worker group with a min, against hosts that answer as scripted (a
``Hosts`` whose probe reports who answers at that moment of a scripted clock) and the real
record's events and countdown text."""

from __future__ import annotations

import contextlib

import pytest

from launcher.app.probing import probe
from launcher.app.stages import Opened, Planned, Waits, as_found
from launcher.app.up import plan_for
from launcher.errors import LaunchError
from launcher.loader.load import LoadedSpec, parse_spec
from launcher.plan.hostreport import Absent, AbsentKind, HostReport, Problem, ProblemKind

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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


class ScriptedHosts:
    """``probe(plan)``: the plan's hosts that are down at the clock's moment reported absent (a
    report as the ssh preflight gives it); ``dropped``: hosts whose sessions die during the first
    probe that reaches them."""

    def __init__(self, down_until: dict[str, float], clock: Clock, dropped: tuple[str, ...] = ()) -> None:
        self.down_until, self.clock, self.dropped = down_until, clock, list(dropped)
        self.probed: list[list[str]] = []

    def probe(self, plan):
        names = [h.name for h in plan.hosts]
        self.probed.append(names)
        down = [n for n in names if self.clock() < self.down_until.get(n, 0)]
        absent = tuple(Absent(AbsentKind.NOT_ANSWERING, n, 100.0, f"host {n}: timed out after 3 s") for n in down)
        answered = tuple(n for n in names if n not in down)
        if down:
            return HostReport(answered=answered, absent=absent, at=100.0)
        gone = [n for n in self.dropped if n in names]
        self.dropped = [n for n in self.dropped if n not in gone]
        problems = tuple(Problem(ProblemKind.DROPPED, n, f"host {n}: preflight could not run (EOF); check the host")
                         for n in gone)
        return HostReport(answered=answered, problems=problems, at=100.0)


class Backend:
    def __init__(self, hosts) -> None:
        self.hosts = hosts


class Record:
    def __init__(self) -> None:
        self.early: list = []

    def write_early(self, event) -> None:
        self.early.append(event)


class Console:
    """What the stage says, and the countdown line as it would be drawn once per pause."""

    def __init__(self, clock: Clock) -> None:
        self.said: list[str] = []
        self.shown: list[str] = []
        self.clock = clock

    def info(self, line: str) -> None:
        self.said.append(line)

    @contextlib.contextmanager
    def countdown(self, text):
        pause = self.clock.pause

        def drawn(seconds):
            self.shown.append(text())
            pause(seconds)
        self.clock.pause = drawn
        try:
            yield
        finally:
            self.clock.pause = pause


def staged(text: str = SPEC, down: dict[str, float] = {}, dropped: tuple[str, ...] = ()):
    clock = Clock()
    spec = parse_spec(text)
    planned = Planned(as_found(LoadedSpec(spec, __import__("pathlib").Path("/x/c.yaml"))), plan_for(spec))
    hosts, record, console = ScriptedHosts(down, clock, dropped), Record(), Console(clock)
    opened = Opened(planned, record, Backend(hosts))
    waits = Waits(clock, lambda s: clock.pause(s), lambda: 1000.0 + clock.now)
    return opened, console, waits, hosts, record, clock


def test_every_host_answering_keeps_the_plan_in_one_probe():
    opened, console, waits, hosts, record, clock = staged()
    got = probe(opened, console, waits)
    assert got.start.plan == opened.planned.plan and got.start.absent == ()
    assert hosts.probed == [["h1", "h2", "h3"]] and console.said == [] and record.early == []


def test_an_absent_worker_host_starts_the_group_smaller_at_once():
    opened, console, waits, hosts, record, clock = staged(down={"h3": 99})
    got = probe(opened, console, waits)
    assert [(t.key, t.host) for t in got.start.plan.tasks] == [("worker:0", "h1"), ("worker:1", "h2")]
    assert [a.host for a in got.start.absent] == ["h3"] and got.start.short_why == "h3 not answering"
    assert hosts.probed == [["h1", "h2", "h3"], ["h1", "h2"]] and clock.now == 0  # no wait: min is met


def test_below_min_it_waits_for_hosts_and_starts_once_enough_answer():
    opened, console, waits, hosts, record, clock = staged(down={"h2": 2.5, "h3": 99})
    got = probe(opened, console, waits)
    assert [t.host for t in got.start.plan.tasks] == ["h1", "h2"] and [a.host for a in got.start.absent] == ["h3"]
    # The countdown line is the record's host_wait event as the panel and status say it.
    assert console.shown[:2] == [
        "waiting for 1 more host of worker (min 2): 5 s left of elastic.host_wait=5 s (h2, h3 not answering)",
        "waiting for 1 more host of worker (min 2): 4 s left of elastic.host_wait=5 s (h2, h3 not answering)"]
    assert [(e.kind, e.hosts, e.have, e.need, e.wait) for e in record.early] == [("host_wait", ["h2", "h3"], 1, 2, 5.0)]
    assert 2.5 <= clock.now <= 3.0, clock.now
    assert len(console.said) == 1 and console.said[0].startswith(
        "h2, h3 not answering: 1 worker can start now, below tasks.worker.min=2; waiting up to elastic.host_wait=5 s "
        "for hosts"), console.said


def test_below_min_after_host_wait_one_line_names_the_hosts():
    opened, console, waits, hosts, record, clock = staged(down={"h2": 99, "h3": 99})
    with pytest.raises(LaunchError) as got:
        probe(opened, console, waits)
    assert len(got.value.lines) == 1 and clock.now == 5.0
    assert got.value.lines[0] == ("h2, h3 not answering after elastic.host_wait=5 s: 1 worker can start now, below "
                                  "tasks.worker.min=2 (host h2: timed out after 3 s; host h3: timed out after 3 s); "
                                  "bring them back, list more hosts under hosts: (spares), or lower tasks.worker.min")


def test_a_chief_host_that_does_not_answer_is_the_usual_error_at_once():
    text = SPEC.replace("tasks: {worker: {count: 3, min: 2}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}")
    opened, console, waits, hosts, record, clock = staged(text, down={"h1": 99})
    with pytest.raises(LaunchError) as got:
        probe(opened, console, waits)
    assert got.value.lines == ("host h1: timed out after 3 s", "nothing was started: 1 of 3 hosts unreachable")
    assert clock.now == 0


def test_a_worker_host_dropping_its_sessions_is_left_out_and_said():
    opened, console, waits, hosts, record, clock = staged(dropped=("h3",))
    got = probe(opened, console, waits)
    assert [t.host for t in got.start.plan.tasks] == ["h1", "h2"]
    assert console.said == ["h3: its sessions dropped during the preflight (a host shutting down?); starting "
                            "without it"]
    assert got.start.short_why == "h3 dropped its sessions at the start"


def test_a_preflight_that_does_not_settle_is_one_line_not_a_loop(monkeypatch):
    """Reports that give back the plan just probed, or a new plan every time (a bug in a backend or
    in plan/): bounded, one line, not a loop."""
    import launcher.app.probing as probing
    from launcher.plan.preflight import ProbeAgain

    opened, console, waits, hosts, record, clock = staged()
    full = opened.planned.plan
    smaller = plan_for(parse_spec(SPEC.replace("count: 3", "count: 2")))
    monkeypatch.setattr(probing, "step", lambda spec, seen, plan, report: (seen, ProbeAgain(plan)))
    with pytest.raises(LaunchError, match="internal: the preflight did not settle on a plan after 1 probes"):
        probe(opened, console, waits)
    monkeypatch.setattr(probing, "step", lambda spec, seen, plan, report:
                        (seen, ProbeAgain(smaller if plan == full else full)))
    with pytest.raises(LaunchError, match="did not settle on a plan after 9 probes"):
        probe(opened, console, waits)
    assert len(hosts.probed) == 1 + 9
