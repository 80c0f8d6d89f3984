"""What a plan is: the placement a backend answers with (``Placement``, ``Slot``), the plan's tasks
(``PlannedTask``: each one's TF_CONFIG and environment, made from the plan's shared ``Cluster`` and
base environment when asked for), the ``Plan``, and its JSON shapes (full, compact, and back).

launcher/plan/build.py makes a Plan from a spec and a placement; the names stay importable from there.
"""

from __future__ import annotations

import itertools
import json
import textwrap
from dataclasses import dataclass, field
from functools import cached_property
from typing import IO, Any, Iterator, Mapping, Optional

from launcher.contract import envnames
from launcher.plan import gpus
from launcher.plan.gpus import NO_GPU, PlannedGpus
# The one rule of what is a secret (stdlib: a forked task's title on a host masks with it too).
from launcher.remote.masking import MASK, is_secret, mask_argv  # noqa: F401 - re-exported
from launcher.spec.model import Host


@dataclass(frozen=True)
class Slot:
    """Where one task runs: ``host`` names the machine (spec host, "localhost", container or
    node name); ``address`` is what the other tasks dial to reach it."""

    host: str
    address: str


@dataclass(frozen=True)
class Placement:
    """A backend's answer to "where does each task run?" (``BackendKind.place``/``Hosts.allocate``).

    ``slots`` maps every task key (``worker:0``) to its Slot. ``placeholder`` is True when the
    hosts are stand-ins because the backend learns the real nodes only when it allocates them;
    ``note`` then says so in a few words for ``tfcluster plan`` and ``--dry-run``.
    """

    slots: Mapping[str, Slot]
    placeholder: bool = False
    note: str = ""
    # Host name -> its cores, where the backend knows them when it plans (local): ``threads: auto``
    # budgets are then in the plan; other hosts' are made when their tasks start.
    cores: Mapping[str, int] = field(default_factory=dict)
    # Host name -> its GPUs (``nvidia-smi -L``: (index, name, uuid)), where the backend knows them
    # when it plans (local; () for none): the tasks' GPUs are then in the plan, and a host that
    # cannot give them is refused here; other hosts' are made when their tasks start.
    gpus: Mapping[str, tuple[gpus.Gpu, ...]] = field(default_factory=dict)
    # Host name -> the machine it is a container on (docker, compose: every container is on the
    # engine's host): the thread and GPU arithmetic runs over that machine's tasks (``cores`` and
    # ``gpus`` name the machine), and a container sees its GPUs numbered from 0 (a device request).
    machines: Mapping[str, str] = field(default_factory=dict)
    # Host name -> the CUDA_VISIBLE_DEVICES in force there when the plan knows it (local: the
    # launcher's own): the GPUs its tasks may get, which they receive subsets of.
    gpu_limits: Mapping[str, str] = field(default_factory=dict)
    # Host name -> why nvidia-smi -L listed no GPU there, in its own words, where it failed (no
    # driver): a plan that needs GPUs there is refused with it, an ``auto`` one says it.
    gpu_failures: Mapping[str, str] = field(default_factory=dict)
    # The most GPUs an auto trainer gets on hosts that make their tasks' GPUs where they start
    # (ssh), once the preflight has seen every host's: the smallest host's share, so every worker
    # gets the same count (0: no cap).
    gpu_cap: int = 0


@dataclass(frozen=True)
class Cluster:
    """TF_CONFIG's ``cluster``: every member's ``address:port`` by task type, in plan order.

    A plan holds it once and every task shares it (a copy per task is O(n²) in all: 10,000
    tasks would hold 10,000 copies of a 10,000-entry list); its JSON text is made once.
    """

    jobs: tuple[tuple[str, tuple[str, ...]], ...]

    def __hash__(self) -> int:  # the JSON text's (made once, its hash cached): tasks hash in O(1)
        return hash(self.json_text)

    def to_json(self) -> dict[str, list[str]]:
        return {task_type: list(members) for task_type, members in self.jobs}

    @cached_property
    def json_text(self) -> str:
        """The cluster as TF_CONFIG spells it (compact separators), made once."""
        return json.dumps(self.to_json(), separators=(",", ":"))


