"""launcher/plan/reconcile.py: the plan an elastic run wants from the hosts as seen (pure), one
case per decision membership takes through it: a lost host's tasks to a spare, a shrink to
tasks.worker.min, the wait or the end below it, growing back, discovery's hosts, too many losses,
a parameter_server worker left out, fresh ports. Real specs and plans, no backend."""

from __future__ import annotations

from dataclasses import replace

from launcher.app.up import plan_for
from launcher.loader.load import parse_spec
from launcher.plan.elastic import fresh_ports, replace_lost
from launcher.plan.hostloss import HostLoss, LossKind
from launcher.plan.reconcile import GROWN, MOVED, Act, HostsSeen, due, grow_ahead, wanted
from launcher.spec.model import Host

SSH = """
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {name: h1, address: 10.0.0.1}
  - {name: h2, address: 10.0.0.2}
  - {name: h3, address: 10.0.0.3}
  - {name: h4, address: 10.0.0.4}
tasks: {worker: 3}
"""
MIN = SSH.replace("tasks: {worker: 3}", "tasks: {worker: {count: 4, min: 2}}")
SUSPECT = "host not answering; suspect until it answers for 30 s"


def lost(*hosts: str, losses: tuple[str, ...] = (), down: tuple[str, ...] = (), for_good: bool = False) -> HostsSeen:
    return HostsSeen(down=down, losses=losses + tuple(hosts), for_good=for_good,
                     lost={h: HostLoss(LossKind.UNREACHABLE, h, None, SUSPECT) for h in hosts})


def test_a_lost_hosts_tasks_move_to_a_spare_on_ports_no_plan_of_the_run_took():
    spec = parse_spec(SSH)
    plan = plan_for(spec)
    seen = lost("h2")
    assert seen.spares(spec, plan) == ["h4"]
    want = wanted(spec, plan, seen, fresh_ports([plan]))
    assert want.act is Act.USE and want.then == MOVED and want.change is not None
    assert [(t.key, t.host) for t in want.change.plan.tasks] == [("worker:0", "h1"), ("worker:1", "h4"),
                                                                 ("worker:2", "h3")]
    assert want.change.moved == {"worker:1": ("h2", "h4")}
    assert {t.port for t in want.change.plan.tasks} == {23457, 23456}  # h1's and h3's 23456 taken before
    assert want.change.plan.task("worker:0").port == 23457
    assert want.down == ("h2",) and want.watch  # h2 watched until it settles, never a spare meanwhile


def test_no_spare_shrinks_to_min_then_below_min_a_suspect_is_waited_for_and_a_dropped_host_ends_the_run():
    spec = parse_spec(MIN)
    plan = plan_for(spec)
    shrink = wanted(spec, plan, lost("h2"))
    assert shrink.act is Act.USE and shrink.change is not None
    assert shrink.change.dropped == ("worker:1",) and [t.host for t in shrink.change.plan.tasks] == ["h1", "h3", "h4"]
    two = replace_lost(spec, shrink.change.plan, ["h4"], down=["h2"])
    assert not isinstance(two, str)
    wait = wanted(spec, two.plan, lost("h3", losses=("h2", "h4"), down=("h2", "h4")))
    assert wait.act is Act.WAIT and wait.change is None
    assert wait.line.startswith("host h3 (worker:1) lost and 1 worker would be left, below tasks.worker.min=2")
    assert wait.said == f"h3: {SUSPECT}" and wait.down == ("h2", "h4", "h3") and wait.watch
    gone = wanted(spec, two.plan, lost("h3", losses=("h2", "h4"), down=("h2", "h4"), for_good=True))
    assert gone.act is Act.END and gone.line == wait.line  # dropped from discovery's list: nothing to wait for


def test_a_shrunk_group_grows_back_only_once_a_host_is_back():
    spec = parse_spec(MIN)
    plan = plan_for(spec)
    shrunk = replace_lost(spec, plan, ["h2"])
    assert not isinstance(shrunk, str)
    # h2 still down: nothing came back, the smaller group is the plan wanted.
    assert wanted(spec, shrunk.plan, HostsSeen(down=("h2",), losses=("h2",))).act is Act.KEEP
    assert not due(spec, shrunk.plan, HostsSeen(down=("h2",), losses=("h2",)))
    back = HostsSeen(losses=("h2",), back=("h2",))
    assert due(spec, shrunk.plan, back)
    want = wanted(spec, shrunk.plan, back, fresh_ports([plan, shrunk.plan]))
    assert want.act is Act.USE and want.then == GROWN and want.change is not None
    assert want.change.added == {"worker:3": "h2"} and want.change.back == ("h2",)
    assert len(want.change.plan.tasks) == 4 and want.down is None  # the hosts down stay as seen
    # elastic.grow: false keeps the smaller group; a full group has nothing to grow.
    off = parse_spec(MIN + "elastic: {grow: false}\n")
    assert wanted(off, shrunk.plan, back).act is Act.KEEP and not due(off, shrunk.plan, back)
    assert wanted(spec, plan, back).act is Act.KEEP and not due(spec, plan, back)


