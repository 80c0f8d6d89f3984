"""GPU placement (launcher/plan/gpus.py, launcher/remote/gpuplace.py): each task's GPUs from its place on
its host, the roles without GPUs, sharing with memory growth, the one-line refusals, what ``plan``
shows, and the fake nvidia-smi's formats."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from launcher.plan import gpus
from launcher.contract import envnames
from launcher.errors import SpecError
from launcher.ui.plantext import render_plan
from launcher.plan.build import Placement, Slot, build_plan, task_keys
from launcher.remote import gpuplace, gpuquery
from launcher.loader.load import parse_spec
from tests.support.errors import one_error
from tests.support.gpus import FAKE


def a100(n: int) -> tuple:
    return tuple((i, "NVIDIA A100-SXM4-40GB", f"GPU-{i}") for i in range(n))


def spec_of(text: str):
    return parse_spec(textwrap.dedent(text))


def plan_on(text: str, hosts: dict[str, int] | None = None, where=None):
    """The plan with every task on ``where(key)`` (default "h1") and the hosts' GPU counts known
    (``hosts``: name -> count; a host left out is completed where its tasks start)."""
    spec = spec_of(text)
    place = where or (lambda key: "h1")
    slots = {f"{t}:{i}": Slot(place(f"{t}:{i}"), place(f"{t}:{i}")) for t, i in task_keys(spec)}
    return build_plan(spec, Placement(slots, gpus={h: a100(n) for h, n in (hosts or {}).items()}))


MWMS = """\
    name: g
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: %d}
"""
PSS = """\
    name: p
    strategy: parameter_server
    entrypoint: python -m worker
    tasks: {chief: 1, ps: 2, worker: 2, evaluator: 1}
