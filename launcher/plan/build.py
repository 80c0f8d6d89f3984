"""spec + placement -> plan: a pure function that assigns ports and builds TF_CONFIG.

Where each task runs (its host and the address others dial) is the backend's answer
(``BackendKind.place`` / ``Hosts.allocate``, a ``Placement``); everything else is decided here.
The plan is the single immutable description every backend executes and ``tfcluster plan``
prints; nothing here touches the network, the file system or the clock. What a plan holds (its
tasks, their TF_CONFIG and environment, its JSON shapes) is launcher/plan/model.py.
"""

from __future__ import annotations

from typing import AbstractSet, Optional

from launcher.plan import gpus, gputext
from launcher.plan import containergpus, threads
from launcher.plan.kerasplan import keras_env
from launcher.contract import envnames
from launcher.errors import SpecError
from launcher.plan.model import (  # noqa: F401 - the plan's types are re-exported: ``from launcher.plan.build import Plan`` works
    COMPACT,
    Cluster,
    Placement,
    Plan,
    PlannedTask,
    Slot,
    MASK,
    is_secret,
    redact_command,
    redact_env,
    write_full_json,
)
from launcher.spec.model import TASK_TYPES, Spec, Tpu

# TensorFlow's gRPC channels (tsl/platform/grpc_util: TF_GRPC_DEFAULT_OPTIONS, name=value pairs)
# wait gRPC's initial reconnect backoff, 1 s, after a refused connection: a task whose peer's
# server was a few ms from listening (the two tasks of a restart, started together) lost a whole
# second in its strategy's first exchange with the coordination service (ssh recovery was
# bimodal, 2.0 s or 3.0 s; the slow mode's strategy took 1.1 s to make against 0.09 s). 100 ms,
# grown by gRPC up to TensorFlow's own cap of 1 s (grpc.max_reconnect_backoff_ms). Only the
# wait before a retry: the connect timeout (grpc.min_reconnect_backoff_ms, 20 s) is left as it
# is. A spec's env: that sets the variable wins.
GRPC_OPTIONS = "TF_GRPC_DEFAULT_OPTIONS"
GRPC_RETRY = "grpc.initial_reconnect_backoff_ms=100"

# Task types that are members of the TF cluster (the evaluator is kept out of ``cluster``).
CLUSTER_TYPES = ("chief", "worker", "ps")


def task_keys(spec: Spec) -> list[tuple[str, int]]:
    """Every task of the spec as (type, index), in plan order (chief, worker, ps, evaluator)."""
    return [(t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t))]