@dataclass(frozen=True)
class PlannedTask:
    """One task of a plan. Its TF_CONFIG and environment are built from the plan's shared pieces
    (``cluster``, ``base_env``) when asked for (``tf_config_json``, ``env``), i.e. when the task
    is started or shown: the plan itself stays O(n) in the number of tasks."""

    type: str
    index: int
    host: str  # host name (spec hosts, "localhost", or the container name)
    address: str  # what other tasks dial
    port: Optional[int]  # None for the evaluator, which serves nothing
    command: tuple[str, ...]
    # Shared by every task of the plan (the same objects): None for single-host strategies,
    # whose TF_CONFIG is the task's role only.
    cluster: Optional[Cluster] = None
    # Every task's environment except its own TF_CONFIG and TFCLUSTER_TASK, sorted.
    base_env: tuple[tuple[str, str], ...] = ()
    # Its GPU request and, where the plan knew its host's GPUs, which ones (launcher/plan/gpus.py).
    gpus: PlannedGpus = NO_GPU

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
    def task_json(self) -> str:
        """TF_CONFIG's ``task`` part, this task's own: ``{"type":"worker","index":1}``."""
        return f'{{"type":{json.dumps(self.type)},"index":{self.index}}}'

    @property
    def tf_config_json(self) -> str:
        """The TF_CONFIG this task gets (built now: O(n) in the cluster's size)."""
        if self.cluster is None:
            return f'{{"task":{self.task_json}}}'
        return f'{{"cluster":{self.cluster.json_text},"task":{self.task_json}}}'

    @property
    def tf_config(self) -> dict[str, Any]:
        if self.cluster is None:
            return {"task": {"type": self.type, "index": self.index}}
        return {"cluster": self.cluster.to_json(), "task": {"type": self.type, "index": self.index}}

    @property
    def own_env(self) -> dict[str, str]:
        """What only this task's environment holds (on top of ``base_env``)."""
        return {"TF_CONFIG": self.tf_config_json, envnames.TASK: self.key}

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """The task's whole environment, sorted: ``base_env`` plus its TF_CONFIG and TFCLUSTER_TASK."""
        return tuple(sorted({**dict(self.base_env), **self.own_env}.items()))

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
    # ``devices.threads`` as ``plan`` shows it (launcher/plan/threads.py's describe).
    threads: str = ""
    # The GPUs as ``plan`` and ``up`` show them (launcher/plan/gpus.py's describe).
    gpus: str = ""

    def task(self, key: str) -> PlannedTask:
        return self._by_key[key]

    @cached_property
    def _by_key(self) -> dict[str, PlannedTask]:
        return {t.key: t for t in self.tasks}

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

    @property
    def cluster(self) -> Optional[Cluster]:
        """The cluster every task shares (None: a single-host strategy, or no task)."""
        return self.tasks[0].cluster if self.tasks else None

    def to_json(self, secrets: bool = True) -> dict[str, Any]:
        """The documented ``plan --json`` shape: every task with its whole TF_CONFIG and env
        (O(n²) in all; ``to_compact_json`` holds the cluster once). ``secrets=False``
        redacts secret-looking env values and command arguments."""
        return {**self._head(), "tasks": list(self.iter_task_json(secrets))}

    def iter_task_json(self, secrets: bool = True) -> Iterator[dict[str, Any]]:
        """``to_json``'s tasks one at a time (a writer can stream them: one copy at a time)."""
        for t in self.tasks:
            env = t.env_dict
            yield {
                "type": t.type,
                "index": t.index,
                "host": t.host,
                "address": t.address,
                "port": t.port,
                "tf_config": t.tf_config,
                "command": list(t.command) if secrets else redact_command(t.command),
                "env": env if secrets else redact_env(env),
            }

    def to_compact_json(self, secrets: bool = True) -> dict[str, Any]:
        """The plan with the cluster once (``plan --json=compact`` and the record's ``plan.json``):
        ``cluster`` (null for single-host strategies), the ``command`` and ``env`` every task
        shares (without TF_CONFIG and TFCLUSTER_TASK), and per task only what is its own; a task
        whose command differs carries its own; one whose env adds to or changes the shared one
        carries those variables only (``env_extra``: e.g. its thread budget, its GPUs), one whose
        env lacks a shared variable their names (``env_drop``: e.g. a GPU task's lacks the
        ``CUDA_VISIBLE_DEVICES=-1`` of a first task without GPU; records before ``env_drop`` carried
        such a task's whole ``env``). Each task's TF_CONFIG is ``{"cluster": cluster, "task":
        {"type": type, "index": index}}``: ``to_json`` is the full shape."""
        first = self.tasks[0] if self.tasks else None
        command = list(first.command) if first else []
        base = dict(first.base_env) if first else {}
        tasks = []
        own_envs: dict[int, tuple[dict[str, str], list[str]]] = {}  # per distinct base_env (a few, shared)
        for t in self.tasks:
            row: dict[str, Any] = {"type": t.type, "index": t.index, "host": t.host, "address": t.address,
                                   "port": t.port}
            if t.command != first.command:
                row["command"] = list(t.command) if secrets else redact_command(t.command)
            if t.base_env is not first.base_env and t.base_env != first.base_env:
                if id(t.base_env) not in own_envs:
                    env = dict(t.base_env)
                    extra = {k: v for k, v in env.items() if base.get(k) != v}
                    drop = sorted(set(base) - set(env))
                    own_envs[id(t.base_env)] = (extra, drop)
                extra, drop = own_envs[id(t.base_env)]
                if extra:
                    row["env_extra"] = extra if secrets else redact_env(extra)
                if drop:
                    row["env_drop"] = drop
            tasks.append(row)
        cluster = self.cluster
        return {**self._head(), "format": COMPACT, "cluster": cluster.to_json() if cluster else None,
                "command": command if secrets else redact_command(command),
                "env": base if secrets else redact_env(base), "tasks": tasks}

    def _head(self) -> dict[str, Any]:
        return {"name": self.name, "strategy": self.strategy, "backend": self.backend,
                "placeholder": self.placeholder}


