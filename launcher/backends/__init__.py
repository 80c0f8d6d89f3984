"""Backends execute a plan: start each task, report its exit, stream its output, stop it.

REGISTRY maps each ``backend:`` value of cluster.yaml to its kind ("module:Class", a
``BackendKind``, imported on first use). This is the one place that knows the backends by name;
everything else asks ``backend_class(spec.backend)`` (see base.py for the contract: the kind and
the two seams, ``Hosts`` and ``Tasks``, its ``from_spec`` makes for a run;
launcher/app/stages.py's ``plan_for`` is the plan a spec gets from its backend's static placement).
"""

from __future__ import annotations

import importlib
from typing import Optional

from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, RecordedRun, TaskHandle, Tasks

REGISTRY: dict[str, str] = {
    "local": "launcher.backends.local:LocalBackend",
    "ssh": "launcher.backends.ssh.backend:SSHBackend",
    "docker": "launcher.backends.docker.backend:DockerBackend",
    "slurm": "launcher.backends.slurm.backend:SlurmBackend",
}


def backend_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def backend_class(name: str) -> type[BackendKind]:
    """The class registered for ``name``; KeyError for an unknown name (the spec rejects those)."""
    module, _, attr = REGISTRY[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    assert cls.name == name, f"{REGISTRY[name]} says its name is {cls.name!r}, registered as {name!r}"
    return cls


def backend_classes() -> list[type[BackendKind]]:
    return [backend_class(name) for name in REGISTRY]


def compose_kind() -> type[BackendKind]:
    """The backend whose plan ``tfcluster compose`` writes (``BackendKind.plans_compose``)."""
    (kind,) = [k for k in backend_classes() if k.plans_compose]
    return kind


def placed_hosts(spec) -> Optional[list[str]]:
    """The hosts the spec's static placement gives its tasks (its backend's ``place``), which
    the spare hosts are counted from before a run (``launcher.plan.elastic``); None where the
    backend cannot place the spec (it then has no spares to show)."""
    try:
        return [slot.host for slot in backend_class(spec.backend).place(spec).slots.values()]
    except Exception:  # noqa: BLE001  (a spec the backend cannot place has no spares to show)
        return None


__all__ = ["Backend", "BackendKind", "Capabilities", "Hosts", "RecordedRun", "TaskHandle", "Tasks", "REGISTRY",
           "backend_class", "backend_classes", "backend_names", "compose_kind", "placed_hosts"]
