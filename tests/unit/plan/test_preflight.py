"""launcher/plan/preflight.py: the plans a preflight's typed HostReport gives, round after round
(a worker group with a min starting with the hosts that answered, sessions that dropped, the
placement by each host's GPUs, a container's machine), pure: reports made here as a preflight
would return them, no ssh, no docker. Every decision reads a report's kinds, never its words."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from launcher.app.up import plan_for
from launcher.loader.load import parse_spec
from launcher.plan import containergpus, gpus
from launcher.plan.build import Plan, build_plan
from launcher.plan.hostreport import Absent, AbsentKind, HostReport, Problem, ProblemKind, SharedMachine
from launcher.plan.preflight import ProbeAgain, Refused, Seen, StartWith, WaitForHosts, step
from launcher.plan.roundrobin import gpu_replan

NOT_ANSWERING, DROPPED = AbsentKind.NOT_ANSWERING, AbsentKind.DROPPED


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


def absent(host: str, kind: AbsentKind = NOT_ANSWERING, since: float = 10.0) -> Absent:
    return Absent(kind, host, since, f"host {host}: timed out after 3 s")


def test_no_report_or_one_that_passed_starts_with_the_allocation():
    spec = spec_of(OVERFILLED)
    full = plan_for(spec)
    assert step(spec, Seen(full), full, None)[1] == StartWith(None)
    assert step(spec, Seen(full), full, HostReport(answered=("a", "b", "c")))[1] == StartWith(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        HostReport().at = 1.0  # type: ignore[misc]


def test_a_group_starting_small_with_every_host_there_starts_with_the_full_plan():
    spec = spec_of(THREE)
    full = plan_for(spec)
    _, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "b", "c")))
    assert got == StartWith(full, (), "no room for more on the hosts there (hosts[].slots)")


def test_a_host_not_answering_is_probed_out_of_the_plan_then_watched():
    spec = spec_of(THREE)
    full = plan_for(spec)
    seen, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "c"), absent=(absent("b"),)))
    assert isinstance(got, ProbeAgain) and hosts(got.plan) == ["a", "c"] and got.line == ""
    # The next round probes that plan; b is not in it, and is no one's to dial again: still absent.
    seen, got = step(spec, seen, got.plan, HostReport(answered=("a", "c")))
    assert got == StartWith(got.plan, (absent("b"),), "b not answering") and hosts(got.plan) == ["a", "c"]


def test_a_host_that_answers_again_is_no_longer_absent_and_the_first_since_is_kept():
    spec = spec_of(THREE.replace("min: 1", "min: 3"))
    full = plan_for(spec)
    seen, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "c"), absent=(absent("b", since=1),)))
    assert got == WaitForHosts("2 workers can start now, below tasks.worker.min=3", (absent("b", since=1),))
    seen, got = step(spec, seen, full, HostReport(answered=("a", "c"), absent=(absent("b", since=2),)))
    assert seen.absent == (absent("b", since=1),)  # (since: when it was first found so)
    seen, got = step(spec, seen, full, HostReport(answered=("a", "b", "c")))
    assert got == StartWith(full, (), "no room for more on the hosts there (hosts[].slots)") and seen.absent == ()


def test_a_chief_host_absent_or_no_min_is_the_unreachable_error():
    chief = spec_of(THREE.replace("tasks: {worker: {count: 3, min: 1}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}"))
    full = plan_for(chief)
    assert hosts(full)[0] == "a"
    _, got = step(chief, Seen(full, small=True), full, HostReport(answered=("b", "c"), absent=(absent("a"),)))
    assert got == Refused(("host a: timed out after 3 s", "nothing was started: 1 of 3 hosts unreachable"))
    plain = spec_of(THREE.replace("tasks: {worker: {count: 3, min: 1}}", "tasks: {worker: 3}"))
    full = plan_for(plain)
    _, got = step(plain, Seen(full), full, HostReport(absent=(absent("c"), absent("a"))))
    assert got.lines == ("host a: timed out after 3 s", "host c: timed out after 3 s",
                         "nothing was started: 2 of 3 hosts unreachable")


def test_worker_hosts_whose_sessions_dropped_leave_the_plan_with_their_why():
    spec = spec_of(THREE)
    full = plan_for(spec)
    closed = "host c: the connection closed during preflight (sshd stopped, the host went down or the link dropped)"
    seen, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "c"), absent=(absent("b"),)))
    report = HostReport(answered=("a", "c"), problems=(Problem(ProblemKind.DROPPED, "c", closed),), at=20.0)
    seen, got = step(spec, seen, got.plan, report)
    assert isinstance(got, ProbeAgain) and hosts(got.plan) == ["a"]
    assert got.line == ("c: its sessions dropped during the preflight (a host shutting down?); starting without it")
    # c still accepts connections (a VM shutting down does, a while): it stays out all the same.
    seen, got = step(spec, seen, got.plan, HostReport(answered=("a", "c")))
    assert got == StartWith(got.plan, (absent("b"), Absent(DROPPED, "c", 20.0, closed)),
                            "b not answering; c dropped its sessions at the start")


def test_dropped_sessions_with_another_problem_or_on_a_chief_host_stand_as_the_error():
    spec = spec_of(THREE)
    full = plan_for(spec)
    dropped = Problem(ProblemKind.DROPPED, "c", "host c: preflight could not run (EOF); check the host")
    workdir = Problem(ProblemKind.OTHER, "b", "host b: workdir /x does not exist there; create it")
    _, got = step(spec, Seen(full, small=True), full, HostReport(problems=(dropped, workdir)))
    assert got == Refused((dropped.text, workdir.text, "no task was started"))
    chief = spec_of(THREE.replace("tasks: {worker: {count: 3, min: 1}}", "tasks: {chief: 1, worker: {count: 2, min: 1}}"))
    on_a = Problem(ProblemKind.DROPPED, "a", "host a: preflight could not run (EOF); check the host")
    _, got = step(chief, Seen(plan_for(chief), small=True), plan_for(chief), HostReport(problems=(on_a,)))
    assert got == Refused((on_a.text, "no task was started"))
    _, got = step(spec, Seen(full), full, HostReport(problems=(dropped,)))  # no min: not elastic
    assert isinstance(got, Refused)


def test_only_gpu_refusals_place_the_plan_by_the_hosts_gpus_once():
    """Not starting small: the whole spec placed by each host's GPUs, as gpu_replan places it."""
    spec = spec_of(OVERFILLED)
    full = plan_for(spec)
    found = {"a": a100(1), "b": a100(4), "c": a100(1)}
    refused = tuple(Problem(ProblemKind.GPU, h, p) for h, g in found.items() for p in gpus.host_problems(full, h, g))
    assert refused
    seen, got = step(spec, Seen(full), full, HostReport(answered=("a", "b", "c"), gpus=found, problems=refused))
    assert isinstance(got, ProbeAgain) and got.plan == build_plan(spec, gpu_replan(spec, full, found)[0])
    assert [t.host for t in got.plan.tasks if t.type == "worker"] == ["a", "b", "b", "b", "b", "c"]
    assert got.line == gpu_replan(spec, full, found)[1]
    _, start = step(spec, seen, got.plan, HostReport(answered=("a", "b", "c"), gpus=found))
    assert start == StartWith(got.plan)
    _, again = step(spec, seen, got.plan, HostReport(gpus=found, problems=refused))  # refused again: the error
    assert again == Refused((*[p.text for p in refused], "no task was started"))
    other = Problem(ProblemKind.OTHER, "b", "host b: workdir /x does not exist there; create it")
    _, mixed = step(spec, Seen(full), full, HostReport(gpus=found, problems=(*refused, other)))
    assert mixed == Refused((*[p.text for p in refused], other.text, "no task was started"))


