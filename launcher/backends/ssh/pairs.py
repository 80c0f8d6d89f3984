"""Which task dials which: the connections TensorFlow itself opens, so the ssh preflight probes
O(n) pairs, not every host to every task (4,032 pairs at 64 hosts, 16,256 at 128). Pure.

MultiWorkerMirroredStrategy (TF 2.x, read in TF's source):

* **coordination service**: every chief/worker task registers with, and heartbeats to, the
  leader: the chief, else worker:0 (``multi_worker_util.coordination_leader``); the collective
  group leader (``collective_leader``: CompleteGroup/CompleteInstance RPCs) is the same task.
* **all-reduce / all-gather** (CollectiveAllReduce, RING on CPU: ``ring_alg.cc``): the group's
  tasks are ranked by the lexicographic order of their names ``/job:T/replica:0/task:I``
  (``EstablishGlobalRank`` walks a ``std::set<string>``: worker:10 comes before worker:2);
  rank r receives from rank r-1 (``DispatchRecv``), and a receive is a RecvBuf RPC *to* the
  sender (``CollectiveRemoteAccessDistributed::RecvFromPeer``), so r dials r-1 (0 dials n-1).
  Sends are local buffer hand-overs. Several devices per task rotate inside a task only; the
  task-to-task ring is the same.
* **broadcast** of every variable's initial value from the chief (``broadcast_send``/``_recv``,
  HierarchicalTreeBroadcast): a binary tree over the same ranks with the source at rank 0 (the
  chief or worker:0 sorts first), rank r receives from -- dials -- rank (r-1)//2.

ParameterServerStrategy: the chief connects to every worker and ps (``connect_to_cluster``);
device filters let a worker see only the ps and the chief, and a ps only the workers and the
chief, and a worker reads and updates the variables on every ps: so chief -> every worker and
ps, every worker -> every ps. With TF_PSS_ENABLE_COORDINATION_SERVICE set, workers and ps also
register with the coordination service on ps:0.

The evaluator is no member of the cluster and serves nothing: it dials nobody and nobody dials it.
"""

from __future__ import annotations

from typing import Mapping

from launcher.plan.build import CLUSTER_TYPES, Plan, PlannedTask

PSS_COORDINATION_ENV = "TF_PSS_ENABLE_COORDINATION_SERVICE"


def tf_task_name(task: PlannedTask) -> str:
    return f"/job:{task.type}/replica:0/task:{task.index}"


def ring_order(members: list[PlannedTask]) -> list[PlannedTask]:
    """The collective ring's rank order: task names in lexicographic (byte) order."""
    return sorted(members, key=tf_task_name)


def tf_pairs(plan: Plan) -> list[tuple[str, str]]:
    """(dialing task, dialed task) for every connection TensorFlow opens between the plan's tasks,
    each pair once, in a stable order; a task never dials itself here."""
    members = [t for t in plan.tasks if t.type in CLUSTER_TYPES and t.port is not None]
    pairs: dict[tuple[str, str], None] = {}

    def add(src: PlannedTask, dst: PlannedTask) -> None:
        if src.key != dst.key:
            pairs[(src.key, dst.key)] = None

    if len(members) < 2:
        return []
    if plan.strategy == "parameter_server":
        chiefs = [t for t in members if t.type == "chief"]
        workers = [t for t in members if t.type == "worker"]
        ps = [t for t in members if t.type == "ps"]
        for c in chiefs:
            for t in workers + ps:
                add(c, t)
        for w in workers:
            for p in ps:
                add(w, p)
        if ps and _env(plan).get(PSS_COORDINATION_ENV):
            for t in workers + ps:
                add(t, ps[0])
        return list(pairs)
    ring = ring_order(members)
    leader = ring[0]  # chief:0, else worker:0: both sort first
    for t in members:
        add(t, leader)
    for r, t in enumerate(ring):
        add(t, ring[r - 1])
    for r in range(1, len(ring)):
        add(ring[r], ring[(r - 1) // 2])
    return list(pairs)


def _env(plan: Plan) -> Mapping[str, str]:
    return dict(plan.tasks[0].base_env) if plan.tasks else {}


def host_targets(plan: Plan) -> dict[str, list[PlannedTask]]:
    """{host: the tasks it must reach}, from ``tf_pairs``: a task's host dials for it. Each
    target once per host, in plan order."""
    order = {t.key: i for i, t in enumerate(plan.tasks)}
    wanted: dict[str, set[str]] = {}
    for src, dst in tf_pairs(plan):
        wanted.setdefault(plan.task(src).host, set()).add(dst)
    return {host: [plan.task(k) for k in sorted(keys, key=order.__getitem__)] for host, keys in wanted.items()}
