"""A hot spare lost (launcher/supervise/prewarm.py's watch_spares, membership.py's spares_lost): the
sessions of its warm standbys end (TaskHandle.session_lost, the sign a working host's loss gives),
so it is recorded lost (one host_lost event, ``spare``), down until it answers again, and no replan
moves a task there meanwhile; back (Hosts.back), it is a spare again with its standbys. The real
Supervisor on the scripted backend (tests/support/fakes.py), its clock a counter."""

from __future__ import annotations

import io
import textwrap
import threading
import time

from launcher.app.up import plan_for
from launcher.loader.load import parse_spec
from launcher.record.view import RunModel
from launcher.record.writer import RunRecord
from launcher.supervise.context import RunContext
from launcher.supervise.membership import HostsGiven, Membership
from launcher.ui.console import Console
from tests.support.fakes import RUN_FOREVER, Counter, Script, ScriptedHosts, ScriptedTasks, scripted, supervise
import launcher.record.events as ev
from tests.support.records import read_records, of

SPEC = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: h1, address: 10.0.0.1}, {name: h2, address: 10.0.0.2}, {name: h3, address: 10.0.0.3}]
    tasks: {worker: 2}
    restart: {max_restarts: 0, warm_standby: true}
    elastic: {host_wait: 1, settle: 5}
    watchdog: {stop_grace: 0}
"""
LOST = Script(code=255, polls=2, lost=True)  # a session lost at its second poll


class Returning(ScriptedHosts):
    """Lost hosts watched (``back``, each call recorded in ``asked``): ``returning`` answers from
    the ``after``-th call on (None: never)."""

    def __init__(self, returning: tuple[str, ...] = (), after: int | None = None) -> None:
        super().__init__({})
        self.returning, self.after = returning, after
        self.asked: list[tuple[list[str], float]] = []

    def back(self, hosts, settle):
        self.asked.append((list(hosts), settle))
        if self.after is None or len(self.asked) < self.after:
            return []
        return [h for h in self.returning if h in hosts]


def starts(scripts, hosts: Returning):
    # Starts, per task: 0 attempt 1's; 1 its standby on its host; 2 its standby on the spare h3.
    return scripted(ScriptedTasks(scripts, default=Script(code=0, polls=4)), hosts, elastic=True, warm_standby=True)


def test_a_spare_whose_standbys_sessions_end_is_lost_once_and_the_next_loss_does_not_move_there(tmp_path):
    backend = starts({("worker:0", 0): RUN_FOREVER, ("worker:1", 0): Script(code=255, polls=30, lost=True),
                      ("worker:0", 2): LOST, ("worker:1", 2): LOST}, Returning())
    result = supervise(tmp_path, SPEC, backend, clock=Counter())
    out, events = result.console, result.events
    assert result.code == 1, out
    standbys = of(events, ev.StandbyStart)
    assert standbys[0]["spares"] == ["h3"]  # h3 held hot standbys
    first, second = of(events, ev.HostLost)
    assert (first["host"], first["spare"], first["suspect"], first["attempt"]) == ("h3", True, True, 0), first
    assert first["how"].startswith("a spare: its standbys' sessions lost at ")
    assert (second["host"], second["spare"]) == ("h2", False)
    assert out.count("h3: a spare: its standbys' sessions lost at ") == 1, out
    assert backend.hosts.asked[0] == (["h3"], 5.0)  # watched from then on, elastic.settle
    # worker:1's host lost: h3 is down, so no move there; with no min the group waits for h2.
    assert not of(events, ev.Replan)
    assert not [k for k, h in backend.tasks.hosts_started[6:] if h == "h3"], backend.tasks.hosts_started
    assert "no spare host for worker:1: waiting up to elastic.host_wait=1 s for h2" in out, out
    assert backend.hosts.checked == [(["h1", "h2"], 0.0)]  # the plan's hosts looked at; h3 never again


def test_a_lost_spare_that_answers_again_gets_its_standbys_back_and_takes_the_next_move(tmp_path):
    backend = starts({("worker:0", 0): RUN_FOREVER, ("worker:1", 0): Script(code=255, polls=40, lost=True),
                      ("worker:0", 2): LOST, ("worker:1", 2): LOST,
                      ("worker:0", 1): Script(code=0, polls=40), ("worker:1", 3): Script(code=0, polls=40),
                      ("worker:0", 3): RUN_FOREVER},
                     Returning(("h3",), after=3))
    result = supervise(tmp_path, SPEC, backend, clock=Counter())
    out, events = result.console, result.events
    assert result.code == 0, out
    assert [(e["host"], e["spare"]) for e in of(events, ev.HostLost)] == [("h3", True), ("h2", False)]
    (added,) = of(events, ev.HostAdded)
    assert (added["host"], added["spare"]) == ("h3", True)
    assert "h3 answers again (5 s without a break, elastic.settle): usable again" in out, out
    # Its standbys made again (the next attempt's, on h3 only: those on h1 and h2 still wait).
    assert [e.get("spares") for e in of(events, ev.StandbyStart)][:2] == [["h3"], ["h3"]]
    assert of(events, ev.StandbyStart)[1]["hosts"] == ["h3"]
    (replan,) = of(events, ev.Replan)
    assert replan["moved"] == {"worker:1": {"from": "h2", "to": "h3"}}
    promoted = {e["task"] for e in of(events, ev.StandbyPromoted)}
    assert promoted == {"worker:0", "worker:1"}  # the move to h3 was hot


def test_the_membership_records_a_spare_lost_once_and_leaves_the_plans_hosts_to_the_failed_attempt(tmp_path):
    spec = parse_spec(textwrap.dedent(SPEC))
    plan = plan_for(spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    out = io.StringIO()
    hosts = Returning()
    view = RunModel()
    Console(out=out, err=out, color=False).listen(record, view)  # what the membership records, said
    ctx = RunContext(record=record, view=view,
                     backend=scripted(ScriptedTasks(), hosts, elastic=True), restart=spec.restart,
                     watchdog=spec.watchdog, clock=time.monotonic, poll_interval=0.1, stop_event=threading.Event(),
                     hurry_event=threading.Event())
    members = Membership(ctx, plan, HostsGiven(spec=spec))
    assert members.spares() == {"spares": ["h3"]}
    assert members.spares_lost(0, {"h3": 1700000000.0, "h2": 1700000001.0}) == ["h3"]  # h2 holds worker:1
    assert members.spares_lost(0, {"h3": 1700000002.0}) == []  # already down: not lost twice
    assert members.down == ["h3"] and members.spares() == {"spares": []} and members.seen.losses == ()
    assert hosts.asked == [(["h3"], 5.0)]  # watched until it answers for elastic.settle
    record.close()
    events = read_records(record.dir)
    (lost,) = [e for e in events if isinstance(e, ev.HostLost)]
    assert (lost["host"], lost["spare"], lost["suspect"], lost["settle"]) == ("h3", True, True, 5.0)
    assert out.getvalue().count("h3: a spare: its standbys' sessions lost at ") == 1
