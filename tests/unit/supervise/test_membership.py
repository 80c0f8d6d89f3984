"""Membership (launcher/supervise/membership.py) on discovery.command's answers during a run, with a fake
poller: a failed answer is one line (once per reason) and the last good list is kept; a new host is
added and watched; a host of the plan gone from the list ends the attempt and its task moves to a
spare. No processes, no threads."""

from __future__ import annotations

import io
import textwrap
import threading
import time

from launcher.ui.console import Console
from launcher.loader.discovery import Answer
from launcher.app.up import plan_for
from launcher.record.view import RunModel
from launcher.supervise.context import RunContext
from launcher.supervise.membership import HostsGiven, Membership
from launcher.record.writer import RunRecord
from launcher.loader.load import parse_spec
from launcher.spec.model import Host
from tests.support.fakes import scripted
from tests.support.records import read_records
import launcher.record.events as ev

SPEC = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: h1, address: 10.0.0.1}, {name: h2, address: 10.0.0.2}, {name: h3, address: 10.0.0.3}]
    tasks: {worker: 2}
    discovery: {command: cat hosts.txt, every: 1}
"""


class FakePoller:
    def __init__(self) -> None:
        self.answers: list[Answer] = []

    def latest(self):
        return len(self.answers), (self.answers[-1] if self.answers else None)


def hosts(*names: str) -> tuple[Host, ...]:
    return tuple(Host(name=n, address=f"10.0.0.{n[1:]}") for n in names)


def test_discovery_answers_add_hosts_and_move_the_task_of_a_host_gone_from_the_list(tmp_path):
    spec = parse_spec(textwrap.dedent(SPEC))
    plan = plan_for(spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    out, err = io.StringIO(), io.StringIO()
    backend = scripted(elastic=True)  # its hosts record what discovery added, its tasks each plan used
    view = RunModel()
    Console(out=out, err=err, color=False).listen(record, view)  # what the membership records, said
    ctx = RunContext(record=record, view=view, backend=backend,
                     restart=spec.restart, watchdog=spec.watchdog, clock=time.monotonic, poll_interval=0.1,
                     stop_event=threading.Event(), hurry_event=threading.Event())
    members = Membership(ctx, plan, HostsGiven(spec=spec, static_hosts=["h1"], discovery_cwd=tmp_path))
    assert members.elastic and members.poller is not None  # a real Poller, never started here
    poller = members.poller = FakePoller()

    assert not members.changed(0)  # no answer yet
    for _ in range(2):  # the same problem twice: one line
        poller.answers.append(Answer(at=0.0, hosts=None, problem="exit code 1"))
        assert not members.changed(0)
    assert err.getvalue().count("discovery.command: exit code 1; keeping the last good host list (h1, h2, h3)") == 1

    poller.answers.append(Answer(at=0.0, hosts=hosts("h1", "h3", "h4")))
    assert members.changed(0)  # h2 is the plan's: the attempt is to end
    assert backend.hosts.added == ["h4"] and members.down == ["h4"]  # watched until it answers for elastic.settle
    assert [h.name for h in members.spec.hosts] == ["h1", "h3", "h4"]
    said = err.getvalue() + out.getvalue()
    assert "discovery: h4 found (usable once it answers for elastic.settle=" in said
    assert "h2 gone from the list" in said
    assert "moving worker:1: stopping the group gracefully" in said

    assert members.regrow(0) is None  # (not an Ended: the run goes on)
    assert [t.host for t in members.plan.tasks] == ["h1", "h3"] and backend.tasks.plans == [members.plan]
    assert members.first_plan is plan and len(members.replans) == 1
    assert members.vanished == {}
    record.close()
    events = read_records(record.dir)
    found = [(e["ok"], e.get("added"), e.get("gone")) for e in events if isinstance(e, ev.DiscoveryAnswer)]
    assert found == [(False, None, None), (True, ["h4"], ["h2"])]
    (lost,) = [e for e in events if isinstance(e, ev.HostLost)]
    assert (lost["host"], lost["how"]) == ("h2", "gone from discovery.command's list")
