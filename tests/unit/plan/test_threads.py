"""Thread budgets for tasks that share a host (``devices: {threads: auto | N | 0}``):
the arithmetic, the plan's env (the spec's env wins, 0 sets nothing), and where the budget is made
when the plan does not know the host's cores (the task wrapper, the Slurm step's shell, compose
and the exports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from launcher.plan import threads
from launcher.contract import envnames
from launcher.errors import SpecError
from launcher.app.up import plan_for
from launcher.ui.plantext import render_plan
from launcher.plan.build import Placement, Slot, build_plan, task_keys
from launcher.remote import taskwrap_path
from launcher.loader.load import parse_spec

NAMES = threads.NAMES


def spec_of(text: str):
    return parse_spec(textwrap.dedent(text))


def local_plan(text: str, cores: int):
    """The local backend's placement, with ``cores`` for the host (not this machine's) and no GPU."""
    spec = spec_of(text)
    slots = {f"{t}:{i}": Slot("localhost", "localhost") for t, i in task_keys(spec)}
    return build_plan(spec, Placement(slots, cores={"localhost": cores}, gpus={"localhost": ()}))


def budget(n: int) -> dict[str, str]:
    """The three variables of a budget of ``n``: the inter-op pool never below 2 (threads.INTEROP_MIN)."""
    return {"TF_NUM_INTRAOP_THREADS": str(n), "TF_NUM_INTEROP_THREADS": str(max(n, 2)), "OMP_NUM_THREADS": str(n)}


def budgets(plan) -> list[dict[str, str]]:
    return [{k: v for k, v in t.env if k in NAMES} for t in plan.tasks]


TWO = """\
    name: demo
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 2}
"""


@pytest.mark.parametrize("cores,n,expected", [
    (2, 2, [1, 1]), (8, 2, [4, 4]), (7, 3, [3, 2, 2]), (8, 3, [3, 3, 2]), (16, 1, [16]),
    (2, 5, [1, 1, 1, 1, 1]), (0, 2, [1, 1]), (5, 0, []),
])
def test_shares(cores, n, expected):
    assert threads.shares(cores, n) == expected
    assert [threads.share(cores, i, n) for i in range(n)] == expected


def test_shares_add_up_to_the_cores_when_there_are_enough():
    for cores in range(1, 65):
        for n in range(1, cores + 1):
            got = threads.shares(cores, n)
            assert sum(got) == cores and min(got) >= 1 and max(got) - min(got) <= 1
            assert got == sorted(got, reverse=True)  # the remainder goes to the first tasks


def test_share_is_the_element_of_shares_for_every_place():
    for cores in (1, 2, 3, 7, 16, 96):
        for n in (1, 2, 3, 5, 8, 17, 200):
            assert [threads.share(cores, i, n) for i in range(n)] == threads.shares(cores, n), (cores, n)
    with pytest.raises(IndexError):
        threads.share(4, 2, 2)


def test_places_per_host_in_plan_order():
    assert threads.places(["a", "a", "b", "a", "b"]) == [(0, 3), (1, 3), (0, 2), (2, 3), (1, 2)]


def test_two_colocated_tasks_get_their_own_budgets_adding_up_to_the_cores():
    for cores, want in ((2, ["1", "1"]), (8, ["4", "4"]), (5, ["3", "2"])):
        plan = local_plan(TWO, cores)
        got = budgets(plan)
        assert [b["TF_NUM_INTRAOP_THREADS"] for b in got] == want
        assert got == [budget(int(w)) for w in want]
        assert sum(int(b["OMP_NUM_THREADS"]) for b in got) == cores
        assert all(envnames.THREADS not in dict(t.env) for t in plan.tasks)  # complete in the plan


def test_auto_is_the_default_and_plan_shows_it():
    assert parse_spec(textwrap.dedent(TWO)).devices.threads == "auto"
    plan = local_plan(TWO, 8)
    assert plan.threads == "threads: auto (8 cores: 4 + 4 per task on the host)"
    text = render_plan(plan)
    assert "threads: auto (8 cores: 4 + 4 per task on the host)" in text
    assert "TF_NUM_INTRAOP_THREADS=4" in text  # the same for both: in the common env


def test_unequal_budgets_are_not_shown_as_common_env():
    text = render_plan(local_plan(TWO, 5))
    assert "threads: auto (5 cores: 3 + 2 per task on the host)" in text
    assert "TF_NUM_INTRAOP_THREADS" not in text.split("env (every task")[1]


def test_the_spec_env_wins():
    plan = local_plan(TWO + "    env: {OMP_NUM_THREADS: '7', TF_NUM_INTEROP_THREADS: '3'}\n", 8)
    for t in plan.tasks:
        env = dict(t.env)
        assert (env["OMP_NUM_THREADS"], env["TF_NUM_INTEROP_THREADS"], env["TF_NUM_INTRAOP_THREADS"]) == ("7", "3", "4")


def test_the_spec_env_setting_all_three_leaves_nothing_to_do():
    env = "    env: {OMP_NUM_THREADS: '1', TF_NUM_INTEROP_THREADS: '2', TF_NUM_INTRAOP_THREADS: '3'}\n"
    plan = build_plan(spec_of(TWO.replace("backend: local", "") + "    backend: ssh\n    hosts: [{name: a}]\n" + env),
                      Placement({"worker:0": Slot("a", "a"), "worker:1": Slot("a", "a")}))
    for t in plan.tasks:
        assert {k: v for k, v in t.env if k in NAMES} == {"OMP_NUM_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2",
                                                          "TF_NUM_INTRAOP_THREADS": "3"}
        assert envnames.THREADS not in dict(t.env)
    assert plan.threads == "threads: as the spec's env sets them"


def test_threads_0_sets_nothing():
    plan = local_plan(TWO + "    devices: {threads: 0}\n", 8)
    for t in plan.tasks:
        env = dict(t.env)
        assert not set(env) & set(NAMES) and envnames.THREADS not in env
    assert "threads: 0 (TensorFlow's own defaults)" in render_plan(plan)


def test_threads_n_gives_every_task_n():
    plan = local_plan(TWO + "    devices: {threads: 3}\n", 2)
    assert budgets(plan) == [budget(3)] * 2
    assert budgets(local_plan(TWO + "    devices: {threads: 1}\n", 2)) == [budget(1)] * 2 == [
        {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2", "OMP_NUM_THREADS": "1"}] * 2
    assert plan.tasks[0].base_env is plan.tasks[1].base_env  # shared, as without budgets


@pytest.mark.parametrize("value", ["-1", "many", "true", "1.5", "[1]"])
def test_bad_threads_is_one_line(value):
    with pytest.raises(SpecError) as err:
        spec_of(TWO + f"    devices: {{threads: {value}}}\n")
    assert "devices.threads" in str(err.value) and "\n" not in str(err.value).strip()


SSH = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: a}, {name: b}]
    tasks: {chief: 1, worker: 4}
"""


