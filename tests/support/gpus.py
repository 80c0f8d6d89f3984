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
