"""GPU refusals in words, each typed with the spec key it is about (``Refusal``: the one line,
and ``key``, where the error points in the spec file), made where the refusal is made
(launcher/plan/gpus.py), never read back from its words."""

from __future__ import annotations

from typing import Mapping, Sequence, Union

from launcher.remote import gpuplace
from launcher.remote.gpuplace import plural

TASK_TYPES = ("chief", "worker", "ps", "evaluator")


class Refusal(str):
    """A GPU refusal: the one line (the str itself) and the spec key it is about (``key``)."""

    key: tuple

    def __new__(cls, text: str, key: tuple) -> "Refusal":
        made = super().__new__(cls, text)
        made.key = key
        return made


def own_key(spec) -> tuple:
    """The key GPUs are asked by where a refusal names none: a group's own ``gpus``, else
    ``devices.gpus_per_task`` (None: no spec to ask, the preflight's lines on a host)."""
    for task_type in TASK_TYPES if spec is not None else ():
        if spec.tasks.group(task_type).gpus is not None:
            return ("tasks", task_type, "gpus")
    return ("devices", "gpus_per_task")


def unequal_line(counts: Mapping[str, int], key: tuple = ("devices", "gpus_per_task")) -> Refusal:
    """The one line for hosts whose GPU workers would get different counts."""
    parts = ", ".join(f"{h} {plural(k)}" for h, k in counts.items())
    low = min(counts.values())
    fix = (f"set devices.gpus_per_task: {low}" if low else
           "give every GPU host a GPU, or run on CPU (devices.gpus: 0)")
    return Refusal(f"gpus: the workers would get unequal GPU shares ({parts} each); TensorFlow needs the same count "
                   f"on every worker (ParameterServerStrategy: Mismatched number of GPUs per worker); {fix}", key)


def refusal(spec, host: str, tasks: Sequence[tuple], host_ids: Sequence[int], devices_gpus,
            problem: gpuplace.PlacementProblem) -> Refusal:
    """The one line for a host that cannot give its tasks (key, PlannedGpus) their GPUs: ``vm2 has 1
    GPU; 2 tasks x gpus_per_task 1 need 2; ...fix``, at the key that asked: a group's ``gpus`` it
    names, else ``devices.gpus`` where that bounds the GPUs (or is the fix)."""
    if problem.kind == gpuplace.SHORT:
        usable = gpuplace.usable(host_ids, gpuplace.parse_request(tasks[0][1].request)["use"]) if tasks else []
        groups: dict[tuple[str, Union[int, str]], list[str]] = {}
        for key, tg in tasks:
            if tg.required:
                groups.setdefault((tg.source, tg.take), []).append(key)
        parts = [f"{len(keys)} task{'s' if len(keys) > 1 else ''} x {source} {take}" if len(keys) > 1
                 else f"{keys[0]} x {source} {take}" for (source, take), keys in groups.items()]
        total = sum(int(take) * len(keys) for (_s, take), keys in groups.items())
        have = plural(len(usable)) + ("" if devices_gpus == "all" else " the run may use (devices.gpus)")
        named = next((tuple(source.split(".")) for source, _take in groups if source.startswith("tasks.")), None)
        key = named or (("devices", "gpus") if devices_gpus != "all" else own_key(spec))
        return Refusal(f"{host} has {have}; {' + '.join(parts)} need {total}; put fewer GPU tasks on it "
                       "(tasks.<type>.hosts, hosts[].slots), lower the count, or set devices.gpus_per_task: auto to "
                       "share", key)
    if problem.kind == gpuplace.NCCL:
        return Refusal(f"{host}: its {len(tasks)} GPU tasks {problem}; put fewer GPU tasks on it, give it more GPUs, "
                       "or set collective.implementation: ring", own_key(spec))
    return Refusal(f"{host} {problem}; fix devices.gpus or the host's GPUs", ("devices", "gpus"))


def failure_line(spec, host: str, failure: str) -> Refusal:
    """The one line for GPUs asked for on a host whose nvidia-smi failed: its words and the fix,
    at the key that asks for them."""
    words, key = asked_key(spec)
    return Refusal(f"{host}: GPUs asked for ({words}) but {failure}; install or load the NVIDIA driver there "
                   "(nvidia-smi -L must list the GPUs), or run on CPU: devices.gpus_per_task: auto drops the "
                   "requirement, devices.gpus: 0 every GPU", key)


def asked_key(spec) -> tuple[str, tuple]:
    """The key that requires GPUs, in words (``devices.gpus_per_task 1``), and where it points."""
    if isinstance(spec.devices.gpus_per_task, int):
        return f"devices.gpus_per_task {spec.devices.gpus_per_task}", own_key(spec)
    if spec.devices.gpus not in ("all", 0):
        return f"devices.gpus {spec.devices.gpus}", ("devices", "gpus")
    for t in TASK_TYPES:
        if spec.tasks.group(t).gpus:
            return f"tasks.{t}.gpus {spec.tasks.group(t).gpus}", ("tasks", t, "gpus")
    return "devices", own_key(spec)