"""


def cvd(plan) -> dict[str, str]:
    return {t.key: t.env_dict.get("CUDA_VISIBLE_DEVICES", "unset") for t in plan.tasks}


# ---------------------------------------------------------------- the arithmetic


@pytest.mark.parametrize("n, host, expected", [
    (1, 4, [[0, 1, 2, 3]]),              # alone: every GPU
    (2, 4, [[0, 1], [2, 3]]),
    (3, 4, [[0], [1], [2]]),             # equal shares: the remainder idles (TensorFlow's rule)
    (3, 8, [[0, 1], [2, 3], [4, 5]]),
    (4, 4, [[0], [1], [2], [3]]),
    (3, 2, [[0], [1], [0]]),             # more tasks than GPUs: round-robin, shared
])
def test_auto_divides_the_hosts_gpus(n, host, expected):
    got = [gpuplace.resolve(gpuplace.parse_request(gpuplace.format_request("auto", i, n, 0, n)), list(range(host)))
           for i in range(n)]
    assert [ids for ids, _s, _p in got] == expected
    assert [shared for _i, shared, _p in got] == [n > host and ids[0] == 0 for ids, _s, _p in got]  # GPU 0 twice
    assert all(problem is None for _i, _s, problem in got)


def test_counts_are_disjoint_by_offset_and_refused_past_the_host():
    req = lambda off: gpuplace.parse_request(gpuplace.format_request(2, offset=off, tasks=3))  # noqa: E731
    assert [gpuplace.resolve(req(o), [0, 1, 2, 3, 4, 5])[0] for o in (0, 2, 4)] == [[0, 1], [2, 3], [4, 5]]
    assert gpuplace.resolve(req(4), [0, 1, 2, 3])[2] == "has 4 GPUs; its GPU tasks need 6"


def test_request_text_round_trips_and_rejects_garbage():
    text = gpuplace.format_request("auto", 1, 3, 2, 4, "0,2", True, "2048", "nccl")
    assert gpuplace.parse_request(text) == {"take": "auto", "place": 1, "n": 3, "offset": 2, "tasks": 4,
                                            "use": "0,2", "need": True, "mem": "2048", "coll": "nccl",
                                            "trainers": 3, "cap": 0}
    text = gpuplace.format_request("auto", 2, 3, trainers=2, cap=1)
    assert (gpuplace.parse_request(text)["trainers"], gpuplace.parse_request(text)["cap"]) == (2, 1)
    assert gpuplace.parse_request("") is None and gpuplace.parse_request("take=lots") is None


def test_complete_sets_cuda_memory_and_removes_the_marker_the_env_winning():
    marker = envnames.GPUS
    env = {marker: gpuplace.format_request("auto", 2, 3, tasks=3, mem="auto"), "X": "1"}
    out, problem = gpus.complete(env, a100(2))  # the third of 3 tasks on 2 GPUs: GPU 0, shared
    assert problem is None and marker not in out
    assert out == {"X": "1", "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                   "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    out, _ = gpus.complete({marker: gpuplace.format_request("auto", 1, 3, tasks=3)}, a100(2))
    assert out["CUDA_VISIBLE_DEVICES"] == "1" and "TF_FORCE_GPU_ALLOW_GROWTH" not in out  # GPU 1 is its own
    mine = {**env, "TF_FORCE_GPU_ALLOW_GROWTH": "false", "CUDA_VISIBLE_DEVICES": "1"}
    out, _ = gpus.complete(mine, a100(2))  # the host's CUDA_VISIBLE_DEVICES is a limit: a subset of it
    assert out["TF_FORCE_GPU_ALLOW_GROWTH"] == "false" and out["CUDA_VISIBLE_DEVICES"] == "1"
    out, _ = gpus.complete({**env, "CUDA_VISIBLE_DEVICES": "7"}, a100(2))  # names no GPU here: none
    assert out["CUDA_VISIBLE_DEVICES"] == "-1"
    out, _ = gpus.complete({marker: gpuplace.format_request(1, mem="3000")}, a100(1))
    assert out[envnames.GPU_MEMORY] == "3000" and "TF_FORCE_GPU_ALLOW_GROWTH" not in out
    out, problem = gpus.complete({marker: gpuplace.format_request(1, offset=1, tasks=2)}, a100(1))
    assert problem == "has 1 GPU; its GPU tasks need 2"
    assert gpus.complete({"X": "1"}, a100(1)) == ({"X": "1"}, None)  # no request: unchanged
    out, problem = gpus.complete({marker: gpuplace.format_request("auto")}, ())  # no GPU: CPU
    assert problem is None and out == {}


# ---------------------------------------------------------------- the plan


def test_workers_get_disjoint_gpus_and_plan_shows_them():
    plan = plan_on(MWMS % 4 + "    devices: {gpus_per_task: 2}\n", {"h1": 8})
    assert cvd(plan) == {"worker:0": "0,1", "worker:1": "2,3", "worker:2": "4,5", "worker:3": "6,7"}
    text = render_plan(plan)
    assert "  worker:1  h1    gpus 2,3  " in text
    assert "gpus: gpus_per_task 2, gpu_memory auto; h1: 8 GPUs (NVIDIA A100-SXM4-40GB) for 4 GPU tasks" in text
    assert all("TF_FORCE_GPU_ALLOW_GROWTH" not in t.env_dict for t in plan.tasks)


def test_each_host_counts_its_own_tasks():
    plan = plan_on(MWMS % 4, {"h1": 2, "h2": 1}, where=lambda key: "h1" if key in ("worker:0", "worker:2") else "h2")
    assert cvd(plan) == {"worker:0": "0", "worker:2": "1", "worker:1": "0", "worker:3": "0"}
    assert [t.gpus.shared for t in plan.tasks] == [False, True, False, True]
    assert [t.env_dict.get("TF_FORCE_GPU_ALLOW_GROWTH") for t in plan.tasks] == [None, "true", None, "true"]


def test_pss_ps_and_chief_get_none_unless_their_group_says():
    plan = plan_on(PSS, {"h1": 2})
    assert cvd(plan) == {"chief:0": "-1", "ps:0": "-1", "ps:1": "-1", "worker:0": "0", "worker:1": "1",
                         "evaluator:0": "0"}  # 3 GPU tasks on 2 GPUs: the evaluator shares GPU 0
    assert plan.task("evaluator:0").gpus.shared and plan.task("worker:1").gpus.shared is False
    plan = plan_on(PSS.replace("ps: 2", "ps: {count: 2, gpus: 1}"), {"h1": 4})
    assert cvd(plan) == {"chief:0": "-1", "ps:0": "0", "ps:1": "1", "worker:0": "2", "worker:1": "3",
                         "evaluator:0": "2"}
    plan = plan_on(MWMS % 2 + "    tasks: {chief: 1, worker: 1}\n".replace("tasks", "devices").replace(
        "{chief: 1, worker: 1}", "{gpus_per_task: 1}"), {"h1": 2})
    assert cvd(plan) == {"worker:0": "0", "worker:1": "1"}


def test_sync_strategies_chief_uses_a_gpu():
    plan = plan_on(MWMS.replace("{worker: %d}", "{chief: 1, worker: 1}"), {"h1": 2})
    assert cvd(plan) == {"chief:0": "0", "worker:0": "1"}


def test_memory_settings_and_env_wins():
    assert plan_on(MWMS % 2 + "    devices: {gpu_memory: growth}\n", {"h1": 2}).tasks[0].env_dict[
        "TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    env = plan_on(MWMS % 2 + "    devices: {gpu_memory: 4096}\n", {"h1": 1}).tasks[1].env_dict
    assert env[envnames.GPU_MEMORY] == "4096" and "TF_FORCE_GPU_ALLOW_GROWTH" not in env  # a limit, not growth
    env = plan_on(MWMS % 2 + "    devices: {gpu_memory: all}\n", {"h1": 1}).tasks[1].env_dict
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in env and env["CUDA_VISIBLE_DEVICES"] == "0"
    env = plan_on(MWMS % 2 + "    env: {TF_FORCE_GPU_ALLOW_GROWTH: 'false'}\n", {"h1": 1}).tasks[1].env_dict
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    plan = plan_on(PSS + "    env: {CUDA_VISIBLE_DEVICES: '3'}\n", {"h1": 2})  # the spec's env: no placement
    assert set(cvd(plan).values()) == {"3"} and "as the spec's env sets" in plan.gpus


def test_devices_gpus_limits_what_the_run_may_use():
    plan = plan_on(MWMS % 2 + "    devices: {gpus: [1, 3]}\n", {"h1": 4})
    assert cvd(plan) == {"worker:0": "1", "worker:1": "3"}
    plan = plan_on(MWMS % 2 + "    devices: {gpus: 0}\n", {"h1": 4})
    assert set(cvd(plan).values()) == {"-1"}
    msg = str(pytest.raises(SpecError, plan_on, MWMS % 2 + "    devices: {gpus: [1, 3]}\n", {"h1": 2}).value)
    assert msg == "h1 has 2 GPUs (0,1), not GPU 3 that devices.gpus asks for; fix devices.gpus or the host's GPUs"


def test_too_few_gpus_is_one_line_naming_the_host_and_counts():
    with pytest.raises(SpecError) as err:
        plan_on(MWMS % 3 + "    devices: {gpus_per_task: 1}\n", {"h1": 4, "vm2": 1},
                where=lambda key: "h1" if key == "worker:0" else "vm2")
    assert str(err.value) == ("vm2 has 1 GPU; 2 tasks x gpus_per_task 1 need 2; put fewer GPU tasks on it "
                              "(tasks.<type>.hosts, hosts[].slots), lower the count, or set devices.gpus_per_task: "
                              "auto to share")
    with pytest.raises(SpecError) as err:
        plan_on(PSS.replace("ps: 2", "ps: {count: 1, gpus: 1}") + "    devices: {gpus_per_task: 2}\n", {"h1": 4})
    assert str(err.value).startswith("h1 has 4 GPUs; 3 tasks x gpus_per_task 2 + ps:0 x tasks.ps.gpus 1 need 7;")


def test_a_host_without_gpus_runs_on_cpu_said_once_unless_required():
    plan = plan_on(MWMS % 2, {"h1": 0})
    assert cvd(plan) == {"worker:0": "unset", "worker:1": "unset"}
    assert "; no GPU found (h1: nvidia-smi -L lists none): its 2 GPU tasks run on CPU; collective ring (auto: the workers run on CPU)" in plan.gpus
    assert "gpus" not in render_plan(plan).splitlines()[1]  # no column: nothing to show per task
    with pytest.raises(SpecError, match="^h1 has 0 GPUs; 2 tasks x gpus_per_task 1 need 2;"):
        plan_on(MWMS % 2 + "    devices: {gpus_per_task: 1}\n", {"h1": 0})


def test_sharing_under_nccl_is_refused():
    with pytest.raises(SpecError) as err:
        plan_on(MWMS % 3 + "    collective: {implementation: nccl}\n", {"h1": 2})
    assert str(err.value) == ("h1: its 3 GPU tasks would share a GPU between tasks, and NCCL refuses two ranks on "
                              "one GPU (Duplicate GPU detected); put fewer GPU tasks on it, give it more GPUs, or "
                              "set collective.implementation: ring")
    plan = plan_on(MWMS % 2 + "    collective: {implementation: nccl, timeout: 90}\n", {"h1": 2})
    assert cvd(plan) == {"worker:0": "0", "worker:1": "1"}
    assert plan.tasks[0].env_dict[envnames.COLLECTIVE] == "nccl"
    assert plan.tasks[0].env_dict[envnames.COLLECTIVE_TIMEOUT] == "90"
    with pytest.raises(SpecError):
        plan_on(MWMS % 2 + "    devices: {gpus_per_task: all}\n    collective: {implementation: nccl}\n", {"h1": 2})


def test_unknown_hosts_carry_the_request_and_the_backend_completes_it():
    plan = plan_on(MWMS % 3 + "    devices: {gpus_per_task: 1, gpu_memory: 2048}\n",
                   where=lambda key: "a" if key != "worker:2" else "b")
    reqs = [gpuplace.parse_request(t.env_dict[envnames.GPUS]) for t in plan.tasks]
    assert [(r["take"], r["offset"], r["mem"]) for r in reqs] == [("1", 0, "2048"), ("1", 1, "2048"), ("1", 0, "2048")]
    assert all("CUDA_VISIBLE_DEVICES" not in t.env_dict and t.gpus.ids is None for t in plan.tasks)
    assert "  worker:0  a     1 gpu (at start)  " in render_plan(plan)
    assert gpus.host_problems(plan, "a", a100(2)) == []
    assert gpus.host_problems(plan, "a", a100(1)) == [
        "a has 1 GPU; 2 tasks x gpus_per_task 1 need 2; put fewer GPU tasks on it (tasks.<type>.hosts, "
        "hosts[].slots), lower the count, or set devices.gpus_per_task: auto to share"]
    made = [gpus.complete(t.env_dict, a100(2))[0] for t in plan.tasks]
    assert [m["CUDA_VISIBLE_DEVICES"] for m in made] == ["0", "1", "0"]
    assert all(m[envnames.GPU_MEMORY] == "2048" and envnames.GPUS not in m for m in made)


def test_local_backend_plan_reads_nvidia_smi(monkeypatch, tmp_path):
    from launcher.app.up import plan_for
    from tests.support.gpus import fake_gpus

    fake_gpus(monkeypatch, tmp_path, 2)
    plan = plan_for(spec_of(PSS))
    assert cvd(plan) == {"chief:0": "-1", "ps:0": "-1", "ps:1": "-1", "worker:0": "0", "worker:1": "1",
                         "evaluator:0": "0"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # hidden from the launcher: hidden from its tasks
    assert cvd(plan_for(spec_of(MWMS % 2))) == {"worker:0": "1", "worker:1": "1"}


# ---------------------------------------------------------------- spec keys


@pytest.mark.parametrize("extra, problem", [
    ("devices: {gpus_per_task: 0}", "devices.gpus_per_task: 0 is not valid; use auto"),
    ("devices: {gpu_memory: lots}", "devices.gpu_memory: 'lots' is not valid; use auto"),
    ("collective: {implementation: mpi}", "collective.implementation: 'mpi' is not valid; use one of 'auto', 'ring' or 'nccl'"),
    ("collective: {timeout: 0}", "collective.timeout:"),
    ("tasks: {worker: {count: 2, gpus: -1}}", "tasks.worker.gpus: must be a whole number >= 0"),
    ("hosts: [{name: a, slots: 0}]", "hosts[0].slots: must be a whole number >= 1"),
    ("devices: {gpus: 0}\ntasks: {worker: {count: 1, gpus: 1}}", "tasks.worker.gpus: devices.gpus 0 lets no task"),
])
def test_bad_gpu_keys_are_one_line(extra, problem):
    base = "name: g\nstrategy: multi_worker_mirrored\nentrypoint: x\n"
    text = base + ("tasks: {worker: 2}\n" if not extra.startswith("tasks") and "\ntasks" not in extra else "") + extra + "\n"
    assert problem in one_error(text)


def test_collective_only_for_mwms():
    text = textwrap.dedent(PSS) + "collective: {implementation: ring}\n"
    assert "collective: only multi_worker_mirrored runs collectives" in one_error(text)


def test_slots_bound_the_tasks_per_host():
    text = """\
        name: s
        strategy: multi_worker_mirrored
        backend: ssh
        entrypoint: x
        hosts: [{name: a, slots: 1}, {name: b, slots: 3}]
        tasks: {worker: 4}
    """
    from launcher.app.up import plan_for

    assert [t.host for t in plan_for(spec_of(text)).tasks] == ["a", "b", "b", "b"]  # a full: skipped
    with pytest.raises(SpecError) as err:
        plan_for(spec_of(text.replace("worker: 4", "worker: 5")))
    assert str(err.value) == ("hosts[].slots: the tasks do not fit: a (2 tasks, 1 slot); add hosts, raise their "
                              "slots, or place fewer tasks there (tasks.<type>.hosts)")


SSH4 = """\
    name: s
    strategy: parameter_server
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {chief: 1, ps: 1, worker: 6}
    devices: {gpus_per_task: 1}
