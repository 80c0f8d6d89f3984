"""launcher/plan/elastic.py: a worker group with a min starts with the hosts there (pure), plan_for's
smaller plan where hosts[].slots have no room for every worker yet, and the record's group sizes."""

from __future__ import annotations

from launcher.app.plannotes import short_line, start_note
from launcher.app.stages import plan_for, starts_small_here
from launcher.errors import SpecError
from launcher.loader.load import parse_spec
from launcher.plan.elastic import PlanChange, group_size, start_without
from launcher.record.hosts import size_now, sizes_line
from launcher.record.view import RunModel

import pytest

SSH = """
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {name: h1, address: 10.0.0.1}
  - {name: h2, address: 10.0.0.2}
tasks: {worker: {count: 2, min: 1}}
elastic: {host_wait: 5}
"""


def test_a_group_with_min_starts_without_the_hosts_that_do_not_answer():
    spec = parse_spec(SSH)
    plan = plan_for(spec)
    assert starts_small_here(spec)
    change = start_without(spec, plan, ["h2"])
    assert isinstance(change, PlanChange)
    assert [(t.key, t.host) for t in change.plan.tasks] == [("worker:0", "h1")]
    assert change.dropped == ("worker:1",)
    # worker:0's host absent: worker:1 becomes worker:0 (renumbered in order)
    other = start_without(spec, plan, ["h1"])
    assert [(t.key, t.host) for t in other.plan.tasks] == [("worker:0", "h2")]
    assert start_without(spec, plan, ["h1", "h2"]) == "0 workers can start now, below tasks.worker.min=1"
    group = group_size(spec, change.plan, "h2 not answering")
    assert group == {"type": "worker", "size": 1, "of": 2, "why": "h2 not answering"}
    assert short_line(spec, change.plan, "h2 not answering") == "worker: 1 of 2 (h2 not answering)"
    assert short_line(spec, plan, "") == ""
    assert "starts with 1..2 of 2 workers where hosts are short" in start_note(spec, plan)
    assert start_note(spec, plan).endswith("grows as hosts appear")


def test_a_spare_that_answers_takes_the_absent_hosts_worker_and_chief_hosts_are_not_elastic():
    spec = parse_spec(SSH.replace("  - {name: h2, address: 10.0.0.2}\n",
                                  "  - {name: h2, address: 10.0.0.2}\n  - {name: h3, address: 10.0.0.3}\n"))
    plan = plan_for(spec)
    change = start_without(spec, plan, ["h2"])
    assert [(t.key, t.host) for t in change.plan.tasks] == [("worker:0", "h1"), ("worker:1", "h3")]
    chief = parse_spec(SSH.replace("tasks: {worker: {count: 2, min: 1}}",
                                   "tasks: {chief: 1, worker: {count: 1, min: 1}}"))
    assert start_without(chief, plan_for(chief), ["h1"]) is None  # the chief's host: the usual error
    assert isinstance(start_without(chief, plan_for(chief), ["h3"]), PlanChange)  # (not a host of the plan)


def test_no_min_keeps_the_usual_start_and_a_min_alone_turns_elastic_on():
    spec = parse_spec(SSH.replace("tasks: {worker: {count: 2, min: 1}}", "tasks: {worker: 2}"))
    assert not starts_small_here(spec.model_copy(update={"elastic": None}))
    assert start_note(spec.model_copy(update={"elastic": None}), plan_for(spec)) == ""
    alone = parse_spec(SSH.replace("elastic: {host_wait: 5}\n", ""))  # no elastic: block, no spare
    assert starts_small_here(alone)


def test_plan_for_starts_with_the_room_the_slots_have_now_and_refuses_below_min():
    spec = parse_spec(SSH.replace("  - {name: h1, address: 10.0.0.1}\n  - {name: h2, address: 10.0.0.2}\n",
                                  "  - {name: h1, address: 10.0.0.1, slots: 1}\n"))
    plan = plan_for(spec)
    assert [(t.key, t.host) for t in plan.tasks] == [("worker:0", "h1")]
    assert start_note(spec, plan) == ("worker: starts with 1 of 2 workers (no room for more on the hosts known now); "
                                      "grows as hosts appear (tasks.worker.min=1)")
    strict = parse_spec(SSH.replace("  - {name: h1, address: 10.0.0.1}\n  - {name: h2, address: 10.0.0.2}\n",
                                    "  - {name: h1, address: 10.0.0.1, slots: 1}\n").replace("min: 1", "min: 2"))
    with pytest.raises(SpecError, match=r"hosts\[\]\.slots: the tasks do not fit: h1 \(2 tasks, 1 slot\)"):
        plan_for(strict)


def test_the_view_keeps_the_groups_size_attempt_by_attempt():
    view = RunModel()
    view.event({"event": "run_start", "time": 1.0, "tasks": ["worker:0"], "spares": [],
                "group": {"type": "worker", "size": 1, "of": 2, "why": "h2 not answering"}})
    assert size_now(view) == "worker: 1 of 2 (h2 not answering)"
    view.event({"event": "host_added", "time": 2.0, "host": "h2", "settle": 3})
    view.event({"event": "replan", "time": 3.0, "plan": 2, "attempt": 1, "lost": [], "moved": {}, "dropped": [],
                "added": {"worker:1": "h2"}, "tasks": ["worker:0", "worker:1"]})
    assert size_now(view) == ""
    assert sizes_line(view) == "worker group by attempt: 1: 1 of 2 (h2 not answering); 2: 2 of 2 (h2 back)"
    again = RunModel.from_json(view.to_json())  # (a snapshot keeps them)
    assert sizes_line(again) == sizes_line(view)
    full = RunModel()
    full.event({"event": "run_start", "time": 1.0, "tasks": ["worker:0", "worker:1"],
                "group": {"type": "worker", "size": 2, "of": 2}})
    assert sizes_line(full) == "" and size_now(full) == ""


