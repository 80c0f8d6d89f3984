"""launcher/plan/elastic.py: spares and the plan after a host is lost (pure), and the spec's elastic: rules."""

from __future__ import annotations

import re

import pytest

from launcher.plan.elastic import (PlanChange, elastic_enabled, fresh_ports, replace_lost, spare_hosts, suspect_how,
                                   too_many_losses)
from launcher.backends import placed_hosts
from launcher.plan.hostloss import HostLoss, LossKind
from launcher.errors import SpecError
from launcher.app.up import plan_for
from launcher.loader.load import parse_spec

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
tasks: {chief: 1, worker: 2}
"""


def test_the_hosts_no_task_uses_are_spares_and_turn_elastic_on():
    spec = parse_spec(SSH)
    assert placed_hosts(spec) == ["h1", "h2", "h3"]  # the backend's static placement
    assert spare_hosts(spec, placed_hosts(spec)) == ["h4"]
    assert spare_hosts(spec, ["h1", "h4"], down=["h3"]) == ["h2"]  # pure: the hosts given, in the spec's order
    assert elastic_enabled(spec, placed_hosts(spec))
    assert not elastic_enabled(spec, None)  # a spec its backend cannot place has no spares
    three = parse_spec(SSH.replace("  - {name: h4, address: 10.0.0.4}\n", ""))
    assert spare_hosts(three, placed_hosts(three)) == [] and not elastic_enabled(three, placed_hosts(three))
    asked = parse_spec(SSH.replace("  - {name: h4, address: 10.0.0.4}\n", "") + "elastic: {}\n")
    assert elastic_enabled(asked, placed_hosts(asked)) and elastic_enabled(asked, None)


def test_a_lost_hosts_tasks_move_to_a_spare_with_their_identities_and_every_tf_config_changes():
    spec = parse_spec(SSH)
    plan = plan_for(spec)
    change = replace_lost(spec, plan, ["h2"])
    assert isinstance(change, PlanChange)
    assert [(t.key, t.host, t.address) for t in change.plan.tasks] == [
        ("chief:0", "h1", "10.0.0.1"), ("worker:0", "h4", "10.0.0.4"), ("worker:1", "h3", "10.0.0.3")]
    assert change.moved == {"worker:0": ("h2", "h4")} and change.lost == ("h2",)
    cluster = change.plan.tasks[0].tf_config["cluster"]
    assert cluster["worker"] == ["10.0.0.4:23456", "10.0.0.3:23456"], cluster
    # Every task's TF_CONFIG names the new address; no task keeps the old one.
    assert all("10.0.0.2" not in t.tf_config_json for t in change.plan.tasks)
    dropped = HostLoss(LossKind.DROPPED, "h2", None, "gone from discovery.command's list")
    assert change.describe({"h2": dropped}) == (
        "h2 lost (gone from discovery.command's list); worker:0 moved to h4 (spare)")
    how = suspect_how(30, 1700000000.0, answering=True)
    assert re.fullmatch(r"session lost at \d\d:\d\d:\d\d, host still answering; suspect until it answers for 30 s", how)
    # A loss reads by its kind, not its words: a suspect one (a session) names the host, then its words.
    assert change.describe({"h2": HostLoss(LossKind.SESSION, "h2", 1700000000.0, how)}) == \
        f"h2: {how}; worker:0 moved to h4 (spare)"
    assert change.describe({"h2": HostLoss(LossKind.PREEMPTED, "h2", None, how)}).startswith(f"h2 lost ({how})")
    assert change.describe({}) == "h2 lost; worker:0 moved to h4 (spare)"
    assert suspect_how(5, None, answering=False) == "host not answering; suspect until it answers for 5 s"


def test_a_replan_takes_no_port_an_earlier_plan_of_the_run_gave_and_explicit_ports_stay():
    """A lost host's old tasks can outlive the move (a partition, a paused VM): on the ports of
    the earlier plans, the new attempt's tasks would be reachable by them."""
    spec = parse_spec(SSH.replace("tasks:", "  - {name: h5, address: 10.0.0.5}\ntasks:"))
    plan = plan_for(spec)
    assert [t.endpoint for t in plan.tasks] == ["10.0.0.1:23456", "10.0.0.2:23456", "10.0.0.3:23456"]
    first = replace_lost(spec, plan, ["h2"], avoid=fresh_ports([plan]))
    assert isinstance(first, PlanChange)
    assert [t.endpoint for t in first.plan.tasks] == ["10.0.0.1:23457", "10.0.0.4:23456", "10.0.0.3:23457"]
    assert first.plan.tasks[0].tf_config["cluster"]["chief"] == ["10.0.0.1:23457"]
    second = replace_lost(spec, first.plan, ["h3"], ["h2"], avoid=fresh_ports([plan, first.plan]))
    assert isinstance(second, PlanChange)
    assert [t.endpoint for t in second.plan.tasks] == ["10.0.0.1:23458", "10.0.0.4:23457", "10.0.0.5:23456"]
    # Without avoid: the old behaviour, the same ports again.
    assert [t.port for t in replace_lost(spec, plan, ["h2"]).plan.tasks] == [23456, 23456, 23456]
    explicit = parse_spec(SSH.replace("tasks: {chief: 1, worker: 2}",
                                      "tasks: {chief: {count: 1, ports: [9000]}, worker: 2}"))
    moved = replace_lost(explicit, plan_for(explicit), ["h2"], avoid=fresh_ports([plan_for(explicit)]))
    assert isinstance(moved, PlanChange) and moved.plan.tasks[0].port == 9000  # as the user gave it


