"""The preflight's pairs (launcher/backends/ssh/pairs.py): what TensorFlow dials, O(n), not all pairs."""

from __future__ import annotations

import textwrap

from launcher.backends.ssh.pairs import host_targets, ring_order, tf_pairs
from launcher.app.up import plan_for
from launcher.loader.load import parse_spec


def ssh_plan(n_hosts: int, tasks: str, strategy: str = "multi_worker_mirrored", env: str = ""):
    hosts = "\n".join(f"          - {{name: h{i}, ssh: root@10.0.0.{i}}}" for i in range(1, n_hosts + 1))
    text = textwrap.dedent(f"""\
        name: pairs
        strategy: {strategy}
        backend: ssh
        entrypoint: python -m worker
        hosts:
{hosts}
        tasks: {tasks}
        {env}
    """)
    return plan_for(parse_spec(text))


def test_mwms_workers_dial_the_leader_their_ring_predecessor_and_broadcast_parent():
    plan = ssh_plan(3, "{worker: 3}")
    # ring ranks: worker:0, worker:1, worker:2; r dials r-1 (0 dials 2); tree: 1, 2 -> 0
    assert set(tf_pairs(plan)) == {("worker:1", "worker:0"), ("worker:2", "worker:0"),
                                   ("worker:2", "worker:1"), ("worker:0", "worker:2")}
    # worker:1 (h2) never dials worker:2 (h3)
    assert [t.key for t in host_targets(plan)["h2"]] == ["worker:0"]


def test_ring_order_is_tensorflows_lexicographic_task_names():
    plan = ssh_plan(12, "{chief: 1, worker: 11}")
    ring = [t.key for t in ring_order(list(plan.tasks))]
    assert ring == ["chief:0", "worker:0", "worker:1", "worker:10", "worker:2", "worker:3", "worker:4",
                    "worker:5", "worker:6", "worker:7", "worker:8", "worker:9"]
    pairs = set(tf_pairs(plan))
    assert ("worker:2", "worker:10") in pairs and ("worker:10", "worker:1") in pairs
    assert ("chief:0", "worker:9") in pairs  # the ring closes
    assert ("worker:2", "worker:0") in pairs  # broadcast tree: rank 4 receives from rank 1
    assert ("worker:3", "worker:1") in pairs  # and rank 5 from rank 2
    assert all((t.key, "chief:0") in pairs for t in plan.tasks if t.key != "chief:0")  # the leader


def test_mwms_pairs_grow_with_n_not_n_squared():
    for n in (32, 64, 128):
        plan = ssh_plan(n, f"{{worker: {n}}}")
        pairs = tf_pairs(plan)
        assert len(pairs) <= 3 * n, (n, len(pairs))
        assert sum(len(v) for v in host_targets(plan).values()) == len(pairs)  # one task a host
        dialed = {dst for _, dst in pairs}
        assert dialed == {t.key for t in plan.tasks}  # every task's address:port is still checked once


def test_pss_chief_dials_everyone_workers_dial_every_ps_evaluator_nothing():
    plan = ssh_plan(4, "{chief: 1, worker: 2, ps: 2, evaluator: 1}", strategy="parameter_server")
    assert set(tf_pairs(plan)) == {
        ("chief:0", "worker:0"), ("chief:0", "worker:1"), ("chief:0", "ps:0"), ("chief:0", "ps:1"),
        ("worker:0", "ps:0"), ("worker:0", "ps:1"), ("worker:1", "ps:0"), ("worker:1", "ps:1")}
    with_coordination = ssh_plan(4, "{chief: 1, worker: 2, ps: 2}", strategy="parameter_server",
                                 env="env: {TF_PSS_ENABLE_COORDINATION_SERVICE: '1'}")
    assert ("ps:1", "ps:0") in set(tf_pairs(with_coordination))


def test_tasks_sharing_a_host_dial_from_it_once_per_target():
    plan = ssh_plan(2, "{worker: 4}")  # in blocks: h1: worker:0, worker:1; h2: worker:2, worker:3
    assert [t.host for t in plan.tasks] == ["h1", "h1", "h2", "h2"]
    targets = {h: [t.key for t in ts] for h, ts in host_targets(plan).items()}
    # h1: worker:0 dials worker:3 (ring); worker:1 dials worker:0 (leader, ring, tree: its host's own)
    assert targets["h1"] == ["worker:0", "worker:3"]
    # h2: worker:2 dials worker:0 (leader, tree) and worker:1 (ring); worker:3 dials worker:0 and its host's own
    assert targets["h2"] == ["worker:0", "worker:1", "worker:2"]


def test_one_task_or_a_single_host_strategy_has_no_pairs():
    assert tf_pairs(ssh_plan(1, "{worker: 1}")) == []