def build_plan(spec: Spec, placement: Placement, avoid: AbstractSet[tuple[str, int]] = frozenset()) -> Plan:
    """Assign ports on the hosts of ``placement``; the cluster and the environment every task
    shares are built once (each task's TF_CONFIG is made from them when it is asked for).
    ``avoid``: (host, port) pairs no port of ``ports.base``'s counting may take (an elastic
    run's replan: the ports of its earlier plans, see launcher/plan/elastic.py)."""
    placements = []  # [(type, index, host_name, address)]
    for task_type, index in task_keys(spec):
        slot = placement.slots.get(f"{task_type}:{index}")
        if slot is None:
            raise ValueError(f"placement has no slot for {task_type}:{index}")  # a backend's bug
        placements.append((task_type, index, slot.host, slot.address))
    ports = _assign_ports(spec, placements, avoid)
    cluster: Optional[Cluster] = None
    if not spec.single_host:  # single-host strategies: the task's role only (no TF server to start)
        jobs: dict[str, list[str]] = {}
        for (task_type, index, _host, address), port in zip(placements, ports):
            if task_type in CLUSTER_TYPES:
                jobs.setdefault(task_type, []).append(f"{address}:{port}")
        cluster = Cluster(tuple((task_type, tuple(members)) for task_type, members in jobs.items()))
    env = keras_env(spec)  # (launcher/plan/kerasplan.py: what `import keras` and tf.keras are)
    env.update(spec.env)
    env.update({"PYTHONUNBUFFERED": "1", envnames.NAME: spec.name, envnames.STRATEGY: spec.strategy})
    if not spec.single_host and GRPC_OPTIONS not in spec.env:
        env[GRPC_OPTIONS] = GRPC_RETRY
    env.update(_device_env(spec))
    for own in ("TF_CONFIG", envnames.TASK):  # each task's own (PlannedTask.own_env)
        env.pop(own, None)
    host_names = [p[2] for p in placements]
    problems = _slot_problems(spec, host_names)
    if problems:
        raise NoRoom(problems[0][1], keys=(problems[0][0],))
    # Containers share their machine's cores and GPUs (Placement.machines): the arithmetic runs over it.
    machine_names = [placement.machines.get(h, h) for h in host_names] if placement.machines else host_names
    budgets, shown = _thread_env(spec, placement, machine_names)
    task_gpus, gpu_env, problems = gpus.plan_gpus(spec, machine_names, [p[0] for p in placements], placement.gpus,
                                                  placement.gpu_limits, placement.gpu_failures, placement.gpu_cap)
    if problems:
        raise SpecError(*problems, keys=tuple(p.key for p in problems))  # (gpurefusal.Refusal: typed)
    if placement.machines:
        gpu_env = containergpus.inside(spec, task_gpus, gpu_env)
    chosen, why = gpus.collective_choice(spec, [p[0] for p in placements], task_gpus)
    # Only NCCL needs saying: TensorFlow's AUTO is RING (gpus.collective_choice).
    if chosen == "nccl" and envnames.COLLECTIVE not in spec.env:
        env[envnames.COLLECTIVE] = chosen
    variants: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}  # shared, not one per task
    base_envs = [variants.setdefault(extra + more, tuple(sorted({**env, **dict(extra), **dict(more)}.items())))
                 for extra, more in zip(budgets, gpu_env)]
    argv = tuple(spec.argv)
    tasks = tuple(
        PlannedTask(type=task_type, index=index, host=host, address=address, port=port, command=argv,
                    cluster=cluster, base_env=base_env, gpus=task_gpu)
        for (task_type, index, host, address), port, base_env, task_gpu in zip(placements, ports, base_envs,
                                                                                 task_gpus)
    )
    used_hosts = {t.host for t in tasks}
    hosts = tuple(h for h in spec.hosts if h.name in used_hosts)
    return Plan(name=spec.name, strategy=spec.strategy, backend=spec.backend, tasks=tasks, hosts=hosts,
                placeholder=placement.placeholder, placement_note=placement.note, threads=shown,
                gpus=gputext.describe(spec, tasks, placement.gpus, placement.machines, placement.gpu_limits, why,
                                    placement.gpu_failures))


class NoRoom(SpecError):
    """The tasks do not fit the hosts' ``hosts[].slots``: typed, so that a run whose hosts come
    from discovery can wait for room (launcher/app/up.py) without reading the message."""


def _slot_problems(spec: Spec, hosts: list[str]) -> list[tuple[tuple, str]]:
    """``hosts[].slots``: one line for the hosts given more tasks than their slots, at the first
    such host's ``slots``."""
    slots = {h.name: h.slots for h in spec.hosts if h.slots is not None}
    if not slots:
        return []
    count: dict[str, int] = {}
    for h in hosts:
        count[h] = count.get(h, 0) + 1
    over = [f"{h} ({count[h]} tasks, {n} slot{'s' if n != 1 else ''})" for h, n in slots.items() if count.get(h, 0) > n]
    if not over:
        return []
    first = next(i for i, h in enumerate(spec.hosts) if h.slots is not None and count.get(h.name, 0) > h.slots)
    return [(("hosts", first, "slots"), f"hosts[].slots: the tasks do not fit: {', '.join(over)}; add hosts, raise "
             "their slots, or place fewer tasks there (tasks.<type>.hosts)")]


