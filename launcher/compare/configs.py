"""Which configurations a comparison runs: one derived spec per (spec file, strategy). Pure.

A derived spec is the user's spec with only what the strategy needs changed, so every
configuration trains the same entrypoint (model, data, seed, per-replica batch, epochs):

* single-host strategies run ``tasks: {worker: 1}``; ``mirrored`` and ``central_storage`` get
  ``devices: {cpus: N}`` (``--cpus``, unless the spec sets devices.cpus or N is 0) so they run N
  replicas without GPUs; ``default`` and ``one_device`` use the machine undivided;
* ``multi_worker_mirrored`` keeps the spec's tasks if it is the spec's own strategy, else runs
  ``{worker: W}``; ``parameter_server`` likewise, else ``{chief: 1, ps: 1, worker: W}``
  (``--workers``); neither takes devices.cpus; an evaluator task is dropped (the comparison
  evaluates after every epoch itself, with $TFCLUSTER_EPOCH_EVAL=1);
* ``--gpus N`` (``Options.gpus``): ``mirrored``/``central_storage`` over N GPUs,
  ``multi_worker_mirrored`` and ``parameter_server`` with N workers of one GPU each
  (``tasks.worker.gpus: 1``), ``default``/``one_device`` on one GPU; ``devices.gpus: N`` (a
  machine with fewer is refused in one line); without ``--strategies`` those three are compared;
* the run name becomes ``<name>-<label>`` and run records go under the comparison's directory,
  so every configuration starts from an empty state dir.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from launcher.contract import envnames
from launcher.spec.model import SINGLE_HOST_STRATEGIES, STRATEGIES

# Strategies that run several replicas in one task: on a machine without GPUs, on logical CPUs.
CPU_REPLICA_STRATEGIES = ("mirrored", "central_storage")


@dataclass(frozen=True)
class Options:
    strategies: tuple[str, ...] = ()  # empty: each spec file as it is
    repeat: int = 1
    target_accuracy: Optional[float] = None
    cpus: int = 2  # logical CPU devices for mirrored/central_storage (0: leave devices alone)
    workers: int = 2  # workers for multi_worker_mirrored/parameter_server derived from another strategy
    progress_every: int = 5  # steps between progress lines (the examples/s intervals)
    # GPUs to compare on (0: none): mirrored/central_storage over N GPUs, multi_worker_mirrored and
    # parameter_server with N workers a GPU each, default/one_device on one GPU.
    gpus: int = 0


@dataclass(frozen=True)
class Config:
    label: str  # unique in the comparison: "mirrored", or "<spec stem>-mirrored" with several files
    strategy: str
    source: str  # the spec file it derives from
    spec: dict = field(default_factory=dict)  # the derived spec (YAML mapping)

    @property
    def topology(self) -> str:
        """``worker:1`` or ``chief:1 ps:1 worker:2``."""
        parts = []
        for task_type, value in self.spec.get("tasks", {}).items():
            count = value.get("count", 1) if isinstance(value, dict) else value
            if count:
                parts.append(f"{task_type}:{count}")
        return " ".join(parts)

    @property
    def tasks(self) -> int:
        return sum(int(p.split(":")[1]) for p in self.topology.split())

    @property
    def devices(self) -> str:
        """``cpus=2``, ``gpus=[0, 1]`` or ``-`` (the machine as TensorFlow finds it)."""
        devices = self.spec.get("devices") or {}
        return " ".join(f"{k}={v}" for k, v in devices.items()) or "-"


def parse_strategies(text: str) -> tuple[str, ...]:
    """``default,mirrored`` -> the names; ValueError naming an unknown one and the valid ones."""
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise ValueError("--strategies: empty; give a comma-separated list, e.g. default,mirrored")
    for name in names:
        if name not in STRATEGIES:
            raise ValueError(f"--strategies: unknown strategy '{name}'; use some of {', '.join(STRATEGIES)}")
    if len(set(names)) != len(names):
        raise ValueError("--strategies: a strategy is listed twice; list each once (use --repeat for repeats)")
    return names


def derive(raw: dict, strategy: str, label: str, options: Options, run_dir: str) -> dict:
    """The spec ``strategy`` runs with, derived from the user's spec ``raw`` (not modified)."""
    spec = _common(raw, label, options, run_dir)
    own = raw.get("strategy")
    spec["strategy"] = strategy
    devices = dict(spec.get("devices") or {})
    if options.gpus and strategy != "tpu":
        return _on_gpus(spec, raw, strategy, options, devices)
    if strategy in SINGLE_HOST_STRATEGIES:
        spec["tasks"] = {"worker": _single_task(raw.get("tasks"))}
        if strategy in CPU_REPLICA_STRATEGIES:
            if "cpus" not in devices and options.cpus > 1:
                devices["cpus"] = options.cpus
        else:
            devices.pop("cpus", None)
    else:
        devices.pop("cpus", None)
        tasks = raw.get("tasks")
        if strategy == own and isinstance(tasks, dict):
            spec["tasks"] = {k: v for k, v in tasks.items() if k != "evaluator"}
        elif strategy == "multi_worker_mirrored":
            spec["tasks"] = {"worker": options.workers}
        else:
            spec["tasks"] = {"chief": 1, "ps": 1, "worker": options.workers}
    if devices:
        spec["devices"] = devices
    else:
        spec.pop("devices", None)
    if strategy != "tpu":
        spec.pop("tpu", None)
    return spec


