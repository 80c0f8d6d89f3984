"""GPU placement in words (launcher/plan/gpus.py makes it): the ``gpus:`` line ``plan`` and
``up`` show (each known host's GPUs, what its GPU tasks get, which stay idle and why, the
collective), whether ``up`` shows it and each task's GPUs, and a task's GPUs as ``status`` shows
them, from its env in the run record or from what the machine it started on said; what a
preflight found of the hosts' GPUs (``gpu_notes``). Pure.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.notices import HostNote, fold_hosts
from launcher.plan.gpus import Gpu, PlannedGpus, placement_off, start_collective, use_of
from launcher.remote import gpuplace
from launcher.remote.gpuplace import CUDA_VAR, GROWTH_VAR, plural


def describe(spec, tasks: Sequence, known: Mapping[str, Sequence[Gpu]], machines: Mapping[str, str] = {},
             limits: Mapping[str, Optional[str]] = {}, collective: str = "", failures: Mapping[str, str] = {}) -> str:
    """The line ``plan`` and ``up`` show for the GPUs: what each known host has, what its GPU
    tasks get and which of its GPUs stay idle and why, or that the figures are made where the tasks
    start; then the collective ``collective_choice`` made. ``machines``: a task host -> the
    machine whose GPUs it uses (Placement.machines); ``limits``: Placement.gpu_limits."""
    tail = f"; {collective}" if collective else ""
    if placement_off(spec):
        return "gpus: as the spec's env sets CUDA_VISIBLE_DEVICES" + tail
    if spec.devices.gpus == 0:
        return "gpus: none (devices.gpus 0: every task CUDA_VISIBLE_DEVICES=-1)" + tail
    users = [t for t in tasks if t.gpus.uses_gpu]
    if not users:
        return "gpus: no task uses one (CUDA_VISIBLE_DEVICES=-1)" + tail
    setting = f"gpus_per_task {spec.devices.gpus_per_task}, gpu_memory {spec.devices.gpu_memory}"
    parts = []
    unknown = False

    def gpu_host(t) -> str:
        return machines.get(t.host, t.host)

    for host in dict.fromkeys(gpu_host(t) for t in users):
        if host not in known:
            unknown = True
            continue
        mine = [t for t in users if gpu_host(t) == host]
        units, by_uuid = gpuplace.within(known[host], limits.get(host))
        if not known[host]:
            why = failures.get(host) or "nvidia-smi -L lists none"
            parts.append(f"no GPU found ({host}: {why}): its {plural(len(mine), 'GPU task')} "
                         "run on CPU")
            continue
        if not units:
            parts.append(f"no GPU found ({host}: CUDA_VISIBLE_DEVICES={limits.get(host)} leaves none): its "
                         f"{plural(len(mine), 'GPU task')} run on CPU")
            continue
        names = sorted({g[1] for g in units})
        shared = any(t.gpus.shared for t in mine)
        may = gpuplace.usable(units, use_of(spec)[0])
        word = "MIG device" if any(gpuplace.is_mig(u) for u in units) else "GPU"
        limit = f", the run may use {len(may)} (devices.gpus)" if len(may) < len(units) else ""
        if host in limits:
            limit += f", within CUDA_VISIBLE_DEVICES={limits[host][:80]}"
        line = (f"{host}: {plural(len(units), word)} ({', '.join(names)}{limit}) for {plural(len(mine), 'GPU task')}"
                + (", shared" + (" (memory growth)" if any(GROWTH_VAR in dict(t.base_env) for t in mine) else "")
                   if shared else ""))
        taken = {i for t in mine for i in range(len(may)) if t.gpus.ids is not None
                 and _unit_in(may[i], t.gpus, by_uuid)}
        idle = [may[i] for i in range(len(may)) if i not in taken]
        if idle:
            line += (f"; {gpuplace.visible_value(idle, by_uuid)} idle: " + idle_reason(spec, mine))
        parts.append(line)
    if unknown:
        parts.append(("other hosts'" if parts else "each host's") + " at start, from nvidia-smi -L there")
    return f"gpus: {setting}; " + "; ".join(parts) + tail


def _unit_in(unit, tg: PlannedGpus, by_uuid: bool) -> bool:
    """Whether a task's GPUs include the placement unit ``unit``."""
    if tg.visible:
        return str(unit[2]) in tg.visible.split(",")
    return unit[0] in (tg.ids or ())


def idle_reason(spec, tasks: Sequence) -> str:
    """Why GPUs stay idle: the equal shares (TensorFlow's rule), one_device, or the counts."""
    if spec.strategy == "one_device":
        return "one_device uses one GPU"
    if any(t.gpus.take == "auto" for t in tasks):
        return ("each worker gets the same count (TensorFlow's rule: ParameterServerStrategy refuses unequal "
                "workers, MultiWorkerMirroredStrategy leaves them undefined) and no evaluator takes the rest")
    return "the tasks' GPU counts (devices.gpus_per_task, tasks.<type>.gpus) take fewer"


def asked(spec) -> bool:
    """The spec sets a GPU key (so ``up`` says where the GPUs are, or that a host has none)."""
    d = spec.devices
    return (d.gpus != "all" or d.gpus_per_task != "auto" or d.gpu_memory != "auto"
            or spec.collective.implementation != "auto"
            or any(spec.tasks.group(t).gpus for t in ("chief", "worker", "ps", "evaluator")))