"""


def test_ssh_replans_by_gpu_counts_when_the_round_robin_over_fills_a_host():
    """a has 1 GPU, b 4, c 1: the round-robin gives each host two workers; a and c cannot hold
    two GPU-count tasks, b has room: placed by GPUs, the CPU roles (chief, ps) kept round-robin."""
    from launcher.plan.roundrobin import gpu_replan
    from launcher.app.up import plan_for

    spec = spec_of(SSH4)
    plan = plan_for(spec)
    # The round-robin's counts, each host's workers in one block (ranks in blocks).
    assert [t.host for t in plan.tasks if t.type == "worker"] == ["a", "a", "b", "b", "c", "c"]
    found = {"a": a100(1), "b": a100(4), "c": a100(1)}
    placement, line = gpu_replan(spec, plan, found)
    replanned = build_plan(spec, placement)
    workers = [t.host for t in replanned.tasks if t.type == "worker"]
    # The round-robin skipping the full hosts (a 1, b 4, c 1), in blocks.
    assert workers == ["a", "b", "b", "b", "b", "c"], workers
    assert [t.host for t in replanned.tasks if t.type in ("chief", "ps")] == ["a", "c"]  # unbounded by GPUs
    assert not any(gpus.host_problems(replanned, h, g) for h, g in found.items())
    assert line == ("gpus: round-robin would over-fill a 1 GPU for 2, c 1 GPU for 2 GPU-count tasks; placed by each "
                    "host's GPUs instead (GPU tasks: a 1, b 4, c 1); set hosts[].slots to place them yourself")


@pytest.mark.parametrize("found, why", [
    ({"a": a100(2), "b": a100(2), "c": a100(2)}, "nothing over-filled"),
    ({"a": a100(1), "b": a100(2), "c": a100(1)}, "4 GPUs for 6 tasks: the refusal stands"),
    ({"a": a100(1), "b": None, "c": a100(4)}, "a host's GPUs unknown"),
])
def test_ssh_replan_only_when_it_helps(found, why):
    from launcher.plan.roundrobin import gpu_replan
    from launcher.app.up import plan_for

    spec = spec_of(SSH4)
    assert gpu_replan(spec, plan_for(spec), found) is None, why


SSH_MWMS = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {worker: 3}
"""