def test_a_group_starting_small_placed_by_gpus_says_why_it_is_smaller():
    """b absent; a and c hold one GPU each: two workers of the three the hosts there were given."""
    spec = spec_of(SMALL_GPUS)
    full = plan_for(spec)
    seen, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "c"), absent=(absent("b"),)))
    found = {"a": a100(1), "c": a100(1)}
    refused = tuple(Problem(ProblemKind.GPU, h, p) for h, g in found.items() for p in gpus.host_problems(got.plan, h, g))
    seen, got = step(spec, seen, got.plan, HostReport(answered=("a", "c"), gpus=found, problems=refused))
    assert isinstance(got, ProbeAgain) and hosts(got.plan) == ["a", "c"]
    _, start = step(spec, seen, got.plan, HostReport(answered=("a", "c"), gpus=found))
    assert start.short_why == "b not answering; no GPU room for more on the hosts there"
    every = {"a": a100(1), "b": a100(1), "c": a100(1)}
    refused = tuple(Problem(ProblemKind.GPU, h, p) for h, g in every.items() for p in gpus.host_problems(full, h, g))
    seen, got = step(spec, Seen(full, small=True), full, HostReport(answered=("a", "b", "c"), gpus=every,
                                                                     problems=refused))
    _, start = step(spec, seen, got.plan, HostReport(answered=("a", "b", "c"), gpus=every))
    assert len(start.plan.tasks) == 3 and start.short_why == "no GPU room for more on the hosts there"


