"""GPUs for containers (``backend: docker`` and ``tfcluster compose``): which of the engine host's
GPUs each container gets, as a device request, and its ``/dev/shm``.

Every container of a run shares one host, the engine's (the backend's engine runs on this
machine: its containers bind-mount the run record), so the plan's per-host arithmetic
(launcher/plan/gpus.py, launcher/remote/gpuplace.py) runs once over all the tasks as if on that one
host, with the GPUs ``nvidia-smi -L`` lists here: ``gpus_per_task: N`` tasks get disjoint
indices, ``auto`` divides them, ps and the parameter_server chief get none.

A container with GPUs gets them as a device request (``DeviceRequests``: the task's indices,
capability ``gpu``; the NVIDIA container runtime maps them). Inside, they are numbered from 0,
so its CUDA_VISIBLE_DEVICES is ``0..k-1`` (the host's indices would name GPUs it does not have).
A CPU task's container gets no request and CUDA_VISIBLE_DEVICES=-1. The plan holds each
container's env as it runs (``placement`` gives build_plan the engine's host, its cores and GPUs;
``inside`` numbers the GPUs from 0): the backend and ``tfcluster compose`` add only the device
request and /dev/shm (``container``).

``docker.shm_size``: the container's /dev/shm. Docker's default is 64 MB, too small for NCCL's
shared-memory transport between GPUs; a container with GPUs gets 1 GB unless the spec says, a
CPU task's container keeps the engine's default unless the spec says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from launcher.plan import gpus as plan_gpus
from launcher.plan.model import Placement, Slot
from launcher.remote import gpuplace
from launcher.spec.model import TASK_TYPES

HOST = "the Docker engine's host"
GPU_SHM = "1g"  # a GPU container's /dev/shm unless docker.shm_size says


@dataclass(frozen=True)
class Container:
    """What one task's container is given for its GPUs besides the plan's env: the device ids to
    request (host indices, or UUIDs) and its /dev/shm."""

    device_ids: tuple = ()
    shm_size: Optional[str] = None

    def device_requests(self) -> list[dict]:
        """``HostConfig.DeviceRequests`` as the engine's API spells it (none for a CPU task)."""
        if not self.device_ids:
            return []
        return [{"Driver": "", "Count": 0, "DeviceIDs": [str(i) for i in self.device_ids],
                 "Capabilities": [["gpu"]], "Options": {}}]


def asked(spec) -> bool:
    """Some task uses GPUs (and the spec's env does not set CUDA_VISIBLE_DEVICES itself)."""
    if plan_gpus.placement_off(spec):
        return False
    types = [t for t in ("chief", "worker", "ps", "evaluator") if spec.tasks.count(t)]
    return any(plan_gpus.take_of(spec, t)[0] != 0 for t in types)


def placement(spec, engine_gpus: Optional[Sequence] = None, cores: Optional[int] = None,
              limit: Optional[str] = None) -> Placement:
    """A container per task, named (and dialled) like the task (``worker-0``), every one on the
    engine's host (``HOST``): with its ``cores`` (the threads' budgets are then in the plan) and,
    where ``engine_gpus`` is given (nvidia-smi -L's placement units there) and some task uses a
    GPU, its GPUs within ``limit`` (the launcher's CUDA_VISIBLE_DEVICES: the containers get
    subsets of it). Pure."""
    slots = {f"{t}:{i}": Slot(f"{t}-{i}", f"{t}-{i}") for t, i in task_keys(spec)}
    machines = {slot.host: HOST for slot in slots.values()}
    out = Placement(slots, machines=machines, cores={HOST: cores} if cores else {})
    if engine_gpus is None or not asked(spec):
        return out
    return replace(out, gpus={HOST: tuple(engine_gpus)}, gpu_limits={HOST: limit} if limit is not None else {})


def task_keys(spec) -> list[tuple[str, int]]:
    return [(t, i) for t in TASK_TYPES for i in range(spec.tasks.count(t))]


def refused(spec, engine_gpus: Sequence, limit: Optional[str] = None) -> list[str]:
    """The one-line problems of giving the spec's containers ``engine_gpus`` (none: they hold)."""
    keys = [k for t, i in task_keys(spec) for k in (f"{t}:{i}",)]
    limits = {HOST: limit} if limit is not None else {}
    _, _, problems = plan_gpus.plan_gpus(spec, [HOST] * len(keys), [k.split(":")[0] for k in keys],
                                         {HOST: tuple(engine_gpus)}, limits)
    return problems