def test_the_tasks_a_shrunk_group_would_grow_with_onto_a_settling_host_are_its_grows_own():
    """grow_ahead: while h2 settles (answering, still down), the task the grow will add there,
    the same process as the grow's (standby.py _same_process: host, command, environment), so
    that a standby started for it now is promoted by the grow; none where nothing would grow."""
    spec = parse_spec(MIN)
    plan = plan_for(spec)
    shrunk = replace_lost(spec, plan, ["h2", "h3"])
    assert not isinstance(shrunk, str) and len(shrunk.plan.tasks) == 2
    ahead = grow_ahead(spec, shrunk.plan, ("h2", "h3"), ["h3"])
    assert [(t.key, t.host) for t in ahead] == [("worker:2", "h3")]  # h2 still down: h3's is the first new index
    grown = wanted(spec, shrunk.plan, HostsSeen(down=("h2",), losses=("h2", "h3"), back=("h3",)),
                   fresh_ports([plan, shrunk.plan])).change
    assert grown is not None and grown.added == {"worker:2": "h3"}
    real = grown.plan.task("worker:2")
    assert (real.host, real.command, real.base_env) == (ahead[0].host, ahead[0].command, ahead[0].base_env)
    assert grow_ahead(spec, shrunk.plan, ("h2", "h3"), []) == ()
    assert grow_ahead(parse_spec(MIN + "elastic: {grow: false}\n"), shrunk.plan, ("h2", "h3"), ["h3"]) == ()
    assert grow_ahead(spec, plan, ("h2",), ["h2"]) == ()  # a full group grows onto nothing


def test_a_host_back_that_the_group_cannot_grow_onto_is_named_and_the_hosts_still_down_stay_down():
    spec = parse_spec(MIN.replace("tasks:", "ports: {base: 65532}\ntasks:"))
    plan = plan_for(spec)
    shrunk = replace_lost(spec, plan, ["h2", "h3"])
    assert not isinstance(shrunk, str) and len(shrunk.plan.tasks) == 2
    # h2 back, h3 still down; every port up to 65535 already taken by the run's plans.
    back = HostsSeen(down=("h3",), losses=("h2", "h3"), back=("h2",))
    want = wanted(spec, shrunk.plan, back, fresh_ports([plan, shrunk.plan]) | {(h, p) for h in ("h1", "h2", "h3", "h4")
                                                                              for p in range(65532, 65536)})
    assert want.act is Act.GO_ON and want.change is None
    assert want.line.startswith("h2: back, but the group cannot grow onto them: "), want.line
    assert want.down is None  # h3 stays down (as seen): not a spare before it settles


def test_discovery_adds_hosts_as_down_and_a_host_it_drops_moves_to_a_spare_or_ends_the_run():
    spec = parse_spec(SSH.replace("  - {name: h4, address: 10.0.0.4}\n", "").replace("worker: 3", "worker: 2"))
    plan = plan_for(spec)
    assert [t.host for t in plan.tasks] == ["h1", "h2"]
    # The answer h1, h3, h5: h2 gone (the plan's), h5 found (down until it answers for elastic.settle).
    found = spec.model_copy(update={"hosts": (spec.hosts[0], spec.hosts[2], Host(name="h5", address="10.0.0.5"))})
    seen = lost("h2", down=("h5",), for_good=True)
    assert due(found, plan, seen)
    want = wanted(found, plan, seen)
    assert want.act is Act.USE and want.change is not None
    assert want.change.moved == {"worker:1": ("h2", "h3")}  # h3, not h5: a found host is not usable yet
    assert want.down == ("h5", "h2")
    # Without h3 only h5, still down: no spare, no min, nothing to wait for.
    alone = found.model_copy(update={"hosts": (spec.hosts[0], Host(name="h5", address="10.0.0.5"))})
    end = wanted(alone, plan, seen)
    assert end.act is Act.END and end.line.startswith("host h2 (worker:1) lost and no spare host left for worker:1")
    # Once h5 answers, it is a spare like any other.
    assert wanted(alone, plan, lost("h2", for_good=True)).change.moved == {"worker:1": ("h2", "h5")}


def test_too_many_losses_end_the_run_before_any_replan():
    spec = parse_spec(SSH + "elastic: {max_host_losses: 2}\n")
    plan = plan_for(spec)
    assert wanted(spec, plan, lost("h2", losses=("h2",))).act is Act.USE  # the second loss: within the bound
    end = wanted(spec, plan, lost("h2", losses=("h2", "h3")))
    assert end.act is Act.END and end.change is None and not end.watch
    assert end.line.startswith(f"h2: {SUSPECT}; 3 host losses in this run (h2 2 times, h3 1 time), more than "
                               "elastic.max_host_losses=2: "), end.line


