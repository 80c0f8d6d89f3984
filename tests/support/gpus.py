"""The fake ``nvidia-smi`` (tests/support/nvidia-smi, NVIDIA's documented output formats) on PATH,
with a given number of GPUs, for tests of GPU placement on a machine without GPUs."""

from __future__ import annotations

import os
from pathlib import Path

FAKE = Path(__file__).resolve().parent / "nvidia-smi"


def fake_bin(directory: Path) -> Path:
    """A directory holding only the fake as ``nvidia-smi`` (to put first on PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "nvidia-smi"
    if not link.exists():
        link.symlink_to(FAKE)
    return directory


def fake_gpus(monkeypatch, tmp_path: Path, gpus: int) -> None:
    """This process and its children see ``gpus`` fake GPUs (0: nvidia-smi says none)."""
    monkeypatch.setenv("PATH", f"{fake_bin(tmp_path / 'fakebin')}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", str(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def gpu_pythons(directory: Path, counts: dict, python: str, extra: dict | None = None) -> dict[str, dict]:
    """ssh lab hosts[] keys giving each host an interpreter (``hosts[].python``: a wrapper around
    ``python``) that sees ``counts[host]`` fake GPUs, for the preflight agent and the task wrapper
    alike, in the host's environment ``extra[host]`` (``VAR=value ...``)."""
    fakebin = fake_bin(directory / "fakebin")
    keys = {}
    for host, n in counts.items():
        wrapper = directory / f"python-{host}"
        more = (extra or {}).get(host, "")
        wrapper.write_text(f'#!/bin/sh\nPATH="{fakebin}:$PATH" FAKE_NVIDIA_SMI_GPUS={n} {more} exec "{python}" "$@"\n')
        wrapper.chmod(0o755)
        keys[host] = {"python": str(wrapper)}
    return keys


class Made:
    """A container as the plan makes it (launcher/plan/containergpus.py): its device request and
    /dev/shm (``container``), and its planned task's env (what it runs with)."""

    def __init__(self, container, env: dict) -> None:
        self.container, self.env = container, env

    def __getattr__(self, name: str):
        return getattr(self.container, name)


def containers(spec, engine_gpus, shm_size=None, limit=None) -> tuple[dict, list[str]]:
    """(task key -> Made, problems) for the spec's containers on an engine host with ``engine_gpus``
    within ``limit``: the plan the docker backend and compose make from what they found."""
    from launcher.plan import containergpus
    from launcher.plan.build import build_plan

    problems = containergpus.refused(spec, engine_gpus, limit)
    if problems:
        return {}, problems
    plan = build_plan(spec, containergpus.placement(spec, engine_gpus, limit=limit))
    return {t.key: Made(containergpus.container(t, shm_size), t.env_dict) for t in plan.tasks}, []
