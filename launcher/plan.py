"""spec + placement -> plan: a pure function that assigns ports and builds TF_CONFIG.

Where each task runs (its host and the address others dial) is the backend's answer
(``Backend.place`` / ``Backend.allocate``, a ``Placement``); everything else is decided here.
The plan is the single immutable description every backend executes and ``tfcluster plan``
prints; nothing here touches the network, the file system or the clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .errors import SpecError
from .specmodel import TASK_TYPES, Host, Spec, Tpu

# Task types that are members of the TF cluster (the evaluator is kept out of ``cluster``).
CLUSTER_TYPES = ("chief", "worker", "ps")
# Keras 3 (tf.keras since TF 2.16) cannot fit on a distributed dataset under these strategies;
# tf_keras can. Tasks get TF_USE_LEGACY_KERAS=1 by default (as Ray Train's TensorflowTrainer
# does), so the TF tutorial runs unmodified; a spec's ``env`` overrides it.
DEFAULT_ENV = {
    "multi_worker_mirrored": {"TF_USE_LEGACY_KERAS": "1"},
    "parameter_server": {"TF_USE_LEGACY_KERAS": "1"},
}


@dataclass(frozen=True)
class Slot:
    """Where one task runs: ``host`` names the machine (spec host, "localhost", container or
    node name); ``address`` is what the other tasks dial to reach it."""

    host: str
    address: str


@dataclass(frozen=True)
class Placement:
    """A backend's answer to "where does each task run?" (``Backend.place``/``allocate``).

    ``slots`` maps every task key (``worker:0``) to its Slot. ``placeholder`` is True when the
    hosts are stand-ins because the backend learns the real nodes only when it allocates them;
    ``note`` then says so in a few words for ``tfcluster plan`` and ``--dry-run``.
    """

    slots: Mapping[str, Slot]
    placeholder: bool = False
    note: str = ""


@dataclass(frozen=True)
class PlannedTask:
    type: str
    index: int
    host: str  # host name (spec hosts, "localhost", or the container name)
    address: str  # what other tasks dial
    port: Optional[int]  # None for the evaluator, which serves nothing
    tf_config_json: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def slug(self) -> str:
        """File- and container-friendly name: ``worker-1``."""
        return f"{self.type}-{self.index}"

    @property
    def endpoint(self) -> Optional[str]:
        return f"{self.address}:{self.port}" if self.port is not None else None

    @property
    def tf_config(self) -> dict[str, Any]:
        return json.loads(self.tf_config_json)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class Plan:
    name: str
    strategy: str
    backend: str
    tasks: tuple[PlannedTask, ...]
    hosts: tuple[Host, ...] = field(default=())
    # True when hosts/addresses are stand-ins until the backend allocates (see Placement).
    placeholder: bool = False
    placement_note: str = ""

    def task(self, key: str) -> PlannedTask:
        for t in self.tasks:
            if t.key == key:
                return t
        raise KeyError(key)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(t.key for t in self.tasks)

    @property
    def success_task(self) -> str:
        """The task whose exit decides success: the chief, or worker 0 when there is none."""
        types = {t.type for t in self.tasks}
        return "chief:0" if "chief" in types else "worker:0"

    def host(self, name: str) -> Optional[Host]:
        return next((h for h in self.hosts if h.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "strategy": self.strategy,
            "backend": self.backend,
            "placeholder": self.placeholder,
            "tasks": [
                {
                    "type": t.type,
                    "index": t.index,
                    "host": t.host,
                    "address": t.address,
                    "port": t.port,
                    "tf_config": t.tf_config,
                    "command": list(t.command),
                    "env": t.env_dict,
                }
                for t in self.tasks
            ],
        }


def task_keys(spec: Spec) -> list[tuple[str, int]]:
    """Every task of the spec as (type, index), in plan order (chief, worker, ps, evaluator)."""
    return [(t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t))]


def build_plan(spec: Spec, placement: Placement) -> Plan:
    """Assign ports on the hosts of ``placement`` and build each task's TF_CONFIG and environment."""
    placements = []  # [(type, index, host_name, address)]
    for task_type, index in task_keys(spec):
        slot = placement.slots.get(f"{task_type}:{index}")
        if slot is None:
            raise ValueError(f"placement has no slot for {task_type}:{index}")  # a backend's bug
        placements.append((task_type, index, slot.host, slot.address))
    ports = _assign_ports(spec, placements)
    cluster: dict[str, list[str]] = {}
    for (task_type, index, _host, address), port in zip(placements, ports):
        if task_type in CLUSTER_TYPES:
            cluster.setdefault(task_type, []).append(f"{address}:{port}")
    tasks = []
    argv = spec.argv
    for (task_type, index, host, address), port in zip(placements, ports):
        # Single-host strategies: the task's role only, no cluster (no TF server to start).
        tf_config = {"task": {"type": task_type, "index": index}}
        if not spec.single_host:
            tf_config = {"cluster": cluster, **tf_config}
        tf_json = json.dumps(tf_config, separators=(",", ":"))
        env = dict(DEFAULT_ENV.get(spec.strategy, {}))
        env.update(spec.env)
        env.update(
            {
                "TF_CONFIG": tf_json,
                "PYTHONUNBUFFERED": "1",
                "TFCLUSTER_NAME": spec.name,
                "TFCLUSTER_STRATEGY": spec.strategy,
                "TFCLUSTER_TASK": f"{task_type}:{index}",
            }
        )
        env.update(_device_env(spec))
        tasks.append(
            PlannedTask(
                type=task_type,
                index=index,
                host=host,
                address=address,
                port=port,
                tf_config_json=tf_json,
                command=argv,
                env=tuple(sorted(env.items())),
            )
        )
    used_hosts = {t.host for t in tasks}
    hosts = tuple(h for h in spec.hosts if h.name in used_hosts)
    return Plan(name=spec.name, strategy=spec.strategy, backend=spec.backend, tasks=tuple(tasks), hosts=hosts,
                placeholder=placement.placeholder, placement_note=placement.note)


def _device_env(spec: Spec) -> dict[str, str]:
    """``devices:`` and ``tpu:`` as the environment the worker reads."""
    env = {}
    if spec.devices.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.devices.cuda_visible_devices
    if spec.devices.cpus is not None:
        env["TFCLUSTER_CPUS"] = str(spec.devices.cpus)
    if spec.strategy == "tpu":
        tpu = spec.tpu or Tpu()
        env["TFCLUSTER_TPU"] = tpu.name
        env.update({f"TFCLUSTER_TPU_{k.upper()}": v for k, v in (("zone", tpu.zone), ("project", tpu.project)) if v})
    return env


def _assign_ports(spec: Spec, placements: list[tuple[str, int, str, str]]) -> list[Optional[int]]:
    """Explicit ports first, then ``base + n`` per host in task order, skipping taken ones."""
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
                    f"{task_type}:{index}; give each task on a host its own port"
                )
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
        while (host, port) in taken:
            port += 1
        if port > 65535:
            raise SpecError(
                f"ports.base: {spec.ports.base} leaves no room for {task_type}:{index} on {host} "
                f"(would need port {port} > 65535); lower ports.base"
            )
        taken[(host, port)] = f"{task_type}:{index}"
        next_port[host] = port + 1
        ports.append(port)
    return ports


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Hide values of secret-looking variables (KEY, TOKEN, SECRET, PASSWORD) for display."""
    return {k: ("***" if is_secret(k) else v) for k, v in env.items()}


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"))