def test_ssh_hosts_with_unequal_gpus_give_every_worker_the_smallest_hosts_share():
    """a has 4 GPUs, b 2, c 4: one worker on each would get 4, 2, 4 (TensorFlow needs them equal).
    As where the plan knows every host, the smallest decides: every request carries cap 2, so each
    host's wrapper gives its worker 2 (the others' extra GPUs idle), said in one line."""
    from launcher.plan.roundrobin import gpu_replan
    from launcher.app.up import plan_for

    spec = spec_of(SSH_MWMS)
    plan = plan_for(spec)
    found = {"a": a100(4), "b": a100(2), "c": a100(4)}
    assert gpus.hosts_problem(plan, found).startswith("gpus: the workers would get unequal GPU shares")
    placement, line = gpu_replan(spec, plan, found)
    assert placement.gpu_cap == 2
    replanned = build_plan(spec, placement)
    assert [t.host for t in replanned.tasks] == [t.host for t in plan.tasks]  # the same hosts, capped
    assert gpus.hosts_problem(replanned, found) is None
    given = {t.host: gpuplace.resolve(gpuplace.parse_request(t.gpus.request), list(found[t.host]))[0]
             for t in replanned.tasks}
    assert {h: [g[0] for g in got] for h, got in given.items()} == {"a": [0, 1], "b": [0, 1], "c": [0, 1]}
    assert line == ("gpus: the workers would get unequal GPU shares (a 4 GPUs, b 2 GPUs, c 4 GPUs each); the smallest "
                    "host decides: every worker gets 2 GPUs (TensorFlow needs the same count on every worker), the "
                    "others idle on a, c; set devices.gpus_per_task to choose")
    # A host that would give its worker none while others give some stays refused (its line stands).
    assert gpu_replan(spec, plan, {"a": a100(4), "b": (), "c": a100(4)}) is None
    assert gpu_replan(spec, plan, {"a": a100(2), "b": a100(2), "c": a100(2)}) is None  # equal: nothing to do


