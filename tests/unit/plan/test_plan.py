"""spec -> plan against explicit expected tables, and TensorFlow's TF_CONFIG rules."""

from __future__ import annotations

import json
import textwrap

import pytest

from launcher.errors import SpecError
from launcher.app.up import plan_for
from launcher.plan.build import redact_env
from launcher.loader.load import parse_spec
from tests.support.gpus import fake_gpus


def plan_of(text: str):
    return plan_for(parse_spec(textwrap.dedent(text)))


def table(plan):
    return [(t.key, t.host, t.address, t.port) for t in plan.tasks]


def test_local_mwms_chief_and_workers_table():
    plan = plan_of("""\
        name: demo
        strategy: multi_worker_mirrored
        entrypoint: python -m worker --epochs 3
        tasks: {chief: 1, worker: 2, evaluator: 1}
        ports: {base: 3000}
    """)
    assert table(plan) == [
        ("chief:0", "localhost", "localhost", 3000),
        ("worker:0", "localhost", "localhost", 3001),
        ("worker:1", "localhost", "localhost", 3002),
        ("evaluator:0", "localhost", "localhost", None),
    ]
    cluster = {"chief": ["localhost:3000"], "worker": ["localhost:3001", "localhost:3002"]}
    assert [t.tf_config for t in plan.tasks] == [
        {"cluster": cluster, "task": {"type": "chief", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 1}},
        {"cluster": cluster, "task": {"type": "evaluator", "index": 0}},
    ]
    assert plan.success_task == "chief:0"


def test_every_task_gets_identical_cluster_and_evaluator_is_not_in_it():
    plan = plan_of("""\
        name: p
        strategy: parameter_server
        entrypoint: python -m worker
        tasks: {chief: 1, worker: 3, ps: 2, evaluator: 1}
    """)
    clusters = {json.dumps(t.tf_config["cluster"], sort_keys=True) for t in plan.tasks}
    assert len(clusters) == 1
    cluster = plan.tasks[0].tf_config["cluster"]
    assert set(cluster) == {"chief", "worker", "ps"}
    assert "evaluator" not in cluster
    assert [len(cluster[k]) for k in ("chief", "worker", "ps")] == [1, 3, 2]
    # every endpoint is unique
    endpoints = [e for v in cluster.values() for e in v]
    assert len(endpoints) == len(set(endpoints)) == 6


def test_worker_zero_is_success_task_without_chief():
    plan = plan_of("name: d\nstrategy: multi_worker_mirrored\nentrypoint: x\ntasks: {worker: 2}\n")
    assert plan.success_task == "worker:0"
    assert "chief" not in plan.tasks[0].tf_config["cluster"]


def test_ssh_round_robin_placement_and_per_host_ports():
    plan = plan_of("""\
        name: s
        strategy: parameter_server
        backend: ssh
        entrypoint: python -m worker
        hosts:
          - {name: vm1, ssh: me@vm1.example, address: 10.0.0.1}
          - {name: vm2, ssh: me@vm2.example, address: 10.0.0.2}
        tasks:
          chief: 1
          worker: 3
          ps: {count: 1, hosts: [vm2]}
        ports: {base: 5000}
    """)
    # The round-robin's counts (vm1: chief and one worker, vm2: two workers and the ps), each
    # host's workers in one block of consecutive indices.
    assert table(plan) == [
        ("chief:0", "vm1", "10.0.0.1", 5000),
        ("worker:0", "vm1", "10.0.0.1", 5001),
        ("worker:1", "vm2", "10.0.0.2", 5000),
        ("worker:2", "vm2", "10.0.0.2", 5001),
        ("ps:0", "vm2", "10.0.0.2", 5002),
    ]
    assert [h.name for h in plan.hosts] == ["vm1", "vm2"]


def test_ssh_address_defaults_to_ssh_host_part():
    plan = plan_of("""\
        name: s
        strategy: multi_worker_mirrored
        backend: ssh
        entrypoint: python -m worker
        hosts: [{name: a, ssh: root@a.internal}, {name: b}]
        tasks: {worker: 2}
    """)
    assert [(t.host, t.address) for t in plan.tasks] == [("a", "a.internal"), ("b", "b")]