def test_hosts_lost_earlier_are_never_spares_again_and_no_spare_is_one_line_naming_the_hosts():
    spec = parse_spec(SSH)
    plan = plan_for(spec)
    first = replace_lost(spec, plan, ["h2"])
    assert isinstance(first, PlanChange)
    second = replace_lost(spec, first.plan, ["h4"], down=["h2"])
    assert isinstance(second, str)
    assert second == ("host h4 (worker:0) lost and no spare host left for worker:0; list more hosts under hosts: "
                      "(the unused ones are spares) or bring h4 back and run `tfcluster up` again (it resumes "
                      "from the last backup)")
    both = replace_lost(spec, plan, ["h1", "h2"])
    assert isinstance(both, str) and both.startswith("host h2 (worker:0) lost and no spare"), both


@pytest.mark.parametrize("backend,extra", [("local", ""), ("docker", "hosts: [{name: a}]\n")])
def test_elastic_is_refused_in_one_line_on_backends_that_cannot_move_tasks(backend, extra):
    text = (f"name: t\nstrategy: multi_worker_mirrored\nbackend: {backend}\nentrypoint: python -m worker\n{extra}"
            "tasks: {worker: 2}\nelastic: {host_wait: 5}\n")
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert err.value.lines == (f"cluster.yaml:{text.count(chr(10))}: elastic: backend {backend} cannot move tasks to "
                               "other hosts; elastic: works with backend ssh; remove elastic:",)


MIN = SSH.replace("tasks: {chief: 1, worker: 2}", "tasks: {worker: {count: 4, min: 2}}")


