"""The ssh preflight's one line per host on its GPUs. Where the ssh backend's tasks go (the
round-robin over ``hosts:``, in blocks) and the placement by each host's GPUs are plans, made in
launcher/plan/roundrobin.py."""

from __future__ import annotations

from launcher.plan import gpus
from launcher.notices import HostNote, fold_hosts
from launcher.plan.build import Plan


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
