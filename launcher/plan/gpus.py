"""GPU placement (``devices: {gpus, gpus_per_task, gpu_memory}``, ``tasks.<type>.gpus``,
``collective:``): which of its host's GPUs each task gets, and its memory setting.

Which tasks use GPUs: the chief and workers under the synchronous strategies, the workers under
parameter_server, and the evaluator; the ps tasks and the parameter_server chief (the
coordinator) get none (``CUDA_VISIBLE_DEVICES=-1``) unless their group says ``gpus: N``.
``devices.gpus`` (all | N | [ids]) is which of a host's GPUs the run may use at all; 0 is none.

Each GPU task's request (``PlannedGpus.request``, launcher/remote/gpuplace.py's marker) is made
here from its place among its host's GPU tasks. Where the plan knows the host's GPUs (the local
backend: ``nvidia-smi -L`` at plan time, ``Placement.gpus``), the plan holds the result
(CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH, TFCLUSTER_GPU_MEMORY) and refuses what the
host cannot give in one line naming it; elsewhere the task's env carries the request
(``TFCLUSTER_GPUS``) and the ssh task wrapper completes it where the task starts (``complete``,
``--gpus``), after the preflight checked the host (``host_problems``); docker's containers get
theirs in the plan (launcher/plan/containergpus.py). A variable the spec's ``env:`` sets always
wins; a spec ``env:`` with CUDA_VISIBLE_DEVICES turns the placement off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

from launcher.contract import envnames
from launcher.plan.gpurefusal import Refusal, failure_line, own_key, refusal, unequal_line
from launcher.remote import gpuplace, gpuquery
from launcher.remote.gpuplace import CUDA_VAR, plural

# (index, name, uuid) of one GPU, as ``nvidia-smi -L`` lists it.
Gpu = tuple[int, str, str]


@dataclass(frozen=True)
class PlannedGpus:
    """One task's GPUs in the plan.

    ``take``: 0 (no GPU: CUDA_VISIBLE_DEVICES=-1), N, "auto" or "all"; ``source`` the key that
    asked for it (``devices.gpus_per_task``, ``tasks.ps.gpus``). ``request``: the marker text
    (gpuplace.format_request; "" for take 0). ``ids``: the task's GPU indices where the plan
    knew its host's GPUs (``()``: the host has none, the task runs on CPU), None where the
    backend completes the request when the task starts. ``shared``: another task uses one of
    them."""

    take: Union[int, str] = 0
    source: str = ""
    request: str = ""
    ids: Optional[tuple[int, ...]] = None
    shared: bool = False
    # Its CUDA_VISIBLE_DEVICES where that is not ``ids`` (UUIDs: the launcher's limit named
    # UUIDs, or MIG devices); "" otherwise.
    visible: str = ""

    @property
    def uses_gpu(self) -> bool:
        return self.take != 0

    @property
    def required(self) -> bool:
        """The spec requires GPUs for this task (a count, not auto/all)."""
        return isinstance(self.take, int) and self.take > 0

    def describe(self) -> str:
        """``plan``'s column: ``gpu 1``, ``gpus 0,1``, ``gpu 0 shared``, ``cpu``, ``gpus auto``."""
        if not self.uses_gpu:
            return "cpu"
        if self.ids is None:  # made where the task starts
            return f"{plural(self.take, 'gpu')} (at start)" if isinstance(self.take, int) else f"gpus {self.take} (at start)"
        if not self.ids:
            return "cpu (no gpu)"
        word = "gpu" if len(self.ids) == 1 else "gpus"
        named = ",".join(v[:12] if len(v) > 12 else v for v in self.visible.split(",")) if self.visible else \
            ",".join(str(i) for i in self.ids)
        return f"{word} {named}" + (" shared" if self.shared else "")


NO_GPU = PlannedGpus()


def uses_gpu_by_role(strategy: str, task_type: str) -> bool:
    """Whether a task of this type uses GPUs when its group does not say (``tasks.<type>.gpus``)."""
    if strategy == "parameter_server":
        return task_type in ("worker", "evaluator")
    return task_type in ("chief", "worker", "evaluator")