def test_ssh_replan_keeps_hosts_with_slots_and_auto_is_not_bounded():
    from launcher.plan.roundrobin import gpu_replan, round_robin
    from launcher.app.up import plan_for

    slotted = spec_of(SSH4.replace("{name: a}", "{name: a, slots: 3}"))
    assert gpu_replan(slotted, plan_for(slotted), {"a": a100(1), "b": a100(4), "c": a100(4)}) is None  # a: its slots
    auto = spec_of(SSH4.replace("gpus_per_task: 1", "gpus_per_task: auto"))
    assert round_robin(auto, {"a": 1, "b": 4, "c": 1}) == round_robin(auto)  # auto shares: no count to bound
    assert gpus.gpu_room(spec_of(SSH4.replace("{gpus_per_task: 1}", "{gpus_per_task: 1, gpus: [0, 1]}")),
                         {"a": a100(4), "b": (), "c": None}) == {"a": 2, "b": 0}


SMALL = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: x
    hosts: [{name: a}, {name: b}, {name: c}]
    tasks: {worker: {count: 4, min: 1}}
    devices: {gpus_per_task: 1}
"""


def test_a_group_starting_small_is_replanned_by_gpus_over_the_hosts_that_answered_only():
    """b does not answer at `up`: the group starts as a's two workers and c's one. a has 1 GPU, c
    2: placed by GPUs over a and c only (the full group's placement put a worker on b, which is
    not there), with the three workers of the start plan, not the spec's four."""
    from launcher.app.up import plan_for
    from launcher.plan.roundrobin import gpu_replan
    from launcher.plan.elastic import start_without, with_workers

    spec = spec_of(SMALL)
    full = plan_for(spec)
    assert [t.host for t in full.tasks] == ["a", "a", "b", "c"]
    start = start_without(spec, full, ["b"]).plan
    assert [t.host for t in start.tasks] == ["a", "a", "c"]
    found = {"a": a100(1), "c": a100(2)}
    every, _ = gpu_replan(spec, start, found)  # the full group's placement, over every host: onto b, not there
    assert "b" in {slot.host for slot in every.slots.values()} and len(every.slots) == 4
    placement, line = gpu_replan(spec, start, found, smallest=1)
    assert sorted(placement.slots) == ["worker:0", "worker:1", "worker:2"]
    replanned = build_plan(with_workers(spec, 3), placement)
    assert [t.host for t in replanned.tasks] == ["a", "c", "c"]
    assert not any(gpus.host_problems(replanned, h, g) for h, g in found.items())
    assert line == ("gpus: round-robin would over-fill a 1 GPU for 2 GPU-count tasks; placed by each host's GPUs "
                    "instead (GPU tasks: a 1, c 2); set hosts[].slots to place them yourself")