def _thread_env(spec: Spec, placement: Placement, hosts: list[str]) -> tuple[list[tuple[tuple[str, str], ...]], str]:
    """``devices.threads`` as each task's extra env (in plan order) and the line ``plan`` shows.
    ``auto``: the budget where the placement knows the host's cores, else the task's place on its
    host (``TFCLUSTER_THREADS=I/N``) for the backend to complete when it starts the task."""
    setting = spec.devices.threads
    user = set(spec.env)
    if setting == 0 or user.issuperset(threads.NAMES):
        return [()] * len(hosts), threads.describe(0 if setting == 0 else "env")
    if setting != "auto":
        extra = tuple(sorted(threads.budget_env(setting, user).items()))
        return [extra] * len(hosts), threads.describe(setting)
    out = []
    known = set()
    for host, (place, n) in zip(hosts, threads.places(hosts)):
        cores = placement.cores.get(host)
        if cores is None:
            out.append(((envnames.THREADS, f"{place}/{n}"),))
        else:
            known.add(host)
            out.append(tuple(sorted(threads.budget_env(threads.share(cores, place, n), user).items())))
    if len(known) == 1 and len(set(hosts)) == 1:
        host = hosts[0]
        n = len(hosts)
        return out, threads.describe("auto", placement.cores[host], threads.shares(placement.cores[host], n))
    return out, threads.describe("auto")


def _device_env(spec: Spec) -> dict[str, str]:
    """``devices:`` and ``tpu:`` as the environment the worker reads."""
    env = {}
    # CUDA_VISIBLE_DEVICES is each task's own (launcher/plan/gpus.py); the collective settings every task's.
    if spec.collective.implementation != "auto":
        env[envnames.COLLECTIVE] = spec.collective.implementation
    if spec.collective.timeout is not None:
        env[envnames.COLLECTIVE_TIMEOUT] = f"{spec.collective.timeout:g}"
    if spec.devices.cpus is not None:
        env[envnames.CPUS] = str(spec.devices.cpus)
    if spec.devices.cpu_fallback:
        env[envnames.CPU_FALLBACK] = "1"
    if spec.strategy == "tpu":
        tpu = spec.tpu or Tpu()
        env[envnames.TPU] = tpu.name
        env.update({k: v for k, v in ((envnames.TPU_ZONE, tpu.zone), (envnames.TPU_PROJECT, tpu.project)) if v})
    return env


def _assign_ports(spec: Spec, placements: list[tuple[str, int, str, str]],
                  avoid: AbstractSet[tuple[str, int]] = frozenset()) -> list[Optional[int]]:
    """Explicit ports first, then ``base + n`` per host in task order, skipping taken ones and
    those in ``avoid``."""
    explicit: dict[int, int] = {}  # placement idx -> port
    taken: dict[tuple[str, int], str] = {}  # (host, port) -> task key
    for i, (task_type, index, host, _addr) in enumerate(placements):
        group = spec.tasks.group(task_type)
        if group.ports is not None:
            port = group.ports[index]
            if task_type == "evaluator":
                continue
            other = taken.get((host, port))
            if other:
                raise SpecError(
                    f"tasks.{task_type}.ports: port {port} on {host} is used by both {other} and "
                    f"{task_type}:{index}; give each task on a host its own port",
                    keys=(("tasks", task_type, "ports", index),))
            taken[(host, port)] = f"{task_type}:{index}"
            explicit[i] = port
    next_port: dict[str, int] = {}
    ports: list[Optional[int]] = []
    for i, (task_type, index, host, _addr) in enumerate(placements):
        if task_type == "evaluator" or spec.single_host:  # serves nothing
            ports.append(None)
            continue
        if i in explicit:
            ports.append(explicit[i])
            continue
        port = next_port.get(host, spec.ports.base)
        while (host, port) in taken or (host, port) in avoid:
            port += 1
        if port > 65535:
            raise SpecError(
                f"ports.base: {spec.ports.base} leaves no room for {task_type}:{index} on {host} "
                f"(would need port {port} > 65535); lower ports.base", keys=(("ports", "base"),))
        taken[(host, port)] = f"{task_type}:{index}"
        next_port[host] = port + 1
        ports.append(port)
    return ports