def test_docker_one_container_per_task_same_port():
    plan = plan_of("""\
        name: d
        strategy: multi_worker_mirrored
        backend: docker
        entrypoint: python -m worker
        tasks: {chief: 1, worker: 1}
    """)
    assert table(plan) == [("chief:0", "chief-0", "chief-0", 23456), ("worker:0", "worker-0", "worker-0", 23456)]
    assert plan.tasks[1].tf_config["cluster"] == {"chief": ["chief-0:23456"], "worker": ["worker-0:23456"]}


def test_explicit_ports_win_and_auto_ports_skip_them():
    plan = plan_of("""\
        name: d
        strategy: multi_worker_mirrored
        entrypoint: x
        tasks:
          chief: {count: 1, ports: [23457]}
          worker: 2
    """)
    assert [t.port for t in plan.tasks] == [23457, 23456, 23458]


def test_colliding_explicit_ports_on_one_host():
    with pytest.raises(SpecError) as info:
        plan_of("""\
            name: d
            strategy: multi_worker_mirrored
            entrypoint: x
            tasks:
              worker: {count: 2, ports: [4000, 4000]}
        """)
    assert info.value.lines == (
        "tasks.worker.ports: port 4000 on localhost is used by both worker:0 and worker:1; give each task on a host its own port",
    )


def test_same_port_on_different_hosts_is_fine():
    plan = plan_of("""\
        name: d
        strategy: multi_worker_mirrored
        backend: ssh
        entrypoint: x
        hosts: [{name: a}, {name: b}]
        tasks:
          worker: {count: 2, ports: [4000, 4000]}
    """)
    assert [t.endpoint for t in plan.tasks] == ["a:4000", "b:4000"]


def test_ports_past_65535():
    with pytest.raises(SpecError) as info:
        plan_of("name: d\nstrategy: multi_worker_mirrored\nentrypoint: x\ntasks: {worker: 3}\nports: {base: 65534}\n")
    assert "ports.base: 65534 leaves no room for worker:2 on localhost (would need port 65536 > 65535)" in info.value.lines[0]


def test_command_and_env():
    plan = plan_of("""\
        name: d
        strategy: multi_worker_mirrored
        entrypoint: python train.py --msg 'hello world'
        tasks: {worker: 1}
        env: {LR: 0.5, API_TOKEN: s3cret}
    """)
    task = plan.tasks[0]
    assert task.command == ("python", "train.py", "--msg", "hello world")
    env = task.env_dict
    assert env["LR"] == "0.5" and env["API_TOKEN"] == "s3cret"
    assert json.loads(env["TF_CONFIG"]) == task.tf_config
    assert env["TFCLUSTER_TASK"] == "worker:0" and env["PYTHONUNBUFFERED"] == "1"
    assert redact_env(env)["API_TOKEN"] == "***" and redact_env(env)["LR"] == "0.5"


def test_cluster_tasks_retry_a_refused_peer_after_100_ms_unless_the_spec_says_otherwise():
    """TF_GRPC_DEFAULT_OPTIONS (read by TensorFlow's gRPC channels) for the strategies with a
    cluster; none for a single-host strategy (no TF server); the spec's env: wins."""
    def env(strategy: str, extra: str = "") -> dict:
        return plan_of(f"name: d\nstrategy: {strategy}\nentrypoint: x\ntasks: {{worker: 1}}\n{extra}").tasks[0].env_dict

    want = "grpc.initial_reconnect_backoff_ms=100"
    assert env("multi_worker_mirrored")["TF_GRPC_DEFAULT_OPTIONS"] == want
    assert "TF_GRPC_DEFAULT_OPTIONS" not in env("mirrored")
    mine = "grpc.keepalive_time_ms=60000"
    assert env("multi_worker_mirrored", f"env: {{TF_GRPC_DEFAULT_OPTIONS: '{mine}'}}\n")["TF_GRPC_DEFAULT_OPTIONS"] == mine


def test_plan_is_immutable_and_deterministic():
    text = "name: d\nstrategy: multi_worker_mirrored\nentrypoint: x\ntasks: {worker: 2}\n"
    a, b = plan_of(text), plan_of(text)
    assert a == b
    with pytest.raises(Exception):
        a.tasks[0].port = 1  # type: ignore[misc]