def test_a_group_starting_small_starts_with_what_the_gpus_there_hold_down_to_min():
    """a and c have 1 GPU each: the three workers of the start plan do not fit, two do (min 1);
    below min nothing fits and the preflight's refusal stands."""
    from launcher.app.up import plan_for
    from launcher.plan.roundrobin import gpu_replan
    from launcher.plan.elastic import start_without

    spec = spec_of(SMALL)
    start = start_without(spec, plan_for(spec), ["b"]).plan
    found = {"a": a100(1), "c": a100(1)}
    placement, line = gpu_replan(spec, start, found, smallest=1)
    assert sorted((k, s.host) for k, s in placement.slots.items()) == [("worker:0", "a"), ("worker:1", "c")]
    assert line.endswith("(GPU tasks: a 1, c 1); the hosts there hold 2 of the 3 workers now (the group grows as "
                         "hosts answer); set hosts[].slots to place them yourself"), line
    assert gpu_replan(spec, start, found, smallest=3) is None  # min 3: the refusal stands
    grouped = spec_of(SMALL.replace("{count: 4, min: 1}", "{count: 4, min: 1, hosts: [b]}"))
    assert gpu_replan(grouped, start, found, smallest=1) is None  # the group's only host is not there


# ---------------------------------------------------------------- the fake nvidia-smi