def test_with_no_spare_the_workers_left_go_on_renumbered_while_at_least_min_remain():
    spec = parse_spec(MIN)
    plan = plan_for(spec)
    assert [t.host for t in plan.tasks] == ["h1", "h2", "h3", "h4"] and spare_hosts(spec, placed_hosts(spec)) == []
    change = replace_lost(spec, plan, ["h2"])
    assert isinstance(change, PlanChange)
    assert [(t.key, t.host) for t in change.plan.tasks] == [("worker:0", "h1"), ("worker:1", "h3"), ("worker:2", "h4")]
    assert change.dropped == ("worker:1",) and change.moved == {}
    assert change.plan.tasks[0].tf_config["cluster"] == {"worker": ["10.0.0.1:23456", "10.0.0.3:23456",
                                                                    "10.0.0.4:23456"]}
    assert change.describe({"h2": HostLoss(LossKind.PREEMPTED, "h2", None, "preempted: GCE notice at 12:01:07")}) == (
        "h2 lost (preempted: GCE notice at 12:01:07); worker:1 left out: 3 workers go on (no spare host)")
    # Down to min, then one more loss is one line naming the host and the rule.
    two = replace_lost(spec, change.plan, ["h4"], down=["h2"])
    assert isinstance(two, PlanChange) and [t.host for t in two.plan.tasks] == ["h1", "h3"]
    below = replace_lost(spec, two.plan, ["h3"], down=["h2", "h4"])
    assert below == ("host h3 (worker:1) lost and 1 worker would be left, below tasks.worker.min=2; list more "
                     "hosts under hosts: (the unused ones are spares) or bring h3 back and run `tfcluster up` "
                     "again (it resumes from the last backup)")


def test_a_spare_is_used_before_the_group_shrinks():
    spec = parse_spec(MIN.replace("count: 4", "count: 3"))
    change = replace_lost(spec, plan_for(spec), ["h1"])
    assert isinstance(change, PlanChange) and change.dropped == ()
    assert [(t.key, t.host) for t in change.plan.tasks] == [("worker:0", "h4"), ("worker:1", "h2"), ("worker:2", "h3")]


@pytest.mark.parametrize("text,line", [
    ("tasks: {worker: {count: 2, min: 3}}", "cluster.yaml:4: tasks.worker: min 3 is above count 2; set min to at most 2"),
    ("tasks: {worker: {count: 2, min: 1}}", "cluster.yaml:4: tasks.worker.min: backend local cannot go on with fewer "
                                            "workers; min works with backend ssh; remove min"),
])
def test_min_is_checked_in_one_line(text, line):
    with pytest.raises(SpecError) as err:
        parse_spec(f"name: t\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\n{text}\n")
    assert err.value.lines == (line,)



def test_host_losses_are_bounded_by_max_host_losses_in_one_line():
    assert too_many_losses(["h2", "h2"], 2) is None
    line = too_many_losses(["h2", "h3", "h2"], 2)
    assert line is not None and line.startswith(
        "3 host losses in this run (h2 2 times, h3 1 time), more than elastic.max_host_losses=2: ")
    assert "raise elastic.max_host_losses" in line and "\n" not in line
    assert (too_many_losses(["h2"], 0) or "").startswith(  # 0: the first loss ends the run
        "1 host loss in this run (h2 1 time), more than elastic.max_host_losses=0: ")


def test_a_restart_on_fresh_ports_changes_only_the_ports_and_the_tf_config_naming_them():
    """on_fresh_ports (a backend with Capabilities.fresh_ports_per_restart): the same tasks on the
    same hosts, ports no earlier plan used, the rest of each task (its env, threads, GPUs) as it was."""
    from dataclasses import replace

    from launcher.plan.elastic import on_fresh_ports

    local = parse_spec("name: t\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\ntasks: {worker: 2}\n"
                       "devices: {threads: auto}\n")
    plan = plan_for(local)
    second = on_fresh_ports(local, plan, fresh_ports([plan]))
    third = on_fresh_ports(local, second, fresh_ports([plan, second]))
    ports = [{t.port for t in p.tasks} for p in (plan, second, third)]
    assert len(set.union(*ports)) == 6, ports  # each plan's own
    for old, new in zip(plan.tasks, third.tasks):
        assert replace(new, port=old.port, cluster=old.cluster) == old
        assert new.tf_config["cluster"]["worker"][new.index].endswith(f":{new.port}")
    explicit = parse_spec(SSH.replace("tasks: {chief: 1, worker: 2}", "tasks: {chief: 1, worker: {count: 2, ports: [7001, 7002]}}"))
    moved = on_fresh_ports(explicit, plan_for(explicit), fresh_ports([plan_for(explicit)]))
    assert [t.port for t in moved.tasks if t.type == "worker"] == [7001, 7002]  # explicit ports stay