def take_of(spec, task_type: str) -> tuple[Union[int, str], str]:
    """(take, source) for a task of ``task_type``: its group's ``gpus``, else devices.gpus_per_task
    for a GPU role, else 0."""
    group = spec.tasks.group(task_type)
    if spec.devices.gpus == 0:
        return 0, "devices.gpus"
    if group.gpus is not None:
        return group.gpus, f"tasks.{task_type}.gpus"
    if uses_gpu_by_role(spec.strategy, task_type):
        return spec.devices.gpus_per_task, "gpus_per_task"
    return 0, ""


def use_of(spec) -> tuple[str, bool]:
    """(use, need): devices.gpus as the request's ``use`` field, and whether it names GPUs the
    host must have (a count or a list)."""
    g = spec.devices.gpus
    if g == "all":
        return "all", False
    ids = range(g) if isinstance(g, int) else g
    return ",".join(str(i) for i in ids), True


def placement_off(spec) -> bool:
    """The spec's ``env:`` sets CUDA_VISIBLE_DEVICES: it wins, tfcluster places nothing."""
    return CUDA_VAR in spec.env


def trains(strategy: str, task_type: str) -> bool:
    """A task of this type is a trainer: its GPU count must equal every other trainer's
    (gpuplace.shares): the workers, and the chief where it trains (not parameter_server's)."""
    if strategy == "parameter_server":
        return task_type == "worker"
    return task_type in ("chief", "worker")


def cap_of(spec) -> int:
    """The most GPUs an auto trainer gets: one_device's 1 (OneDeviceStrategy uses one device; a
    task seeing more maps memory on every one), else none (0)."""
    return 1 if spec.strategy == "one_device" else 0


def plan_gpus(spec, hosts: Sequence[str], types: Sequence[str], known: Mapping[str, Sequence[Gpu]],
              limits: Mapping[str, Optional[str]] = {}, failures: Mapping[str, str] = {}, most: int = 0
              ) -> tuple[list[PlannedGpus], list[tuple[tuple[str, str], ...]], list[str]]:
    """Every task's PlannedGpus and extra env (in plan order: ``hosts[i]`` and ``types[i]`` are task
    i's), and the one-line problems (each a ``gpurefusal.Refusal``: its spec key typed) of the hosts
    whose GPUs are ``known`` (host -> its placement
    units, nvidia-smi -L's; a host not in it is completed where its tasks start). ``limits``: host
    -> the CUDA_VISIBLE_DEVICES in force there (the launcher's own, locally): tasks get subsets
    of it, named as it names them. ``most``: the most GPUs an auto trainer gets (0: none said;
    the ssh preflight's smallest host share, ``Placement.gpu_cap``)."""
    n = len(hosts)
    if placement_off(spec):
        return [NO_GPU] * n, [()] * n, []
    use, need = use_of(spec)
    coll = spec.collective.implementation
    mem = str(spec.devices.gpu_memory)
    takes = [take_of(spec, t) for t in types]
    by_host: dict[str, list[int]] = {}
    for i, (host, (take, _)) in enumerate(zip(hosts, takes)):
        if take != 0:
            by_host.setdefault(host, []).append(i)
    out: list[PlannedGpus] = [NO_GPU] * n
    extras: list[tuple[tuple[str, str], ...]] = [((CUDA_VAR, "-1"),) if CUDA_VAR not in spec.env else ()] * n
    problems: list[Refusal] = []
    cache: dict[tuple, tuple[tuple[str, str], ...]] = {}  # a few distinct extras, shared
    units = {h: gpuplace.within(known[h], limits.get(h)) for h in by_host if h in known}
    orders = {h: _auto_order(spec, types, takes, members) for h, members in by_host.items()}
    cap, problem = _common_cap(spec, by_host, takes, orders, units, use)
    if most and (not cap or most < cap):
        cap = most
    if problem:
        return [NO_GPU] * n, [()] * n, [problem]
    for host, members in by_host.items():
        counted = sum(int(takes[i][0]) for i in members if isinstance(takes[i][0], int))
        autos, trainers = orders[host]
        offset = 0
        host_problem: Optional[str] = None
        for i in members:
            take, source = takes[i]
            if isinstance(take, int):
                place, count, off = 0, 1, offset
                offset += take
            else:
                place, count, off = (autos.index(i) if take == "auto" else 0), max(len(autos), 1), counted
            pick = coll == "auto" and spec.strategy == "multi_worker_mirrored" and trains(spec.strategy, types[i])
            request = gpuplace.format_request(take, place, count, off, len(members), use, need, mem,
                                              "pick" if pick else coll, trainers=trainers, cap=cap)
            if host not in known:
                out[i] = PlannedGpus(take, source, request)
                extras[i] = cache.setdefault(("req", request), ((envnames.GPUS, request),))
                continue
            host_units, by_uuid = units[host]
            got, shared, problem = gpuplace.resolve(gpuplace.parse_request(request), host_units)
            if problem and host_problem is None:
                host_problem = problem
            value = gpuplace.visible_value(got, by_uuid)
            ids = tuple(g[0] for g in got)
            out[i] = PlannedGpus(take, source, request, ids, shared, value if value != ",".join(map(str, ids)) else "")
            extras[i] = cache.setdefault(("ids", value, shared), tuple(sorted(_made_env(spec, value, shared).items())))
        if host_problem is not None and failures.get(host) and not units[host][0]:
            problems.append(failure_line(spec, host, failures[host]))
        elif host_problem is not None:
            problems.append(refusal(spec, host, [(t_key(types, i), out[i]) for i in members],
                                    [g[0] for g in units[host][0]], spec.devices.gpus, host_problem))
    return out, extras, problems


