"""launcher/plan/startsmall.py: the plans a preflight's HostReport gives (a worker group with a min
starting with the hosts that answered, the placement by each host's GPUs), pure: reports made
here as a preflight would return them, no ssh."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from launcher.app.up import plan_for
from launcher.loader.load import parse_spec
from launcher.plan.build import Plan, build_plan
from launcher.plan.roundrobin import gpu_replan
from launcher.plan.startsmall import (DROPPED, NOT_ANSWERING, HostReport, PreflightPlans, by_gpus, gpu_refusals_only,
                                      preflight_plans, start_small, without_dropped)
from launcher.plan import gpus


def a100(n: int) -> tuple:
    return tuple((i, "NVIDIA A100-SXM4-40GB", f"GPU-{i}") for i in range(n))


def spec_of(text: str):
    return parse_spec(textwrap.dedent(text))


THREE = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {worker: {count: 3, min: 1}}
"""

SMALL_GPUS = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {worker: {count: 4, min: 1}}
    devices: {gpus_per_task: 1}
"""

OVERFILLED = """\
    name: s
    strategy: parameter_server
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {chief: 1, ps: 1, worker: 6}
    devices: {gpus_per_task: 1}
"""


def hosts(plan: Plan) -> list[str]:
    return [t.host for t in plan.tasks]


def test_no_report_or_one_that_changes_nothing_gives_the_usual_plans():
    spec = spec_of(OVERFILLED)
    assert preflight_plans(spec, plan_for(spec), None) == PreflightPlans()
    assert preflight_plans(spec, plan_for(spec), HostReport(answered=("a", "b", "c"))) == PreflightPlans()
    with pytest.raises(dataclasses.FrozenInstanceError):
        HostReport().small = True  # type: ignore[misc]


def test_a_group_starting_small_with_every_host_there_starts_with_the_full_plan():
    spec = spec_of(THREE)
    full = plan_for(spec)
    got = preflight_plans(spec, full, HostReport(small=True, answered=("a", "b", "c")))
    assert got == PreflightPlans(full, {}, "no room for more on the hosts there (hosts[].slots)")


def test_a_host_not_answering_starts_the_group_without_it_and_is_watched():
    spec = spec_of(THREE)
    full = plan_for(spec)
    report = HostReport(small=True, answered=("a", "c"), absent={"b": NOT_ANSWERING})
    got = preflight_plans(spec, full, report)
    assert hosts(got.start) == ["a", "c"] and got.absent == {"b": NOT_ANSWERING}
    assert got.short_why == "b not answering"
    assert start_small(spec, full, report) == got.start  # what the backend probed is what the run starts with


def test_below_min_or_a_chief_host_absent_gives_no_plan():
    spec = spec_of(THREE.replace("min: 1", "min: 3"))
    assert start_small(spec, plan_for(spec), HostReport(small=True, absent={"b": NOT_ANSWERING})) == \
        "2 workers can start now, below tasks.worker.min=3"
    chief = spec_of(THREE.replace("tasks: {worker: {count: 3, min: 1}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}"))
    assert hosts(plan_for(chief))[0] == "a"
    assert start_small(chief, plan_for(chief), HostReport(small=True, absent={"a": NOT_ANSWERING})) is None
    assert without_dropped(chief, plan_for(chief), HostReport(small=True, absent={"a": DROPPED}, dropped=("a",))) is None


def test_hosts_whose_sessions_dropped_leave_the_plan_with_their_why():
    spec = spec_of(THREE)
    full = plan_for(spec)
    report = HostReport(small=True, answered=("a",), absent={"b": NOT_ANSWERING, "c": DROPPED}, dropped=("c",))
    got = preflight_plans(spec, full, report)
    assert hosts(got.start) == ["a"] and got.start == without_dropped(spec, full, report)
    assert got.absent == {"b": NOT_ANSWERING, "c": DROPPED}
    assert got.short_why == "b not answering; c dropped its sessions at the start"


def test_placed_by_gpus_the_run_starts_with_that_plan():
    """Not starting small: the whole spec placed by each host's GPUs, as gpu_replan places it."""
    spec = spec_of(OVERFILLED)
    full = plan_for(spec)
    found = {"a": a100(1), "b": a100(4), "c": a100(1)}
    report = HostReport(answered=("a", "b", "c"), gpus=found, by_gpus=True)
    got = preflight_plans(spec, full, report)
    assert got.start == build_plan(spec, gpu_replan(spec, full, found)[0])
    assert [t.host for t in got.start.tasks if t.type == "worker"] == ["a", "b", "b", "b", "b", "c"]
    assert (got.absent, got.short_why) == ({}, "")
    assert by_gpus(spec, full, report)[0] == got.start


def test_a_group_starting_small_placed_by_gpus_says_why_it_is_smaller():
    """b absent; a and c hold one GPU each: two workers of the three the hosts there were given."""
    spec = spec_of(SMALL_GPUS)
    full = plan_for(spec)
    report = HostReport(small=True, answered=("a", "c"), gpus={"a": a100(1), "c": a100(1)},
                        absent={"b": NOT_ANSWERING}, by_gpus=True)
    got = preflight_plans(spec, full, report)
    assert hosts(got.start) == ["a", "c"] and got.absent == {"b": NOT_ANSWERING}
    assert got.short_why == "b not answering; no GPU room for more on the hosts there"
    every = HostReport(small=True, answered=("a", "b", "c"), gpus={"a": a100(1), "b": a100(1), "c": a100(1)},
                       by_gpus=True)
    got = preflight_plans(spec, full, every)
    assert len(got.start.tasks) == 3 and got.short_why == "no GPU room for more on the hosts there"


def test_only_gpu_refusals_let_the_plan_be_placed_by_gpus():
    spec = spec_of(OVERFILLED)
    plan = plan_for(spec)
    found = {"a": a100(1), "b": a100(4), "c": a100(1)}
    refused = [p for h, g in found.items() for p in gpus.host_problems(plan, h, g)]
    assert refused and gpu_refusals_only(plan, found, (*refused, "no task was started"))
    assert not gpu_refusals_only(plan, found, (*refused, "host b: workdir /x does not exist there; create it"))
    assert not gpu_refusals_only(plan, {"a": a100(4), "b": a100(4), "c": a100(4)}, ("no task was started",))