def test_ssh_plan_gives_each_task_its_place_on_its_host():
    plan = plan_for(spec_of(SSH))
    places = {t.key: (t.host, dict(t.env).get(envnames.THREADS)) for t in plan.tasks}
    per_host: dict[str, list[str]] = {}
    for host, place in places.values():
        per_host.setdefault(host, []).append(place)
    for host, got in per_host.items():
        n = len(got)
        assert got == [f"{i}/{n}" for i in range(n)], (host, got)
    assert all(not set(dict(t.env)) & set(NAMES) for t in plan.tasks)  # made at start
    assert plan.threads == "threads: auto (per host at start: its cores shared among its tasks)"
    assert "threads: auto (per host at start" in render_plan(plan)
    # the few distinct envs are shared, not one per task
    assert len({id(t.base_env) for t in plan.tasks}) == len({dict(t.base_env)[envnames.THREADS] for t in plan.tasks})


def test_complete_makes_the_budget_and_keeps_what_is_set():
    env = {envnames.THREADS: "1/3", "OMP_NUM_THREADS": "9", "X": "y"}
    got = threads.complete(env, 8, envnames.THREADS)
    assert got == {"OMP_NUM_THREADS": "9", "X": "y", "TF_NUM_INTRAOP_THREADS": "3", "TF_NUM_INTEROP_THREADS": "3"}
    assert threads.complete({"X": "y"}, 8, envnames.THREADS) == {"X": "y"}
    assert threads.complete({envnames.THREADS: "junk"}, 8, envnames.THREADS) == {}