def test_to_json_shape():
    data = plan_of("name: d\nstrategy: multi_worker_mirrored\nentrypoint: x\ntasks: {worker: 1}\n").to_json()
    assert set(data["tasks"][0]) == {"type", "index", "host", "address", "port", "tf_config", "command", "env"}
    assert isinstance(data["tasks"][0]["tf_config"], dict)


@pytest.mark.parametrize("extra, env", [
    ("", {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),  # alone on its host: every GPU
    ("devices: {gpus: [0, 2], cpus: 4}\n", {"CUDA_VISIBLE_DEVICES": "0,2", "TFCLUSTER_CPUS": "4"}),
])
def test_single_host_strategy_one_task_no_cluster_no_port(extra, env, monkeypatch, tmp_path):
    fake_gpus(monkeypatch, tmp_path, 4)
    plan = plan_of("name: m\nstrategy: mirrored\nentrypoint: python -m worker\n" + extra)
    assert table(plan) == [("worker:0", "localhost", "localhost", None)]
    assert plan.tasks[0].tf_config == {"task": {"type": "worker", "index": 0}}
    assert plan.success_task == "worker:0"
    got = plan.tasks[0].env_dict
    assert got["TFCLUSTER_STRATEGY"] == "mirrored"
    assert {k: got[k] for k in got if k in ("CUDA_VISIBLE_DEVICES", "TFCLUSTER_CPUS")} == env


@pytest.mark.parametrize("tpu, env", [
    ("", {"TFCLUSTER_TPU": "local"}),
    ("tpu: {name: my-tpu, zone: z, project: p}\n",
     {"TFCLUSTER_TPU": "my-tpu", "TFCLUSTER_TPU_ZONE": "z", "TFCLUSTER_TPU_PROJECT": "p"}),
])
def test_tpu_env(tpu, env):
    got = plan_of("name: t\nstrategy: tpu\nentrypoint: python -m worker\n" + tpu).tasks[0].env_dict
    assert {k: v for k, v in got.items() if k.startswith("TFCLUSTER_TPU")} == env


def test_mwms_gpus_reach_every_worker(monkeypatch, tmp_path):
    fake_gpus(monkeypatch, tmp_path, 4)
    plan = plan_of("name: d\nstrategy: multi_worker_mirrored\nentrypoint: x\ntasks: {worker: 2}\ndevices: {gpus: 1}\n")
    # devices.gpus 1: the run may use GPU 0 only; the two workers share it, with memory growth
    assert [t.env_dict["CUDA_VISIBLE_DEVICES"] for t in plan.tasks] == ["0", "0"]
    assert [t.env_dict["TF_FORCE_GPU_ALLOW_GROWTH"] for t in plan.tasks] == ["true", "true"]
    assert all("cluster" in t.tf_config for t in plan.tasks)


@pytest.mark.parametrize("backend, hosts, expected", [
    ("ssh", "hosts: [{name: gpu-vm, ssh: me@gpu-vm.example}]\n", ("worker:0", "gpu-vm", "gpu-vm.example", None)),
    ("docker", "", ("worker:0", "worker-0", "worker-0", None)),
])
def test_single_host_strategy_on_other_backends(backend, hosts, expected):
    plan = plan_of(f"name: g\nstrategy: one_device\nbackend: {backend}\nentrypoint: python -m worker\n" + hosts)
    assert table(plan) == [expected]


@pytest.mark.parametrize("strategy, env, expected", [
    ("multi_worker_mirrored", "", "1"),
    ("parameter_server", "", "1"),
    ("multi_worker_mirrored", "env: {TF_USE_LEGACY_KERAS: '0'}\n", "0"),
    ("parameter_server", "env: {TF_USE_LEGACY_KERAS: '0'}\n", "0"),
])
def test_legacy_keras_default_under_multi_worker_strategies(strategy, env, expected):
    tasks = "{chief: 1, worker: 1, ps: 1}" if strategy == "parameter_server" else "{worker: 2}"
    plan = plan_of(f"name: d\nstrategy: {strategy}\nentrypoint: x\ntasks: {tasks}\n" + env)
    assert {t.env_dict["TF_USE_LEGACY_KERAS"] for t in plan.tasks} == {expected}