def _auto_order(spec, types: Sequence[str], takes, members: Sequence[int]) -> tuple[list[int], int]:
    """(a host's auto tasks, trainers first; how many trainers): their places in shares()."""
    autos = [i for i in members if takes[i][0] == "auto"]
    first = [i for i in autos if trains(spec.strategy, types[i])]
    return first + [i for i in autos if i not in first], len(first)


def trainer_share(units: Sequence, autos: int, trainers: int, counted: int, use: str, cap: int = 0) -> int:
    """How many units each auto trainer of a host gets (gpuplace.shares over what the count tasks
    leave)."""
    left = max(len(gpuplace.usable(units, use)) - counted, 0)
    if any(gpuplace.is_mig(u) for u in units):
        cap = 1
    places, _idle = gpuplace.shares(left, trainers, autos - trainers, cap)
    return len(places[0][0]) if trainers and places else 0


def _common_cap(spec, by_host, takes, orders, units, use) -> tuple[int, Optional[str]]:
    """(cap, problem): where the plan knows every host with auto trainers and they would give their
    trainers different counts, the smallest decides (the cap); a host that would give none while
    another gives some is the problem, in one line naming them."""
    cap = cap_of(spec)
    counts: dict[str, int] = {}
    for host, members in by_host.items():
        autos, trainers = orders[host]
        if not trainers:
            continue
        if host not in units:
            return cap, None  # completed where the tasks start: the ssh preflight compares the hosts
        counted = sum(int(takes[i][0]) for i in members if isinstance(takes[i][0], int))
        counts[host] = trainer_share(units[host][0], len(autos), trainers, counted, use, cap)
    if len(set(counts.values())) <= 1:
        return cap, None
    low = min(counts.values())
    if low == 0:
        return cap, unequal_line(counts, own_key(spec))
    return low, None


def host_picks(plan, found: Mapping[str, Optional[Sequence[Gpu]]]) -> dict[str, tuple[int, bool, bool]]:
    """Host -> (units each auto trainer gets, whether collective auto would run RING there, whether
    it decides at all: a multi_worker_mirrored trainer under auto) for the hosts whose units are
    known."""
    seen: dict[str, tuple[int, bool, bool]] = {}
    for host, units in found.items():
        if units is None:
            continue
        for t in plan.tasks:
            req = gpuplace.parse_request(t.gpus.request) if t.host == host and t.gpus.request else None
            if req is None or req["take"] != "auto" or req["place"] >= req["trainers"]:
                continue
            ids, shared, _problem = gpuplace.resolve(req, list(units))
            pick = req["coll"] == "pick"
            seen[host] = (len(ids), pick and (shared or not ids or any(gpuplace.is_mig(u) for u in ids)), pick)
            break
    return seen


def start_collective(plan, found: Mapping[str, Optional[Sequence[Gpu]]]) -> Optional[str]:
    """The start line for collective auto where each host's task wrappers decide it (ssh), once the
    preflight knows every host's units: which they will pick and why; None where there is nothing to
    say (not auto, not multi_worker_mirrored, hosts unknown)."""
    seen = host_picks(plan, found)
    if not seen or not all(p for _k, _r, p in seen.values()) or len({r for _k, r, _p in seen.values()}) != 1:
        return None
    if not any(r for _k, r, _p in seen.values()):
        return "collective nccl (auto: each worker owns its GPUs)"
    if all(k == 0 for k, _r, _p in seen.values()):
        return "collective ring (auto: the workers run on CPU)"
    return "collective ring (auto: workers share GPUs or use MIG devices, which NCCL cannot serve)"