def inside(spec, task_gpus: Sequence, extras: Sequence[tuple[tuple[str, str], ...]]
           ) -> list[tuple[tuple[str, str], ...]]:
    """Each container's GPU env as it sees it: its GPUs numbered from 0 (the device request
    gives it only its own, ``CUDA_VISIBLE_DEVICES=0..k-1``; the host's indices would name GPUs it
    does not have) without the host's ordering. A spec env with CUDA_VISIBLE_DEVICES wins."""
    if plan_gpus.placement_off(spec) or gpuplace.CUDA_VAR in spec.env:
        return list(extras)
    out = []
    cache: dict[tuple, tuple[tuple[str, str], ...]] = {}  # a few distinct ones, shared
    for tg, extra in zip(task_gpus, extras):
        ids = device_ids(tg)
        if not ids:
            out.append(extra)
            continue
        env = {k: v for k, v in extra if k != gpuplace.ORDER_VAR}
        env[gpuplace.CUDA_VAR] = ",".join(str(i) for i in range(len(ids)))
        key = tuple(sorted(env.items()))
        out.append(cache.setdefault(key, key))
    return out


def device_ids(tg) -> tuple:
    """A task's GPUs as its container's device request names them: by UUID where its
    CUDA_VISIBLE_DEVICES named UUIDs (a MIG device, or a limit by UUID), else by index."""
    if not tg.ids:
        return ()
    return tuple(tg.visible.split(",")) if tg.visible else tuple(tg.ids)


def container(task, shm_size: Optional[str]) -> Container:
    """A planned task's container: its device request and /dev/shm (1 GB with GPUs unless
    ``shm_size``, docker.shm_size, says; the engine's default for a CPU task unless it says)."""
    ids = device_ids(task.gpus)
    return Container(ids, shm_size or (GPU_SHM if ids else None))


def engine_gpus(spec) -> Optional[tuple]:
    """The engine host's GPUs (nvidia-smi -L here: the engine runs on this machine) where some
    task uses one, else None (not asked)."""
    return plan_gpus.local_gpus() if asked(spec) else None


def with_engine_gpus(spec, cores: Optional[int] = None) -> Placement:
    """The containers' Placement with the engine host's GPUs (``nvidia-smi -L`` here) where they
    hold the GPU tasks (none found: an auto task runs on CPU), so that the plan (``tfcluster plan``,
    the run record, ``status``) shows each container's GPUs and its env is what it runs with; left
    to the preflight where they do not suffice (it refuses in its one line, ``docker: ...``)."""
    found = engine_gpus(spec)
    limit = launcher_limit().get(HOST)
    if found is None or refused(spec, found, limit):
        return placement(spec, cores=cores)
    return placement(spec, found, cores, limit)


def launcher_limit() -> dict[str, str]:
    """{HOST: the launcher's CUDA_VISIBLE_DEVICES} where it has one: the engine host's GPUs the run
    may use (the engine runs on this machine)."""
    import os

    value = os.environ.get(gpuplace.CUDA_VAR)
    return {HOST: value} if value is not None else {}


def runtime_problem(url: str, explanation: str) -> Optional[str]:
    """The one line for an engine that refused a GPU device request (None: another refusal)."""
    if "could not select device driver" not in explanation:
        return None
    first = explanation.strip().splitlines()[0][:200]
    return (f"docker: the Docker engine at {url} has no GPU runtime ({first}); install the NVIDIA Container "
            "Toolkit on its host (nvidia-ctk runtime configure --runtime=docker, then restart dockerd), or run "
            "on CPU: devices.gpus: 0")


def describe(tasks: Sequence, engine_gpus: Sequence) -> str:
    """The start line: which container (a planned task) gets which of the engine host's GPUs."""
    if not engine_gpus:
        return f"docker: no GPU found ({HOST}: nvidia-smi -L lists none): the tasks run on CPU"
    parts = [f"{t.key} gpu{'s' if len(ids) > 1 else ''} {','.join(str(i) for i in ids)}"
             for t in tasks for ids in (device_ids(t.gpus),) if ids]
    return f"docker: {HOST} has {gpuplace.plural(len(engine_gpus))}; " + ("; ".join(parts) or "no task uses one")