def show_gpus(plan) -> bool:
    """Whether ``plan`` shows each task's GPUs: some task has GPUs, or will get them where it starts
    (a plan on CPU-only hosts says so in its ``gpus:`` line only)."""
    return any(t.gpus.ids or (t.gpus.ids is None and t.gpus.uses_gpu) for t in plan.tasks)


def ids_text(ids: Sequence[int]) -> str:
    """``gpu 1``, ``gpus 0,1``, or ``cpu`` for none."""
    if not ids:
        return "cpu"
    return ("gpu " if len(ids) == 1 else "gpus ") + ",".join(str(i) for i in ids)


def env_collective(env_value: Callable[[str], Optional[str]]) -> str:
    """The all-reduce ``status`` shows for a planned task, from its env in the run record
    (``env_value(name)``): for a multi_worker_mirrored task its TFCLUSTER_COLLECTIVE (the plan's
    choice), else ``ring`` (TensorFlow's AUTO runs RING); "" under the other strategies."""
    if env_value(envnames.STRATEGY) != "multi_worker_mirrored":
        return ""
    return env_value(envnames.COLLECTIVE) or "ring"


def _uuids_text(visible: str) -> str:
    """A CUDA_VISIBLE_DEVICES of UUIDs as ``plan`` and ``status`` show it: each cut to 12
    characters (``gpu MIG-7c1e2d3f``), ``gpus`` before two or more."""
    named = ",".join(v.strip()[:12] for v in visible.split(","))[:60]
    return ("gpu " if "," not in visible else "gpus ") + named


def said_text(ids: Sequence[int], visible: str = "", collective: str = "") -> str:
    """A task's GPUs as the machine it started on said them (a task_gpus event): its MIG device
    or UUIDs where it said those (``gpu MIG-7c1e2d3f``, as ``plan`` shows a MIG device), else
    its indices (``gpus 0,1``), ``cpu`` for none; then ``collective`` (its all-reduce) where it
    has GPUs."""
    if not ids:
        return "cpu"
    return (_uuids_text(visible) if visible else ids_text(ids)) + (f" {collective}" if collective else "")


def env_text(env_value: Callable[[str], Optional[str]]) -> str:
    """A planned task's GPUs as ``status`` shows them, from its env in the run record
    (``env_value(name)``): its CUDA_VISIBLE_DEVICES (a UUID cut to 12 characters), else its
    request (``1 gpu (at start)``), else "" (the plan said nothing of GPUs); a
    multi_worker_mirrored task on GPUs also its all-reduce (``gpus 0,1 nccl``: the plan's choice;
    ``ring`` where TensorFlow's AUTO runs RING: ``env_collective``)."""
    visible = env_value(CUDA_VAR)
    coll = env_collective(env_value)
    coll = f" {coll}" if coll else ""
    if visible is not None:
        ids = visible_ids({CUDA_VAR: visible})
        if ids is not None:
            return ids_text(ids) + (coll if ids else "")
        return _uuids_text(visible) + coll
    req = gpuplace.parse_request(env_value(envnames.GPUS) or "")
    if req is None:
        return ""
    take = int(req["take"]) if req["take"].isdigit() else req["take"]
    return PlannedGpus(take=take).describe()


def visible_ids(env: Mapping[str, str]) -> Optional[list[int]]:
    """The GPU indices a completed env's CUDA_VISIBLE_DEVICES names ([] for -1 or empty), or
    None when it sets none (every GPU visible)."""
    value = env.get(CUDA_VAR)
    if value is None:
        return None
    try:
        ids = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        return None
    return [] if any(i < 0 for i in ids) else ids


def gpu_notes(plan, found: Mapping[str, Optional[Sequence[Gpu]]]) -> list[str]:
    """What a preflight found of each host's GPUs (``found``: host -> its GPUs, None where not
    asked), said once: the hosts whose GPU tasks run on CPU (no NVIDIA GPU there: one line for
    them all, ``fold_hosts``), what each other host has for which tasks, and the collective the
    task wrappers will pick."""
    notes = []
    for name, host_gpus in found.items():
        if host_gpus is None:
            continue
        mine = [t for t in plan.tasks if t.host == name and t.gpus.uses_gpu]
        if not mine:
            continue
        if not host_gpus:
            notes.append(HostNote(name, f"no GPU found ({name}: nvidia-smi -L lists none): its {len(mine)} GPU task"
                                        f"{'s run' if len(mine) > 1 else ' runs'} on CPU",
                                  "no GPU found on {hosts}: nvidia-smi -L lists none there; their GPU tasks run on CPU"))
        else:
            word = "MIG device" if any(str(g[2]).startswith("MIG-") for g in host_gpus) else "GPU"
            what = f"{len(host_gpus)} {word}{'s' if len(host_gpus) > 1 else ''} ({', '.join(sorted({g[1] for g in host_gpus}))})"
            alone = f"{name}: {what} for {', '.join(t.key for t in mine)}"
            notes.append(HostNote(name, alone, alone))  # (which tasks get them: a line each host)
    out = fold_hosts(notes)
    chosen = start_collective(plan, found)  # what the task wrappers will pick, said once
    if chosen:
        out.append(chosen)
    return out
