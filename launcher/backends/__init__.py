"""Backends execute a plan: start each task, report its exit, stream its output, stop it."""

from __future__ import annotations

from .base import Backend, TaskHandle


def make_backend(name: str, **kwargs) -> Backend:
    """Construct the backend for ``name`` (imported lazily: docker/ssh pull in their SDKs)."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(**kwargs)
    if name == "ssh":
        from .ssh import SSHBackend

        return SSHBackend(**kwargs)
    if name == "docker":
        from .docker import DockerBackend

        return DockerBackend(**kwargs)
    raise ValueError(f"unknown backend {name!r}")


__all__ = ["Backend", "TaskHandle", "make_backend"]