def smallest_share(plan, found: Mapping[str, Optional[Sequence[Gpu]]]) -> int:
    """Where the plan's auto trainers would get different counts on the hosts (their units as the
    preflight found them) and every host gives some: the smallest host's count, which the ssh
    preflight makes every trainer's (``Placement.gpu_cap``), as the plan does where it knows every
    host (``_common_cap``); 0 otherwise (they agree, or a host gives none: ``hosts_problem``)."""
    counts = {k for k, _r, _p in host_picks(plan, found).values()}
    return min(counts) if len(counts) > 1 and min(counts) > 0 else 0


def hosts_problem(plan, found: Mapping[str, Optional[Sequence[Gpu]]]) -> Optional[str]:
    """The one line for hosts (their units as the preflight found them) on which the plan's auto
    trainers would get different counts, or where collective auto would pick NCCL on some and RING
    on others: what the ssh preflight's probe says before anything starts. Where every host gives
    some, the preflight then plans once more with the smallest share for every trainer
    (``smallest_share``); a host giving none stays refused. None when they agree."""
    seen = {h: (k, r) for h, (k, r, _p) in host_picks(plan, found).items()}
    if len({k for k, _ in seen.values()}) > 1:
        return unequal_line({h: k for h, (k, _) in seen.items()})
    if len({r for _, r in seen.values()}) > 1:
        ring = [h for h, (_, r) in seen.items() if r]
        return (f"collective auto: the workers on {', '.join(ring)} share GPUs (or use MIG devices) and the others own "
                "theirs, so NCCL would run on some and RING on others; set collective.implementation: ring, or give "
                "each worker its own GPUs")
    return None


def t_key(types: Sequence[str], i: int) -> str:
    return f"{types[i]}:{sum(1 for t in types[:i] if t == types[i])}"


def _made_env(spec, value: str, shared: bool) -> dict[str, str]:
    """The env a completed request gives (gpuplace.complete's, the spec's env winning): ``value``
    the task's CUDA_VISIBLE_DEVICES ("" for none)."""
    if not value:
        return {}
    env = {CUDA_VAR: value, gpuplace.ORDER_VAR: gpuplace.ORDER}
    env.update(gpuplace.memory_env(str(spec.devices.gpu_memory), shared, spec.env))
    mem = spec.devices.gpu_memory
    if isinstance(mem, int) and envnames.GPU_MEMORY not in spec.env:
        env[envnames.GPU_MEMORY] = str(mem)
    return {k: v for k, v in env.items() if k not in spec.env}


def failure_refuses(plan, host: str, gpus: Sequence[Gpu], failure: Optional[str]) -> bool:
    """``host``'s nvidia-smi failed (listing none) where the plan requires GPUs: no placement mends it."""
    return bool(failure) and not gpus and any(t.gpus.required for t in plan.tasks if t.host == host
                                              and t.gpus.uses_gpu and t.gpus.request)


def host_problems(plan, host: str, gpus: Sequence[Gpu], failure: Optional[str] = None) -> list[str]:
    """The one-line problems of ``host`` (its GPUs as ``nvidia-smi -L`` lists them there, within its
    CUDA_VISIBLE_DEVICES) for the plan's tasks on it: what a backend's preflight calls once it
    knows the host's GPUs. ``failure``: nvidia-smi's own words where it failed there."""
    members = [t for t in plan.tasks if t.host == host and t.gpus.uses_gpu and t.gpus.request]
    if not members:
        return []
    if failure_refuses(plan, host, gpus, failure):
        key = next(f"{t.gpus.source} {t.gpus.take}" for t in members if t.gpus.required)
        return [f"{host}: GPUs asked for ({key}) but {failure}; install or load the NVIDIA driver there "
                "(nvidia-smi -L must list the GPUs), or run on CPU: devices.gpus_per_task: auto drops the "
                "requirement, devices.gpus: 0 every GPU"]
    units = list(gpus)
    ids = [g[0] for g in gpus]
    first = None
    for t in members:
        _ids, _shared, problem = gpuplace.resolve(gpuplace.parse_request(t.gpus.request), units)
        if problem:
            first = problem
            break
    if first is None:
        return []
    req = gpuplace.parse_request(members[0].gpus.request)
    devices_gpus = "all" if req["use"] == "all" else req["use"]
    return [refusal(None, host, [(t.key, t.gpus) for t in members], ids, devices_gpus, first)]