def test_a_replan_with_no_fresh_port_left_ends_the_run():
    spec = parse_spec(SSH + "ports: {base: 65535}\n")
    plan = plan_for(spec)
    end = wanted(spec, plan, lost("h2"), fresh_ports([plan]))
    assert end.act is Act.END
    assert end.line.startswith(f"h2: {SUSPECT}; the group cannot be replanned: ports.base: 65535 leaves no room"), end.line


PSS = """
name: p
strategy: parameter_server
backend: ssh
entrypoint: python -m worker
hosts: [{name: h1, address: 10.0.0.1}, {name: h2, address: 10.0.0.2}, {name: h3, address: 10.0.0.3},
        {name: h4, address: 10.0.0.4}]
tasks: {chief: 1, ps: 1, worker: {count: 2, min: 1}}
"""


def test_a_parameter_server_worker_whose_host_is_lost_is_left_out_but_a_ps_is_waited_for():
    spec = parse_spec(PSS)
    plan = plan_for(spec)
    where = {t.key: t.host for t in plan.tasks}
    worker_host, ps_host = where["worker:1"], where["ps:0"]
    want = wanted(spec, plan, lost(worker_host))
    assert want.act is Act.USE and want.change is not None and want.change.dropped == ("worker:1",)
    assert sorted(t.key for t in want.change.plan.tasks) == ["chief:0", "ps:0", "worker:0"]
    assert want.change.plan.task("ps:0").host == ps_host  # the coordinator's ps stays where it was
    wait = wanted(spec, plan, lost(ps_host))
    assert wait.act is Act.WAIT and "no spare host left for ps:0" in wait.line


def test_fresh_ports_for_a_restart_keep_the_hosts_and_explicit_ports_keep_the_plan():
    spec = parse_spec(SSH)
    plan = plan_for(spec)
    fresh = wanted(spec, plan, HostsSeen(), fresh_ports([plan]), ports=True)
    assert fresh.act is Act.PORTS and fresh.plan is not None
    assert [t.host for t in fresh.plan.tasks] == [t.host for t in plan.tasks]
    assert {t.port for t in fresh.plan.tasks} == {23457}
    assert wanted(spec, plan, HostsSeen(), fresh_ports([plan])).act is Act.KEEP  # not asked: the plan in use
    explicit = parse_spec(SSH.replace("tasks: {worker: 3}", "tasks: {worker: {count: 3, ports: [7001, 7002, 7003]}}"))
    same = wanted(explicit, plan_for(explicit), HostsSeen(), fresh_ports([plan_for(explicit)]), ports=True)
    assert same.act is Act.KEEP and same.line == ""
    full = parse_spec(SSH + "ports: {base: 65535}\n")
    kept = wanted(full, plan_for(full), HostsSeen(), fresh_ports([plan_for(full)]), ports=True)
    assert kept.act is Act.KEEP and kept.line.startswith("restarting on the same ports: ports.base: 65535"), kept.line
    # A host lost comes first: the restart is then a move, not a port refresh.
    assert wanted(spec, plan, lost("h2"), fresh_ports([plan]), ports=True).act is Act.USE


def test_a_lost_spare_is_down_so_the_next_replan_shrinks_or_waits_instead_of_moving_there():
    spec = parse_spec(SSH)  # 3 workers on h1-h3, h4 the one spare
    plan = plan_for(spec)
    seen, new = HostsSeen().spares_lost(plan, ["h4", "h2"])  # h2 holds worker:1: not a spare
    assert new == ["h4"] and seen.down == ("h4",) and seen.losses == () and not seen.lost
    assert seen.spares(spec, plan) == []
    assert wanted(spec, plan, seen).act is Act.KEEP and not due(spec, plan, seen)  # nothing of the plan was lost
    assert seen.spares_lost(plan, ["h4"]) == (seen, [])  # already down: not lost twice
    # h2 lost next: no spare left and no min, so the group waits for h2 rather than move onto h4.
    wait = wanted(spec, plan, lost("h2", down=seen.down), fresh_ports([plan]))
    assert wait.act is Act.WAIT and wait.change is None and wait.down == ("h4", "h2")
    # With tasks.worker.min the group shrinks onto the hosts it has; h4 takes no task.
    small = parse_spec(MIN.replace("  - {name: h4, address: 10.0.0.4}\n", "  - {name: h4, address: 10.0.0.4}\n"
                                   "  - {name: h5, address: 10.0.0.5}\n"))
    small_plan = plan_for(small)
    down, _ = HostsSeen().spares_lost(small_plan, ["h5"])
    shrink = wanted(small, small_plan, replace(lost("h2"), down=down.down), fresh_ports([small_plan]))
    assert shrink.act is Act.USE and shrink.change is not None and shrink.change.dropped == ("worker:1",)
    assert "h5" not in {t.host for t in shrink.change.plan.tasks}
    # Back (Hosts.back: no longer down), it is a spare again, and the move goes there.
    back = replace(lost("h2"), down=())
    moved = wanted(spec, plan, back, fresh_ports([plan]))
    assert moved.act is Act.USE and moved.change is not None and moved.change.moved == {"worker:1": ("h2", "h4")}