def _on_gpus(spec: dict, raw: dict, strategy: str, options: Options, devices: dict) -> dict:
    """``--gpus N``: the run may use GPUs 0..N-1 (devices.gpus N: a machine with fewer is refused
    in one line); mirrored/central_storage over all N in one task, multi_worker_mirrored and
    parameter_server N workers with a GPU each, default/one_device one GPU."""
    devices.pop("cpus", None)
    n = options.gpus
    if strategy in SINGLE_HOST_STRATEGIES:
        spec["tasks"] = {"worker": _single_task(raw.get("tasks"))}
        devices["gpus"] = n if strategy in CPU_REPLICA_STRATEGIES else 1
    else:
        workers = {"count": n, "gpus": 1}
        spec["tasks"] = {"worker": workers} if strategy == "multi_worker_mirrored" else \
            {"chief": 1, "ps": 1, "worker": workers}
        devices["gpus"] = n
    spec["devices"] = devices
    spec.pop("tpu", None)
    return spec


def as_is(raw: dict, label: str, options: Options, run_dir: str) -> dict:
    """A spec file compared as it is (several files, no --strategies): only the run name, the
    run records' place and the comparison's environment change."""
    return _common(raw, label, options, run_dir)


def _common(raw: dict, label: str, options: Options, run_dir: str) -> dict:
    spec: dict[str, Any] = copy.deepcopy(raw)
    spec["name"] = f"{raw.get('name', 'run')}-{label}"
    spec["run_dir"] = run_dir
    env = dict(spec.get("env") or {})
    env[envnames.EPOCH_EVAL] = "1"
    env.setdefault(envnames.PROGRESS_EVERY, str(options.progress_every))
    spec["env"] = env
    return spec


def _single_task(tasks: Any) -> Any:
    """``1``, or the spec's first task group's placement with count 1 (an ssh host list)."""
    if isinstance(tasks, dict):
        for value in tasks.values():
            if isinstance(value, dict) and value.get("hosts"):
                return {"count": 1, "hosts": list(value["hosts"])[:1]}
    return 1


def configurations(sources: list[tuple[str, dict]], options: Options, run_dir: str) -> list[Config]:
    """The configurations for the spec files (``(path, raw mapping)``, in order): each file
    under each of ``options.strategies``, or each file as it is when none are given."""
    several = len(sources) > 1
    out: list[Config] = []
    seen: set[str] = set()
    for path, raw in sources:
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        for strategy in options.strategies or (raw.get("strategy"),):
            if options.strategies:
                label = f"{stem}-{strategy}" if several else str(strategy)
            else:
                label = stem
            base, n = label, 2
            while label in seen:
                label, n = f"{base}-{n}", n + 1
            seen.add(label)
            spec = derive(raw, strategy, label, options, run_dir) if options.strategies else \
                as_is(raw, label, options, run_dir)
            out.append(Config(label=label, strategy=str(strategy), source=path, spec=spec))
    return out