def test_ports_in_use_and_other_problems_are_the_error_line_by_line_with_their_keys():
    spec = spec_of(THREE)
    full = plan_for(spec)
    port = Problem(ProblemKind.PORT_IN_USE, "a", "port 7777 on host a is in use (worker:0); stop what holds it")
    unsafe = Problem(ProblemKind.OTHER, "b", "ssh.remote_dir: host b: writable by others", ("ssh", "remote_dir"))
    _, got = step(spec, Seen(full, small=True), full, HostReport(problems=(port, unsafe)))
    assert got == Refused((port.text, unsafe.text, "no task was started"), (None, ("ssh", "remote_dir"), None))
    assert got.error().lines == got.lines


def test_containers_get_the_machine_the_preflight_found():
    """docker: the plan made at plan time with this machine's cores and GPUs starts as it is where
    the engine's host has the same; other cores give another plan to probe; too few GPUs, one line."""
    text = "name: c\nbackend: docker\nentrypoint: x\nstrategy: multi_worker_mirrored\ntasks: {worker: 2}\n"
    spec = parse_spec(text)
    full = build_plan(spec, containergpus.placement(spec, a100(2), 4))
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in full.tasks] == ["0", "0"]  # one each, from 0 inside
    assert [t.env_dict["TF_NUM_INTRAOP_THREADS"] for t in full.tasks] == ["2", "2"]  # 4 cores shared
    machine = SharedMachine(containergpus.HOST, 4, a100(2))
    assert step(spec, Seen(full), full, HostReport(shared=machine))[1] == StartWith(None)
    _, got = step(spec, Seen(full), full, HostReport(shared=dataclasses.replace(machine, cores=8)))
    assert isinstance(got, ProbeAgain) and [t.env_dict["TF_NUM_INTRAOP_THREADS"] for t in got.plan.tasks] == ["4", "4"]
    assert step(spec, Seen(full), got.plan, HostReport(shared=dataclasses.replace(machine, cores=8)))[1] == \
        StartWith(got.plan)
    counted = parse_spec(text + "devices: {gpus_per_task: 1}\n")
    _, got = step(counted, Seen(full), full, HostReport(shared=dataclasses.replace(machine, gpus=a100(1))))
    assert isinstance(got, Refused) and got.lines[0].startswith(
        "docker: the Docker engine's host has 1 GPU; 2 tasks x gpus_per_task 1 need 2"), got
