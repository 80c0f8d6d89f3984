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
A CPU task's container gets no request and CUDA_VISIBLE_DEVICES=-1.

``docker.shm_size``: the container's /dev/shm. Docker's default is 64 MB, too small for NCCL's
shared-memory transport between GPUs; a container with GPUs gets 1 GB unless the spec says, a
CPU task's container keeps the engine's default unless the spec says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.plan import gpus as plan_gpus
from launcher.remote import gpuplace

HOST = "the Docker engine's host"
GPU_SHM = "1g"  # a GPU container's /dev/shm unless docker.shm_size says
# What the plan may have put in a task's env for its GPUs; replaced by what this module makes.
MADE = (envnames.GPUS, envnames.GPU_MEMORY, gpuplace.CUDA_VAR, gpuplace.ORDER_VAR, gpuplace.GROWTH_VAR)


@dataclass(frozen=True)
class Container:
    """One task's container, for its GPUs: its env, device ids (host indices, or UUIDs), /dev/shm."""

    env: dict
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


def containers(spec, tasks: Sequence, engine_gpus: Sequence, shm_size: Optional[str], limit: Optional[str] = None
               ) -> tuple[dict[str, Container], list[str]]:
    """(task key -> Container, one-line problems) for the plan's ``tasks`` (PlannedTask: key,
    type, env) on an engine host with ``engine_gpus`` (``nvidia-smi -L``'s placement units: (index,
    name, uuid), a MIG device one unit), within ``limit`` (the launcher's CUDA_VISIBLE_DEVICES: the
    containers get subsets of it). A container's device request names its GPUs by index, or by UUID
    where the limit named UUIDs or they are MIG devices (the NVIDIA container runtime takes both).
    Pure."""
    types = [t.type for t in tasks]
    limits = {HOST: limit} if limit is not None else {}
    task_gpus, extras, problems = plan_gpus.plan_gpus(spec, [HOST] * len(tasks), types, {HOST: tuple(engine_gpus)},
                                                      limits)
    out: dict[str, Container] = {}
    off = plan_gpus.placement_off(spec)
    for task, tg, extra in zip(tasks, task_gpus, extras):
        env = dict(task.env)
        if not off:
            for name in MADE:
                if name not in spec.env:
                    env.pop(name, None)
            env.update(dict(extra))
        ids: tuple = ()
        if not off and tg.ids:
            ids = tuple(tg.visible.split(",")) if tg.visible else tuple(tg.ids)
        if ids and gpuplace.CUDA_VAR not in spec.env:
            env[gpuplace.CUDA_VAR] = ",".join(str(i) for i in range(len(ids)))  # numbered from 0 inside
            env.pop(gpuplace.ORDER_VAR, None)
        out[task.key] = Container(env, ids, shm_size or (GPU_SHM if ids else None))
    return out, problems


def with_engine_gpus(spec, placement):
    """The containers' Placement with the engine host's GPUs (``nvidia-smi -L`` here) where they
    hold the GPU tasks, so that the plan (``tfcluster plan``, the run record, ``status``) shows each
    container's GPU indices; unchanged where no task uses a GPU, this machine has none, or they do
    not suffice (the preflight then refuses in its one line, as it would have)."""
    if not asked(spec):
        return placement
    found = plan_gpus.local_gpus()
    if not found:
        return placement
    keys = list(placement.slots)
    limits = launcher_limit()
    _, _, problems = plan_gpus.plan_gpus(spec, [HOST] * len(keys), [k.split(":")[0] for k in keys], {HOST: found},
                                         limits)
    if problems:
        return placement
    return replace(placement, gpus={HOST: found}, gpu_hosts={slot.host: HOST for slot in placement.slots.values()},
                   gpu_limits=limits)


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


def describe(found: Mapping[str, Container], engine_gpus: Sequence) -> str:
    """The start line: which container gets which of the engine host's GPUs."""
    if not engine_gpus:
        return f"docker: no GPU found ({HOST}: nvidia-smi -L lists none): the tasks run on CPU"
    parts = [f"{k} gpu{'s' if len(c.device_ids) > 1 else ''} {','.join(str(i) for i in c.device_ids)}"
             for k, c in found.items() if c.device_ids]
    return f"docker: {HOST} has {gpuplace.plural(len(engine_gpus))}; " + ("; ".join(parts) or "no task uses one")
