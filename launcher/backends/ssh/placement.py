"""Where the ssh backend's tasks go: the round-robin over ``hosts:`` (bounded by ``hosts[].slots``
or, after the preflight, by each host's GPUs) decides how many tasks of each group a host gets,
and a host's tasks of a group get consecutive indices (ranks in blocks, :func:`in_blocks`); the
placement by GPUs when the round-robin over-fills a host, and the preflight's one line per host
on its GPUs.

Why blocks: a ring all-reduce (NCCL's, TensorFlow's RING) passes data from rank i to rank i+1.
Dealt one by one (worker:0 on vm1, worker:1 on vm2, worker:2 on vm1, ...) every hop of the ring
crosses the network; in blocks (worker:0 and worker:1 on vm1, worker:2 and worker:3 on vm2) it
crosses once per host, and a host's GPUs talk over NVLink/PCIe. torchrun and Horovod number a
host's ranks consecutively for the same reason."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Optional

from launcher.plan import gpus
from launcher.errors import SpecError
from launcher.notices import HostNote, fold_hosts
from launcher.plan.build import Placement, Plan, Slot, build_plan
from launcher.plan.elastic import with_workers
from launcher.remote.gpuplace import plural
from launcher.spec.model import TASK_TYPES, Host, Spec


def gpu_notes(plan: Plan, found: dict) -> list[str]:
    """What the preflight found of each host's GPUs, said once: the hosts whose GPU tasks run on
    CPU (no NVIDIA GPU there: one line for them all, ``fold_hosts``), and what each other host has
    for which tasks."""
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
    chosen = gpus.start_collective(plan, found)  # what the task wrappers will pick, said once
    if chosen:
        out.append(chosen)
    return out


def round_robin(spec: Spec, gpu_room: Optional[Mapping[str, int]] = None) -> dict[str, Slot]:
    """Each task's host: a group's own ``hosts`` round-robin, else one cursor shared over all
    ``hosts:``, skipping the full hosts: ``hosts[].slots`` tasks, or, for a host without slots
    in ``gpu_room`` (host -> GPUs the run may use there), as many GPU-count tasks
    (``gpus_per_task: N``, ``tasks.<type>.gpus: N``) as its GPUs hold. Where every host is full,
    the task goes where the round-robin put it (the plan then refuses it in one line)."""
    slots = {}
    cursor = 0
    by_name = {h.name: h for h in reversed(spec.hosts)}  # the first of a name, as spec.host; O(1) a task
    limited = gpu_room is not None or any(h.slots is not None for h in spec.hosts)
    used: dict[str, int] = {}
    gpus_used: dict[str, int] = {}
    room = gpu_room or {}

    def free(host: Host, need: int) -> bool:
        if host.slots is not None:
            return used.get(host.name, 0) < host.slots
        return not need or host.name not in room or gpus_used.get(host.name, 0) + need <= room[host.name]

    for task_type in TASK_TYPES:
        group = spec.tasks.group(task_type)
        take = gpus.take_of(spec, task_type)[0] if gpu_room is not None else 0
        need = take if isinstance(take, int) else 0
        for index in range(group.count):
            if group.hosts:
                host = by_name[group.hosts[index % len(group.hosts)]]
                if limited and not free(host, need):  # the group's next host with room
                    host = next((by_name[n] for n in group.hosts if free(by_name[n], need)), host)
            else:
                host = spec.hosts[cursor % len(spec.hosts)]
                cursor += 1
                for _ in range(len(spec.hosts) if limited else 0):  # skip the full hosts (all full: back at the first)
                    if free(host, need):
                        break
                    host = spec.hosts[cursor % len(spec.hosts)]
                    cursor += 1
            used[host.name] = used.get(host.name, 0) + 1
            gpus_used[host.name] = gpus_used.get(host.name, 0) + need
            slots[f"{task_type}:{index}"] = Slot(host.name, host.dial_address)
    return in_blocks(spec, slots)


def in_blocks(spec: Spec, dealt: Mapping[str, Slot]) -> dict[str, Slot]:
    """The same number of each group's tasks on each host as ``dealt`` (so slots, GPU room and the
    spare hosts are as the round-robin left them), renumbered so a host's tasks of a group have
    consecutive indices, hosts in the group's ``hosts`` order, else ``hosts:`` order (the first
    host's block first: the chief, or worker:0 where there is no chief, stays on the first host
    the round-robin used)."""
    out: dict[str, Slot] = {}
    every = list(dict.fromkeys(h.name for h in spec.hosts))
    for task_type in TASK_TYPES:
        group = spec.tasks.group(task_type)
        keys = [f"{task_type}:{i}" for i in range(group.count)]
        mine = [dealt[k] for k in keys if k in dealt]
        if len(mine) != len(keys):  # not ours to renumber (a partial placement)
            out.update({k: dealt[k] for k in keys if k in dealt})
            continue
        order = list(dict.fromkeys(group.hosts)) if group.hosts else every
        rank = {name: n for n, name in enumerate(order)}
        ordered = sorted(mine, key=lambda slot: rank.get(slot.host, len(order)))  # stable: a host's slots together
        out.update(zip(keys, ordered))
    return out


def gpu_replan(spec: Spec, plan: Plan, found: Mapping[str, Optional[tuple]],
               smallest: Optional[int] = None) -> Optional[tuple[Placement, str]]:
    """When the preflight found (``found``: host -> its GPUs, None where not asked) that the
    round-robin over-fills some hosts' GPUs with GPU-count tasks, the placement that bounds each
    host without ``slots`` by its GPUs instead; where the hosts would give their auto workers
    different counts, the smallest host's count for every worker (``gpu_cap``: TensorFlow needs
    them equal); and the line saying so. None when neither applies, a host's GPUs are unknown, or
    the GPUs cannot hold the tasks either way.

    ``smallest``: ``plan`` is a worker group starting small (``tasks.worker.min``) on the hosts
    that answered, which are ``found``'s: placed over those hosts only, never onto a host that did
    not answer, with the plan's workers or, where those hosts' GPUs hold fewer, the most they hold
    down to ``smallest`` workers (the group grows as hosts answer)."""
    if gpus.placement_off(spec) or any(v is None for v in found.values()) or plan.placeholder:
        return None
    over = [h for h, g in found.items() if gpus.host_problems(plan, h, g)]
    if not over:
        # Only unequal shares: the smallest host decides (a group starting small keeps its own
        # placement, which a round-robin of the whole spec would lose: refused as it is).
        return None if smallest is not None else _capped(spec, Placement(round_robin(spec)), found, [])
    room = gpus.gpu_room(spec, found)
    if any(h not in room for h in over):  # a host with slots, or one whose trouble is not its count
        return None
    workers = sum(1 for t in plan.tasks if t.type == "worker")
    sizes = [None] if smallest is None else range(workers, smallest - 1, -1)
    for size in sizes:
        got = _placed_by_gpus(spec, found, room, size)
        if got is not None:
            break
    else:
        return None
    placement, replanned = got
    counts: dict[str, int] = {}
    for t in replanned.tasks:
        if t.gpus.required:
            counts[t.host] = counts.get(t.host, 0) + 1
    before = {h: sum(1 for t in plan.tasks if t.host == h and t.gpus.required) for h in over}
    said = ", ".join(f"{h} {plural(len(found[h]))} for {before[h]}" for h in over)
    now = ", ".join(f"{h} {n}" for h, n in counts.items())
    fewer = "" if size is None or size == workers else \
        f"; the hosts there hold {size} of the {workers} workers now (the group grows as hosts answer)"
    return _capped(spec if size is None else with_workers(spec, size), placement, found, [
        f"gpus: round-robin would over-fill {said} GPU-count tasks; placed by each host's GPUs instead "
        f"(GPU tasks: {now}){fewer}; set hosts[].slots to place them yourself"])


def _capped(spec: Spec, placement: Placement, found: Mapping[str, Optional[tuple]],
            said: list[str]) -> Optional[tuple[Placement, str]]:
    """``placement`` with the smallest host's share as every auto worker's GPU count where the
    hosts would give different counts (gpus.smallest_share), and what the preflight says of it
    after ``said``; None when nothing was said and no cap is needed, or the capped plan still
    has a problem (a host that gives none, NCCL on some hosts and RING on others)."""
    try:
        planned = build_plan(spec, placement)
    except SpecError:
        return None
    cap = gpus.smallest_share(planned, found)
    if cap:
        before = {h: k for h, (k, _r, _p) in gpus.host_picks(planned, found).items()}
        placement = replace(placement, gpu_cap=cap)
        try:
            planned = build_plan(spec, placement)
        except SpecError:
            return None
        if gpus.hosts_problem(planned, found) or any(gpus.host_problems(planned, h, g) for h, g in found.items()):
            return None
        parts = ", ".join(f"{h} {plural(k)}" for h, k in before.items())
        idle = [h for h, k in before.items() if k > cap]
        said = said + [f"gpus: the workers would get unequal GPU shares ({parts} each); the smallest host decides: "
                       f"every worker gets {plural(cap)} (TensorFlow needs the same count on every worker), the others idle on "
                       f"{', '.join(idle)}; set devices.gpus_per_task to choose"]
    elif gpus.hosts_problem(planned, found):
        return None
    if not said:
        return None
    return placement, "; ".join(said)


def _placed_by_gpus(spec: Spec, found: Mapping[str, Optional[tuple]], room: Mapping[str, int],
                    size: Optional[int]) -> Optional[tuple[Placement, Plan]]:
    """The placement bounded by ``room`` and its plan, where no host of ``found`` is over-filled
    then; None otherwise. ``size``: that many workers over ``found``'s hosts only (a group starting
    small); None: the spec's tasks over every host."""
    shape = spec if size is None else _over_hosts(with_workers(spec, size), set(found))
    if shape is None:
        return None
    placement = Placement(round_robin(shape, room))
    try:
        replanned = build_plan(spec if size is None else with_workers(spec, size), placement)
    except SpecError:
        return None
    if any(gpus.host_problems(replanned, h, g) for h, g in found.items()):
        return None
    return placement, replanned


def _over_hosts(spec: Spec, names: set) -> Optional[Spec]:
    """``spec`` with only the hosts ``names`` (under ``hosts:`` and each group's ``hosts``); None
    where a group with tasks would have none of its hosts left."""
    groups = {}
    for task_type in TASK_TYPES:
        group = spec.tasks.group(task_type)
        if group.hosts:
            kept = [h for h in group.hosts if h in names]
            if not kept and group.count:
                return None
            groups[task_type] = group.model_copy(update={"hosts": tuple(kept)})
    hosts = tuple(h for h in spec.hosts if h.name in names)
    if not hosts:
        return None
    return spec.model_copy(update={"hosts": hosts, "tasks": spec.tasks.model_copy(update=groups)})