def test_up_waits_for_discovered_room_for_min_then_ends_in_one_line(tmp_path, monkeypatch):
    """The plan stage's own wait (launcher/app/stages.py's plan_with_room): discovery.command runs
    again until its hosts have room for min workers; the spec file itself is read once."""
    import launcher.loader.load as load
    from launcher.app.stages import Waits, discover, load as read_spec, plan_with_room
    from launcher.errors import LaunchError
    from launcher.notices import PlainNotices

    listing = tmp_path / "hosts.txt"
    listing.write_text("- {name: h1, address: 10.0.0.1, slots: 1}\n")
    path = tmp_path / "cluster.yaml"
    path.write_text(SSH.replace("hosts:\n  - {name: h1, address: 10.0.0.1}\n  - {name: h2, address: 10.0.0.2}\n", "")
                    .replace("min: 1", "min: 2") + f"discovery: {{command: cat {listing}, every: 1}}\n")
    reads = []
    real = load.read_regular
    monkeypatch.setattr(load, "read_regular", lambda p, *a: reads.append(p) or real(p, *a))
    now = [0.0]

    def pause(seconds):  # the second host is listed after 2 s
        now[0] += seconds
        if now[0] >= 2:
            listing.write_text("- {name: h1, address: 10.0.0.1, slots: 1}\n- {name: h2, address: 10.0.0.2, slots: 1}\n")

    planned = plan_with_room(discover(read_spec(str(path))), PlainNotices(), Waits(lambda: now[0], pause))
    assert [(t.key, t.host) for t in planned.plan.tasks] == [("worker:0", "h1"), ("worker:1", "h2")] and now[0] == 2
    assert [h.name for h in planned.loaded.spec.hosts] == ["h1", "h2"]
    assert planned.discovered.static_hosts == [] and reads == [path]  # read once, discovery run three times
    listing.write_text("- {name: h1, address: 10.0.0.1, slots: 1}\n")
    now[0] = 0.0
    with pytest.raises(LaunchError) as got:
        plan_with_room(discover(read_spec(str(path))), PlainNotices(),
                       Waits(lambda: now[0], lambda s: now.__setitem__(0, now[0] + s)))
    assert len(got.value.lines) == 1 and now[0] == 5.0
    assert got.value.lines[0].startswith("no room for tasks.worker.min=2 workers on the hosts discovery.command listed "
                                         "within elastic.host_wait=5 s (hosts[].slots: the tasks do not fit: h1 (2 tasks, "
                                         "1 slot);")


SLOTTED = """
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {name: h1, address: 10.0.0.1, slots: 2}
  - {name: h2, address: 10.0.0.2, slots: 2}
  - {name: h3, address: 10.0.0.3}
tasks: {worker: {count: 5, min: 1}}
"""


def test_the_group_grows_into_every_free_slot_not_one_worker_per_empty_host():
    """h1 and h2 have 2 slots each; h3 none. The group runs as worker:0 on h1 alone (h2 was not
    there): it grows into h1's free slot, both of h2's and one on h3 (a host without slots takes
    one worker while it holds none), five in all, the running worker keeping its host and index."""
    from launcher.plan.build import Placement, Slot, build_plan
    from launcher.plan.elastic import grow, room_to_grow, with_workers

    spec = parse_spec(SLOTTED)
    alone = build_plan(with_workers(spec, 1), Placement({"worker:0": Slot("h1", "10.0.0.1")}))
    assert room_to_grow(spec, alone) == {"h1": 1, "h2": 2, "h3": 1}
    assert room_to_grow(spec, alone, down=["h2"]) == {"h1": 1, "h3": 1}
    change = grow(spec, alone)
    assert [(t.key, t.host) for t in change.plan.tasks] == [
        ("worker:0", "h1"), ("worker:1", "h1"), ("worker:2", "h2"), ("worker:3", "h2"), ("worker:4", "h3")]
    assert change.added == {"worker:1": "h1", "worker:2": "h2", "worker:3": "h2", "worker:4": "h3"}
    assert change.describe({}) == ("h2 back; h3 back; worker:1 added on h1; worker:2 added on h2; worker:3 added on "
                                   "h2; worker:4 added on h3")  # h1 held a task: not "back"
    # Only as many as are missing, in the spec's order; nothing missing or no room: None.
    four = parse_spec(SLOTTED.replace("count: 5", "count: 3"))
    assert [t.host for t in grow(four, alone).plan.tasks] == ["h1", "h1", "h2"]
    full = grow(spec, alone).plan
    assert grow(spec, full) is None and room_to_grow(spec, full) == {}
    # A worker group with its own hosts grows on those only.
    own = parse_spec(SLOTTED.replace("count: 5, min: 1", "count: 5, min: 1, hosts: [h1, h3]"))
    assert room_to_grow(own, alone) == {"h1": 1, "h3": 1}