def write_full_json(plan: Plan, out: IO[str], secrets: bool = True, head: Optional[Mapping[str, Any]] = None) -> None:
    """``json.dumps({**head, **plan.to_json(secrets)}, indent=2)`` and a newline, written a task at
    a time: the text is O(n²) (each task holds the whole cluster), the memory only one task's."""
    tasks = plan.iter_task_json(secrets)
    first = next(tasks, None)
    if first is None:
        out.write(json.dumps({**(head or {}), **plan.to_json(secrets)}, indent=2) + "\n")
        return
    head = json.dumps({**(head or {}), **plan._head()}, indent=2)
    out.write(head[:-2] + ',\n  "tasks": [\n')
    for i, task in enumerate(itertools.chain([first], tasks)):
        if i:
            out.write(",\n")
        out.write(textwrap.indent(json.dumps(task, indent=2), "    "))
    out.write("\n  ]\n}\n")


# ``format`` of a compact plan JSON (``Plan.to_compact_json``); the full shape has no ``format``.
COMPACT = "compact"


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Hide the values ``is_secret`` picks out (by name or by value) for display and records."""
    return {k: (MASK if is_secret(k, v) else v) for k, v in env.items()}


def redact_command(argv) -> list[str]:
    """A task's command for display and records: each secret argument masked (``mask_argv``: the
    same words and shapes as ``is_secret``'s, in each spelling of an option)."""
    return mask_argv(argv)