def complete(env: Mapping[str, str], gpus: Sequence[Gpu]) -> tuple[dict[str, str], Optional[str]]:
    """(env, problem): a task's env with its request (``TFCLUSTER_GPUS``) made for a host whose
    GPUs are ``gpus``, for a backend that completes it in the launcher (docker: the engine's
    host). The ssh task wrapper does the same on the host (taskwrap.py ``--gpus``)."""
    return gpuplace.complete(env, [g[0] for g in gpus], envnames.GPUS, envnames.GPU_MEMORY, envnames.COLLECTIVE)


def local_gpus(timeout: float = 10.0) -> tuple[Gpu, ...]:
    """This machine's GPUs (``nvidia-smi -L``, bounded by ``timeout``); () when there is none."""
    return tuple(gpuquery.host_gpus(timeout))


def local_gpus_checked(timeout: float = 10.0) -> tuple[tuple[Gpu, ...], Optional[str]]:
    """(GPUs, failure): ``local_gpus`` and nvidia-smi's own words where it failed."""
    found, failure = gpuquery.host_gpus_checked(timeout)
    return tuple(found), failure


def collective_choice(spec, types: Sequence[str], task_gpus: Sequence[PlannedGpus]) -> tuple[Optional[str], str]:
    """(implementation, the words plan/up/status show) for ``collective.implementation``.

    An explicit value wins. ``auto`` under multi_worker_mirrored resolves here, because
    TensorFlow's AUTO does not pick NCCL: its collective resolver uses NCCL only when NCCL is asked
    for (``use_nccl = (nccl_ || communication_hint == "nccl") && device_type == DEVICE_GPU`` in
    tensorflow/core/common_runtime/collective_param_resolver_local.cc, AssignCollectiveType), so
    workers that own their GPUs would all-reduce over RING. NCCL where every trainer owns its GPUs
    (no two NCCL ranks on one GPU: NCCL refuses them, "Duplicate GPU detected"); RING on CPU or
    shared GPUs (collective_util.py: NCCL "doesn't work for CPU"). Where the plan does not know the
    hosts' GPUs (the ssh backend), the request carries ``coll=auto`` and the task wrapper decides by
    the same rule on its host."""
    impl = spec.collective.implementation
    if spec.strategy != "multi_worker_mirrored":
        return None, ""
    if impl != "auto":
        return None, f"collective {impl} (collective.implementation)"
    if placement_off(spec):
        return None, "collective auto (TensorFlow's: RING; the spec's env sets CUDA_VISIBLE_DEVICES)"
    mine = [tg for t, tg in zip(types, task_gpus) if trains(spec.strategy, t)]
    if not mine or any(not tg.uses_gpu for tg in mine):
        return "ring", "collective ring (auto: the workers run on CPU)"
    if any(tg.ids is None for tg in mine):
        return None, "collective auto: nccl where each worker owns its GPUs, else ring (decided on each host at start)"
    if any(not tg.ids for tg in mine):
        return "ring", "collective ring (auto: the workers run on CPU)"
    if any(tg.shared for tg in mine):
        return "ring", "collective ring (auto: workers share GPUs, and NCCL refuses two ranks on one GPU)"
    if any("MIG-" in tg.visible for tg in mine):  # NVIDIA's MIG user guide: no GPU-to-GPU P2P under MIG
        return "ring", "collective ring (auto: the workers' GPUs are MIG devices, which have no peer-to-peer)"
    return "nccl", "collective nccl (auto: each worker owns its GPUs)"


def gpu_room(spec, found: Mapping[str, Optional[Sequence[Gpu]]]) -> dict[str, int]:
    """The GPUs the run may use on each host whose GPUs are known and that has no ``slots``:
    how many GPU-count tasks (``gpus_per_task: N``) it can hold, in GPUs."""
    use = use_of(spec)[0]
    slotted = {h.name for h in spec.hosts if h.slots is not None}
    return {h: len(gpuplace.usable([g[0] for g in g_list], use)) for h, g_list in found.items()
            if g_list is not None and h not in slotted}
