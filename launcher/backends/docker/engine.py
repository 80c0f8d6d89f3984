"""The Docker engine: the SDK (imported on first use), which engine a spec names, a pinged client."""

from __future__ import annotations

import os
from typing import Any

from launcher.errors import LaunchError
from launcher.spec.model import LoadedSpec


class _LazyModule:
    """The SDK is a dependency of tfcluster, but only this backend needs it, and importing it
    costs most of a second: it is imported on first use, not when the spec is validated."""

    def __init__(self, *names: str) -> None:
        self._names = names
        self._module: Any = None

    def available(self) -> bool:
        try:
            self._load()
            return True
        except ImportError:
            return False

    def _load(self) -> Any:
        if self._module is None:
            import importlib

            for name in self._names:
                importlib.import_module(name)
            self._module = importlib.import_module(self._names[0])
        return self._module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)


docker: Any = _LazyModule("docker", "docker.errors")
requests: Any = _LazyModule("requests", "requests.exceptions")

DEFAULT_ENGINE = "unix:///var/run/docker.sock"
_API_TIMEOUT = 60


def engine_url(loaded: LoadedSpec) -> str:
    return loaded.spec.docker.engine or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE


def connect(url: str, explicit: bool, pool: int = 10) -> "docker.DockerClient":
    """A client for the engine at ``url``, pinged; LaunchError naming the fix if unreachable."""
    if not docker.available():
        raise LaunchError("backend docker needs the Python package 'docker' (not installed); "
                          "install it with: pip install 'tfcluster[docker]'")
    try:
        if explicit:
            client = docker.DockerClient(base_url=url, timeout=_API_TIMEOUT, max_pool_size=pool)
        else:  # honours DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH
            client = docker.from_env(timeout=_API_TIMEOUT, max_pool_size=pool)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - every way of failing to connect ends here
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            raise LaunchError(
                f"permission denied on the Docker engine at {url}; add your user to the docker group or run as root"
            ) from None
        raise LaunchError(
            f"cannot reach the Docker engine at {url}: is dockerd running? "
            "(start it, or point docker.engine / DOCKER_HOST at a running engine)"
        ) from None