def _wrapped_env(env: dict[str, str], *flags: str) -> dict[str, str]:
    code = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k in %r or k == %r}))" % (
        NAMES, envnames.THREADS)
    # stdin is the wrapper's lifeline: open until the task is done
    proc = subprocess.Popen([sys.executable, str(taskwrap_path()), *flags, "--", sys.executable, "-c", code],
                            env={"PATH": os.environ["PATH"], **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        out = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.stdin.close()
    return json.loads(out)


def test_the_task_wrapper_makes_the_budget_from_this_hosts_cores():
    cores = threads.local_cores()
    want = threads.shares(cores, 2)
    for place in (0, 1):
        got = _wrapped_env({envnames.THREADS: f"{place}/2"}, "--threads", envnames.THREADS)
        assert got == budget(want[place])
    got = _wrapped_env({envnames.THREADS: "0/2", "OMP_NUM_THREADS": "5"}, "--threads", envnames.THREADS)
    assert got["OMP_NUM_THREADS"] == "5" and got["TF_NUM_INTRAOP_THREADS"] == str(want[0])
    # without --threads (the Slurm backend's local wrapper) the marker goes on to the node
    assert _wrapped_env({envnames.THREADS: "0/2"}) == {envnames.THREADS: "0/2"}


@pytest.mark.parametrize("place,cpus,user,want", [
    ("0/3", "8", {}, ["3", "3", "3"]), ("2/3", "8", {}, ["2", "2", "2"]), ("1/4", "2", {}, ["1", "2", "1"]),
    ("0/2", "4", {"OMP_NUM_THREADS": "7"}, ["2", "2", "7"]),
])
def test_the_slurm_step_shell_makes_the_budget_from_the_nodes_cpus(place, cpus, user, want):
    import sys

    from launcher.backends.slurm.step import STEP_SHELL, shell_args

    show = f'echo "$TF_NUM_INTRAOP_THREADS $TF_NUM_INTEROP_THREADS $OMP_NUM_THREADS [${envnames.THREADS}]"'
    out = subprocess.run(["/bin/sh", "-c", STEP_SHELL, "sh", *shell_args(sys.executable, ["sh", "-c", show])],
                         env={"PATH": "/usr/bin:/bin", envnames.THREADS: place, "SLURM_CPUS_ON_NODE": cpus, **user},
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.split("\n")[-2] == "\x1eD" + " ".join(want) + " []"  # (a data frame: taskstream.py; \x1e splits a str's lines)


def test_cgroup_cpu_limit(tmp_path):
    f = tmp_path / "cpu.max"
    f.write_text("150000 100000\n")
    assert threads.cgroup_cores(str(f)) == 2
    f.write_text("max 100000\n")
    assert threads.cgroup_cores(str(f)) is None
    assert threads.cgroup_cores(str(tmp_path / "none")) is None


def test_compose_and_exports_carry_no_place():
    from launcher.export.common import container_env, export_plan

    spec = spec_of(TWO.replace("entrypoint", "backend: docker\n    entrypoint"))
    plan = export_plan(spec)
    assert all(envnames.THREADS in dict(t.env) for t in plan.tasks)
    assert envnames.THREADS not in container_env(spec, plan)


def test_compact_json_carries_only_each_tasks_budget_and_expands_back():
    from tests.support.planjson import expand_plan_json

    plan = plan_for(spec_of(SSH))
    compact = plan.to_compact_json()
    rows = compact["tasks"]
    assert all("env" not in r for r in rows)
    assert [r.get("env_extra", {}).get(envnames.THREADS) for r in rows][1:] == \
        [dict(t.env)[envnames.THREADS] for t in plan.tasks][1:]
    assert all(set(r.get("env_extra", {})) <= {envnames.THREADS, envnames.GPUS} for r in rows)  # and its GPU request
    assert expand_plan_json(compact) == plan.to_json()
    five = local_plan(TWO, 5)
    assert expand_plan_json(five.to_compact_json()) == five.to_json()