def test_fake_nvidia_smi_prints_nvidias_formats(tmp_path):
    env = {"FAKE_NVIDIA_SMI_GPUS": "2", "FAKE_NVIDIA_SMI_APPS": "4242:1234,4343:50", "PATH": "/usr/bin:/bin"}
    run = lambda *a: subprocess.run([str(FAKE), *a], capture_output=True, text=True, env=env, timeout=20)  # noqa: E731
    listing = run("-L").stdout
    assert gpuquery.parse_list(listing) == [(0, "NVIDIA A100-SXM4-40GB", "GPU-2b3c1f9e-1d2e-4f3a-9b8c-5d6e7f809a1b"),
                                            (1, "NVIDIA A100-SXM4-40GB", "GPU-2b3c1f9f-1d2e-4f3a-9b8c-5d6e7f809a1c")]
    assert listing.splitlines()[0] == "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-2b3c1f9e-1d2e-4f3a-9b8c-5d6e7f809a1b)"
    apps = run("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").stdout
    assert apps.splitlines() == ["4242, 1234", "4343, 50"]
    gpu = run("--query-gpu=index,memory.used,utilization.gpu", "--format=csv,noheader,nounits").stdout
    assert gpu.splitlines() == ["0, 1284, 37", "1, 0, 0"]
    env["FAKE_NVIDIA_SMI_GPUS"] = "0"
    none = run("-L")
    assert none.returncode == 6 and gpuquery.parse_list(none.stdout) == []


def real_outputs():
    """The real nvidia-smi's answers to the launcher's three queries, read on an H100 (data/)."""
    out, command = {}, None
    for line in (Path(__file__).parent / "data" / "nvidia-smi-h100.txt").read_text().splitlines():
        if line.startswith("$ nvidia-smi "):
            command = line[len("$ nvidia-smi "):]
            out[command] = ""
        elif command is not None:
            out[command] += line + "\n"
    return out


def test_the_real_nvidia_smis_answers_parse_and_the_fake_answers_in_their_shape():
    real = real_outputs()
    apps_query, gpus_query = " ".join(gpuquery.APPS_QUERY[1:]), " ".join(gpuquery.GPUS_QUERY[1:])
    assert set(real) == {"-L", apps_query, gpus_query}  # the recording is of the queries the launcher makes
    assert gpuquery.parse_list(real["-L"]) == [(0, "NVIDIA H100 80GB HBM3", "GPU-b7566d77-1004-aa69-ffa2-0e54f19979be")]
    assert gpuquery.parse_apps(real[apps_query]) == {474: 838}
    assert gpuquery.parse_gpus(real[gpus_query]) == {0: 0}
    env = {"FAKE_NVIDIA_SMI_GPUS": "1", "FAKE_NVIDIA_SMI_APPS": "4242:1234", "PATH": "/usr/bin:/bin"}
    shape = lambda text: [re.sub(r"[0-9a-f]{4,}|\d+", "N", re.sub(r"\(UUID: .*\)", "(UUID)", re.sub(  # noqa: E731
        r"^GPU (\d+): .* \(", r"GPU \1: NAME (", line))) for line in text.splitlines()]
    for command, text in real.items():
        fake = subprocess.run([str(FAKE), *command.split()], capture_output=True, text=True, env=env, timeout=20)
        assert fake.returncode == 0 and shape(fake.stdout) == shape(text), (command, fake.stdout, text)


