"""Ranks in blocks (launcher/plan/roundrobin.py): the round-robin decides how many tasks of
each group a host gets, and a host's tasks of a group get consecutive indices, so a ring crosses
the network once per host. The elastic replan (launcher/plan/elastic.py) keeps the blocks."""

from __future__ import annotations

import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.app.up import plan_for
from launcher.plan.roundrobin import round_robin
from launcher.loader.load import parse_spec
from launcher.plan import elastic


def spec_of(hosts: str, tasks: str, strategy: str = "multi_worker_mirrored", extra: str = ""):
    return parse_spec(textwrap.dedent(f"""\
        name: blocks
        strategy: {strategy}
        backend: ssh
        entrypoint: python -m worker
        hosts: {hosts}
        tasks: {tasks}
        {extra}
    """))


def hosts_of(plan, task_type="worker") -> list[str]:
    return [t.host for t in plan.tasks if t.type == task_type]


def blocks(hosts: list[str]) -> bool:
    """Each host's entries are one run (no host comes back after another)."""
    runs = [h for i, h in enumerate(hosts) if i == 0 or hosts[i - 1] != h]
    return len(runs) == len(set(runs))


def test_a_hosts_workers_get_consecutive_indices_and_the_chief_and_worker_0_the_first_host():
    plan = plan_for(spec_of("[{name: vm1}, {name: vm2}]", "{worker: 4}"))
    assert hosts_of(plan) == ["vm1", "vm1", "vm2", "vm2"]  # dealt one by one: vm1, vm2, vm1, vm2
    plan = plan_for(spec_of("[{name: vm1}, {name: vm2}, {name: vm3}]", "{chief: 1, worker: 5}"))
    assert [t.host for t in plan.tasks] == ["vm1", "vm1", "vm2", "vm2", "vm3", "vm3"]
    assert plan.task("chief:0").host == plan.task("worker:0").host == "vm1"


def test_slots_decide_the_block_sizes():
    plan = plan_for(spec_of("[{name: a, slots: 3}, {name: b, slots: 1}]", "{worker: 4}"))
    assert hosts_of(plan) == ["a", "a", "a", "b"]


def test_a_groups_own_hosts_give_blocks_in_their_order():
    plan = plan_for(spec_of("[{name: a}, {name: b}, {name: c}]",
                            "{chief: 1, worker: {count: 4, hosts: [c, b]}, ps: 1}", strategy="parameter_server"))
    assert hosts_of(plan) == ["c", "c", "b", "b"]


@settings(max_examples=150, deadline=None)
@given(hosts=st.integers(1, 5), workers=st.integers(1, 12), chief=st.booleans(),
       slots=st.lists(st.one_of(st.none(), st.integers(1, 4)), min_size=5, max_size=5))
def test_blocks_for_any_hosts_tasks_and_slots(hosts, workers, chief, slots):
    listed = ", ".join(f"{{name: h{i}" + (f", slots: {slots[i]}" if slots[i] else "") + "}" for i in range(hosts))
    if sum(s or workers + 1 for s in slots[:hosts]) < workers + chief:
        return  # does not fit: the plan refuses (tested elsewhere)
    spec = spec_of(f"[{listed}]", f"{{{'chief: 1, ' if chief else ''}worker: {workers}}}")
    dealt = round_robin(spec)
    placed = hosts_of(plan_for(spec))
    assert blocks(placed), placed
    # The same count on every host as the round-robin dealt (slots and spares unchanged).
    assert sorted(placed) == sorted(s.host for k, s in dealt.items() if k.startswith("worker:"))
    if not chief:  # worker:0 on the first host used
        assert placed[0] == min(placed, key=lambda h: int(h[1:]))


def test_the_elastic_replan_keeps_blocks_a_lost_hosts_block_moves_whole():
    # The workers on a and b (their own hosts), c a spare.
    spec = spec_of("[{name: a}, {name: b}, {name: c}]", "{worker: {count: 4, hosts: [a, b]}}", extra="elastic: {}")
    plan = plan_for(spec)
    assert hosts_of(plan) == ["a", "a", "b", "b"]
    replan = elastic.replace_lost(spec, plan, ["a"])
    assert not isinstance(replan, str), replan
    assert hosts_of(replan.plan) == ["c", "c", "b", "b"] and blocks(hosts_of(replan.plan))


def test_the_preflight_says_64_hosts_without_a_gpu_in_one_line():
    from launcher.plan.gputext import gpu_notes

    names = [f"h{i}" for i in range(1, 65)]
    spec = spec_of("[" + ", ".join(f"{{name: {n}}}" for n in names) + "]", "{worker: 64}",
                   extra="devices: {gpus_per_task: 1}")
    plan = plan_for(spec)
    notes = gpu_notes(plan, {n: () for n in names})
    assert notes[0] == "no GPU found on 64 hosts (h1…h64): nvidia-smi -L lists none there; their GPU tasks run on CPU", notes
    assert not any("no GPU found (" in n for n in notes)
    one = gpu_notes(plan, {"h3": (), **{n: None for n in names if n != "h3"}})
    assert one[0] == "no GPU found (h3: nvidia-smi -L lists none): its 1 GPU task runs on CPU", one
