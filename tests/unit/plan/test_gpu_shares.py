"""The equal-share arithmetic (gpuplace.shares) against TensorFlow's rules: every trainer of a
host gets the same count (ParameterServerStrategy's ``_set_num_gpus`` refuses "Mismatched number of
GPUs per worker"; MultiWorkerMirroredStrategy calls unequal devices undefined), shares are
disjoint unless there are fewer GPUs than tasks, and over several hosts the plan gives every
worker the same count; the launcher's CUDA_VISIBLE_DEVICES (indices or UUIDs) bounds the GPUs and
MIG devices are units, one per task; one_device gets one GPU; collective auto resolves to NCCL
only for owned GPUs."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings, strategies as st

from launcher.errors import SpecError
from launcher.plan import gpus, gputext
from launcher.plan.build import Placement, Slot, build_plan, task_keys
from launcher.loader.load import parse_spec
from launcher.remote import gpuplace


def units(n: int, prefix: str = "GPU") -> tuple:
    return tuple((i, "NVIDIA A100-SXM4-40GB", f"{prefix}-{i:08x}-1111-2222-3333-444444444444") for i in range(n))


def mig_units(n: int) -> tuple:
    """GPU 0 in MIG mode with ``n`` 1g.5gb devices (nvidia-smi -L's MIG lines, parsed)."""
    return tuple((0, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", f"MIG-{i:08x}-aaaa-bbbb-cccc-dddddddddddd") for i in range(n))


@settings(max_examples=300, deadline=None)
@given(count=st.integers(0, 16), trainers=st.integers(0, 9), others=st.integers(0, 2), cap=st.integers(0, 3))
def test_trainers_get_equal_disjoint_shares(count, trainers, others, cap):
    places, idle = gpuplace.shares(count, trainers, others, cap)
    assert len(places) == trainers + others
    got = [set(p) for p, _ in places]
    if count == 0:
        assert all(not g for g in got)
        return
    if trainers:
        sizes = {len(g) for g in got[:trainers]}
        assert len(sizes) == 1 and sizes.pop() >= 1  # equal, and every trainer has one
    if count >= trainers + others:  # enough for one each: disjoint, none shared
        assert all(not a & b for i, a in enumerate(got) for b in got[i + 1:])
        assert not any(shared for _, shared in places)
        assert all(g for g in got)  # the evaluator gets one too
        if cap and trainers:
            assert len(got[0]) <= cap
    if count >= trainers and trainers:  # trainers never share with each other
        assert all(not a & b for i, a in enumerate(got[:trainers]) for b in got[i + 1:trainers])
    used = set().union(*got) if got else set()
    assert used | set(idle) == set(range(count)) and not used & set(idle)
    if idle and not cap and trainers and others == 0:  # a remainder idles only below one more each
        assert len(idle) < trainers


PSS = """\
name: p
strategy: parameter_server
entrypoint: python -m worker
tasks: {chief: 1, ps: 2, worker: %d, evaluator: %d}
"""
MWMS = """\
name: g
strategy: multi_worker_mirrored
entrypoint: python -m worker
tasks: {worker: %d, evaluator: %d}
"""


def plan_over(text: str, hosts: dict[str, tuple], limits: dict[str, str] | None = None):
    """Tasks spread round-robin over ``hosts`` (name -> its units), whose GPUs the plan knows."""
    spec = parse_spec(textwrap.dedent(text))
    names = list(hosts)
    keys = [f"{t}:{i}" for t, i in task_keys(spec)]
    slots = {k: Slot(names[n % len(names)], names[n % len(names)]) for n, k in enumerate(keys)}
    return build_plan(spec, Placement(slots, gpus=hosts, gpu_limits=limits or {}))


@settings(max_examples=120, deadline=None)
@given(gpu_counts=st.lists(st.integers(1, 8), min_size=1, max_size=3), workers=st.integers(1, 6),
       evaluator=st.integers(0, 1), pss=st.booleans())
def test_every_worker_of_the_plan_gets_the_same_count_across_hosts(gpu_counts, workers, evaluator, pss):
    hosts = {f"vm{i}": units(n) for i, n in enumerate(gpu_counts)}
    text = (PSS if pss else MWMS) % (workers, evaluator)
    plan = plan_over(text, hosts)
    trainers = [t for t in plan.tasks if gpus.trains(plan.strategy, t.type)]
    assert len({len(t.gpus.ids) for t in trainers}) == 1  # TensorFlow's rule, every host
    assert all(t.gpus.ids for t in trainers)
    for host in hosts:  # disjoint on each host unless it has fewer GPUs than tasks
        mine = [t for t in plan.tasks if t.host == host and t.gpus.ids]
        if sum(len(t.gpus.ids) for t in mine) <= len(hosts[host]):
            ids = [i for t in mine for i in t.gpus.ids]
            assert len(ids) == len(set(ids))
    if not pss:
        owned = not any(t.gpus.shared for t in trainers)
        assert plan.tasks[0].env_dict.get("TFCLUSTER_COLLECTIVE") == ("nccl" if owned else None)


def test_pss_on_four_gpus_gives_the_workers_one_each_and_the_evaluator_the_rest():
    plan = plan_over(PSS % (2, 1), {"vm": units(4)})
    got = {t.key: t.env_dict.get("CUDA_VISIBLE_DEVICES") for t in plan.tasks}
    assert got == {"chief:0": "-1", "ps:0": "-1", "ps:1": "-1", "worker:0": "0", "worker:1": "1", "evaluator:0": "2,3"}


def test_three_workers_on_eight_gpus_get_two_each_and_plan_says_which_idle_and_why():
    plan = plan_over(MWMS % (3, 0), {"vm": units(8)})
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == ["0,1", "2,3", "4,5"]
    assert "; 6,7 idle: each worker gets the same count (TensorFlow's rule" in plan.gpus
    assert plan.gpus.endswith("collective nccl (auto: each worker owns its GPUs)")
    assert plan.tasks[0].env_dict["TFCLUSTER_COLLECTIVE"] == "nccl"


def test_the_smallest_host_decides_and_a_host_without_gpus_is_refused_naming_the_hosts():
    plan = plan_over(MWMS % (2, 0), {"vm1": units(4), "vm2": units(2)})
    assert [t.gpus.ids for t in plan.tasks] == [(0, 1), (0, 1)]  # vm1 would give 4: vm2's 2 decide
    with pytest.raises(SpecError) as err:
        plan_over(MWMS % (2, 0), {"vm1": units(4), "vm2": ()})
    assert str(err.value).startswith("gpus: the workers would get unequal GPU shares (vm1 4 GPUs, vm2 0 GPUs each)")


def test_collective_auto_is_ring_on_shared_gpus_and_on_cpu_and_an_explicit_value_wins():
    shared = plan_over(MWMS % (3, 0), {"vm": units(2)})
    assert "collective ring (auto: workers share GPUs" in shared.gpus
    assert "TFCLUSTER_COLLECTIVE" not in shared.tasks[0].env_dict  # TensorFlow's AUTO is RING
    cpu = plan_over(MWMS % (2, 0) + "devices: {gpus: 0}\n", {"vm": units(2)})
    assert "collective ring (auto: the workers run on CPU)" in cpu.gpus
    ring = plan_over(MWMS % (2, 0) + "collective: {implementation: ring}\n", {"vm": units(2)})
    assert ring.tasks[0].env_dict["TFCLUSTER_COLLECTIVE"] == "ring" and "collective ring (collective.implementation)" in ring.gpus


def test_a_uuid_limit_is_kept_and_tasks_get_subsets_named_by_uuid():
    host = units(4)
    limit = f"{host[3][2]},{host[1][2]}"
    plan = plan_over(MWMS % (2, 0), {"vm": host}, {"vm": limit})
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == [host[3][2], host[1][2]]
    assert "within CUDA_VISIBLE_DEVICES=" in plan.gpus
    plan = plan_over(MWMS % (2, 0), {"vm": host}, {"vm": "2,3"})  # indices stay indices
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == ["2", "3"]


def test_mig_devices_are_units_one_per_task_by_their_mig_uuid():
    plan = plan_over(MWMS % (2, 0), {"vm": mig_units(3)})
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == [mig_units(3)[0][2], mig_units(3)[1][2]]
    assert "collective ring (auto: the workers' GPUs are MIG devices" in plan.gpus
    one = plan_over(MWMS % (1, 0), {"vm": mig_units(3)})  # alone: still one (CUDA shows a process one)
    assert one.tasks[0].env_dict["CUDA_VISIBLE_DEVICES"] == mig_units(3)[0][2]
    with pytest.raises(SpecError, match="MIG devices, and CUDA gives a process one MIG device"):
        plan_over(MWMS % (1, 0) + "devices: {gpus_per_task: 2}\n", {"vm": mig_units(3)})


def test_one_device_gets_one_gpu_mirrored_all_of_them_within_the_limit():
    base = "name: o\nstrategy: %s\nentrypoint: python -m worker\n"
    one = plan_over(base % "one_device", {"localhost": units(4)})
    assert [t.env_dict.get("CUDA_VISIBLE_DEVICES") for t in one.tasks] == ["0"]
    assert "1,2,3 idle: one_device uses one GPU" in one.gpus
    mirrored = plan_over(base % "mirrored", {"localhost": units(4)}, {"localhost": "1,3"})
    assert [t.env_dict.get("CUDA_VISIBLE_DEVICES") for t in mirrored.tasks] == ["1,3"]


def test_within_reads_cuda_visible_devices_as_cuda_does():
    host = units(3)
    assert gpuplace.within(host, None) == (list(host), False)
    assert gpuplace.within(host, "2,0") == ([host[2], host[0]], False)
    assert gpuplace.within(host, "1,-1,2") == ([host[1]], False)  # stops at the first invalid entry
    assert gpuplace.within(host, host[1][2][:12]) == ([host[1]], True)  # a unique UUID prefix
    assert gpuplace.within(host, "GPU-0000")[0] == []  # ambiguous: none


def test_the_wrapper_makes_the_same_shares_on_its_host_within_its_limit_and_picks_nccl():
    """What the ssh task wrapper does on a host (gpuplace.complete): the equal shares, the host's
    own CUDA_VISIBLE_DEVICES as the limit (subsets named as it names them), NCCL for a
    multi_worker_mirrored trainer that owns its GPUs."""
    host = units(8)
    req = lambda place, n=3: gpuplace.format_request("auto", place, n, tasks=n, coll="pick")  # noqa: E731
    made = [gpuplace.complete({"M": req(p)}, list(host), "M", "MEM", "COLL")[0] for p in range(3)]
    assert [m["CUDA_VISIBLE_DEVICES"] for m in made] == ["0,1", "2,3", "4,5"]
    assert {m["COLL"] for m in made} == {"nccl"}
    limit = f"{host[5][2]},{host[6][2]}"
    got, _ = gpuplace.complete({"M": req(1, 2), "CUDA_VISIBLE_DEVICES": limit}, list(host), "M", "MEM", "COLL")
    assert got["CUDA_VISIBLE_DEVICES"] == host[6][2]
    shared, _ = gpuplace.complete({"M": req(2)}, list(units(2)), "M", "MEM", "COLL")
    assert "COLL" not in shared and shared["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # RING: TensorFlow's AUTO
    mig, _ = gpuplace.complete({"M": req(0, 2)}, list(mig_units(2)), "M", "MEM", "COLL")
    assert mig["CUDA_VISIBLE_DEVICES"] == mig_units(2)[0][2] and "COLL" not in mig


def test_the_ssh_preflight_refuses_hosts_that_would_give_workers_unequal_shares():
    spec = parse_spec(textwrap.dedent(MWMS % (2, 0)))
    slots = {"worker:0": Slot("vm1", "vm1"), "worker:1": Slot("vm2", "vm2")}
    plan = build_plan(spec, Placement(slots))  # the hosts' GPUs unknown: made where the tasks start
    assert all(t.gpus.ids is None for t in plan.tasks)
    assert "collective auto: nccl where each worker owns its GPUs" in plan.gpus
    assert gpus.hosts_problem(plan, {"vm1": units(2), "vm2": units(2)}) is None
    line = gpus.hosts_problem(plan, {"vm1": units(4), "vm2": units(2)})
    assert line.startswith("gpus: the workers would get unequal GPU shares (vm1 4 GPUs, vm2 2 GPUs each)")
    assert line.endswith("set devices.gpus_per_task: 2")
    assert gpus.hosts_problem(plan, {"vm1": mig_units(1), "vm2": units(1)}).startswith("collective auto: the workers on vm1")
    assert gpus.start_collective(plan, {"vm1": units(2), "vm2": units(2)}) == "collective nccl (auto: each worker owns its GPUs)"
    assert gpus.start_collective(plan, {"vm1": (), "vm2": ()}) == "collective ring (auto: the workers run on CPU)"


def test_a_hosts_failing_nvidia_smi_is_its_one_line_where_gpus_are_required():
    spec = parse_spec(textwrap.dedent(MWMS % (1, 0) + "devices: {gpus_per_task: 1}\n"))
    plan = build_plan(spec, Placement({"worker:0": Slot("vm1", "vm1")}))
    words = "nvidia-smi -L failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert gpus.host_problems(plan, "vm1", (), words) == [
        f"vm1: GPUs asked for (gpus_per_task 1) but {words}; install or load the NVIDIA driver there (nvidia-smi -L "
        "must list the GPUs), or run on CPU: devices.gpus_per_task: auto drops the requirement, devices.gpus: 0 every GPU"]


def test_a_groups_gpus_that_makes_the_trainers_unequal_is_refused_at_load():
    with pytest.raises(SpecError) as err:
        parse_spec("name: g\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\n"
                   "tasks: {chief: {count: 1, gpus: 2}, worker: 2}\n")
    assert str(err.value) == (
        "cluster.yaml:4: tasks.chief.gpus: gives the chief 2 GPU(s) and the worker auto (gpus_per_task); multi_worker_mirrored "
        "needs the same count on every task that trains (TensorFlow: otherwise undefined); set tasks.worker.gpus: 2 "
        "too, or drop tasks.chief.gpus")
    parse_spec("name: g\nstrategy: parameter_server\nentrypoint: python -m worker\n"  # the coordinator trains not
               "tasks: {chief: {count: 1, gpus: 1}, ps: 1, worker: 2}\n")


def test_status_shows_each_tasks_gpus_and_its_all_reduce():
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "TFCLUSTER_STRATEGY": "multi_worker_mirrored", "TFCLUSTER_COLLECTIVE": "nccl"}
    assert gputext.env_text(env.get) == "gpus 0,1 nccl"
    assert gputext.env_text({**env, "TFCLUSTER_COLLECTIVE": None}.get) == "gpus 0,1 ring"  # TensorFlow's AUTO
    mig = {**env, "CUDA_VISIBLE_DEVICES": mig_units(1)[0][2]}
    assert gputext.env_text(mig.get) == f"gpu {mig_units(1)[0][2][:12]} nccl"
    assert gputext.env_text({"CUDA_VISIBLE_DEVICES": "-1", "TFCLUSTER_STRATEGY": "multi_worker_mirrored"}.get) == "cpu"


def test_containers_get_their_mig_devices_and_uuid_limited_gpus_by_uuid():
    from tests.support.gpus import containers

    spec = parse_spec(textwrap.dedent(MWMS % (2, 0))).model_copy(update={"backend": "docker"})
    made, problems = containers(spec, mig_units(2))
    assert not problems
    assert [c.device_ids for c in made.values()] == [(mig_units(2)[0][2],), (mig_units(2)[1][2],)]
    assert {c.env["CUDA_VISIBLE_DEVICES"] for c in made.values()} == {"0"}  # numbered from 0 inside
    host = units(4)
    made, _ = containers(spec, host, None, f"{host[2][2]},{host[3][2]}")
    assert [c.device_ids for c in made.values()] == [(host[2][2],), (host[3][2],)]
    made, _ = containers(spec, host, None, "1,3")
    assert [c.device_ids for c in made.values()] == [(1,), (3,)]