def test_parse_list_gives_a_mig_gpus_devices_as_units():
    text = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaa)\n"
            "  MIG 1g.5gb      Device  0: (UUID: MIG-bbb)\n"
            "  MIG 1g.5gb      Device  1: (UUID: MIG-ddd)\n"
            "GPU 1: Tesla T4 (UUID: GPU-ccc)\n")
    assert gpuquery.parse_list(text) == [(0, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-bbb"),
                                         (0, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-ddd"),
                                         (1, "Tesla T4", "GPU-ccc")]
    old_driver = ("GPU 0: A100-SXM4-40GB (UUID: GPU-aaa)\n"  # drivers before R470 named MIG devices this way
                  "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-aaa/7/0)\n")
    assert gpuquery.parse_list(old_driver) == [(0, "A100-SXM4-40GB MIG 1g.5gb", "MIG-GPU-aaa/7/0")]


def test_discovery_output_carries_slots():
    from launcher.loader.discovery import DiscoveryError, parse_hosts

    hosts = parse_hosts('[{"name": "vm1", "address": "10.0.0.2", "slots": 2}, {"name": "vm2"}]')
    assert [(h.name, h.slots) for h in hosts] == [("vm1", 2), ("vm2", None)]
    with pytest.raises(DiscoveryError, match="slots"):
        parse_hosts('[{"name": "vm1", "slots": 0}]')


def test_a_refusal_carries_the_key_it_is_about_typed():
    """The error's position comes with the refusal where it is made (gpurefusal.Refusal), never
    from its words: a group's own gpus, devices.gpus where it bounds the GPUs, gpus_per_task."""
    def keys(text: str, gpus_known: int) -> tuple:
        with pytest.raises(SpecError) as got:
            plan_on(text, {"h1": gpus_known})
        return got.value.keys

    own = MWMS % 2 + "    devices: {gpus_per_task: auto}\n    tasks: {worker: {count: 2, gpus: 2}}\n"
    assert keys(own.replace("    tasks: {worker: 2}\n", ""), 1) == (("tasks", "worker", "gpus"),)
    bounded = MWMS % 2 + "    devices: {gpus: [0], gpus_per_task: 1}\n"
    assert keys(bounded, 4) == (("devices", "gpus"),)
    counted = MWMS % 2 + "    devices: {gpus_per_task: 1}\n"
    assert keys(counted, 1) == (("devices", "gpus_per_task"),)
    _, _, problems = gpus.plan_gpus(spec_of(counted), ["h1", "h1"], ["worker", "worker"], {"h1": a100(1)})
    assert problems[0].startswith("h1 has 1 GPU; 2 tasks x gpus_per_task 1 need 2")  # (the line itself: a str)
    assert problems[0].key == ("devices", "gpus_per_task")


def test_a_refusal_is_chosen_by_its_problems_kind_never_its_words():
    """gpuplace says why a request cannot be met as a typed Problem; the planner's line (its
    fix, its spec key) follows the kind: the same words under another kind get another line."""
    from launcher.plan.gpurefusal import refusal
    words = "would share a GPU between tasks, and NCCL refuses two ranks on one GPU (Duplicate GPU detected)"
    nccl = refusal(None, "vm1", [], [0], "all", gpuplace.PlacementProblem(words, gpuplace.NCCL))
    other = refusal(None, "vm1", [], [0], "all", gpuplace.PlacementProblem(words, gpuplace.MIG))
    assert "collective.implementation: ring" in nccl and nccl.key == ("devices", "gpus_per_task")
    assert "collective.implementation: ring" not in other and other.key == ("devices", "gpus")
    _ids, _shared, problem = gpuplace.resolve(gpuplace.parse_request(gpuplace.format_request(2)), [0])
    assert problem.kind == gpuplace.SHORT and str(problem) == "has 1 GPU; its GPU tasks need 2", problem
