"""The Docker engine: the SDK (imported on first use), which engine a spec names and how to reach it
(TLS; plain TCP to another machine only when the spec accepts it), a pinged client."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from launcher.bounded import one_line
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


docker: Any = _LazyModule("docker", "docker.errors", "docker.tls")
requests: Any = _LazyModule("requests", "requests.exceptions")

DEFAULT_ENGINE = "unix:///var/run/docker.sock"
_API_TIMEOUT = 60
# Schemes the SDK speaks over TCP: without TLS, anyone who reaches the port commands the engine.
_TCP = ("tcp", "http", "https")


@dataclass(frozen=True)
class Engine:
    """The engine a run uses: its URL, where the URL came from (``field``: ``docker.engine``,
    ``DOCKER_HOST`` or the default, for messages), its TLS files (None: no TLS), and whether the
    spec accepts plain TCP to another machine (``docker.insecure``)."""

    url: str
    field: str = "docker.engine"
    ca: Optional[str] = None
    cert: Optional[tuple[str, str]] = None
    verify: bool = True
    tls: bool = False
    insecure: bool = False


def engine_url(loaded: LoadedSpec) -> str:
    return engine_of(loaded).url


def engine_of(loaded: LoadedSpec, environ: Optional[Mapping[str, str]] = None) -> Engine:
    """The engine ``loaded`` names (``docker.engine``, else $DOCKER_HOST, else the local socket),
    with TLS from ``docker.tls`` (paths relative to the spec), else as the docker CLI reads it:
    DOCKER_TLS_VERIFY (set and not empty: verify) and DOCKER_CERT_PATH (ca.pem, cert.pem,
    key.pem; default ~/.docker)."""
    env = os.environ if environ is None else environ
    opts = loaded.spec.docker
    url, field = ((opts.engine, "docker.engine") if opts.engine else
                  (env["DOCKER_HOST"], "DOCKER_HOST") if env.get("DOCKER_HOST") else (DEFAULT_ENGINE, "docker.engine"))
    base = Engine(url=url, field=field, insecure=opts.insecure)
    if opts.tls is not None:
        def path(p: Optional[str]) -> Optional[str]:
            return None if p is None else str((loaded.base_dir / os.path.expanduser(p)).resolve())
        cert = (path(opts.tls.cert), path(opts.tls.key)) if opts.tls.cert else None
        return replace(base, ca=path(opts.tls.ca), cert=cert, verify=opts.tls.verify, tls=True)
    cert_path = env.get("DOCKER_CERT_PATH") or None
    verify = env.get("DOCKER_TLS_VERIFY") not in (None, "")
    if not (cert_path or verify):
        return base
    where = cert_path or os.path.join(os.path.expanduser("~"), ".docker")
    return replace(base, ca=os.path.join(where, "ca.pem"), verify=verify, tls=True,
                   cert=(os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")))


def check_transport(engine: Engine) -> None:
    """LaunchError (one line) for plain TCP to an engine on another machine, unless the spec
    accepts it (``docker.insecure: true``): the Docker API has no authentication of its own, so
    whoever reaches that port runs containers as root there, and sees every command."""
    parts = _parts(engine.url)
    if parts.scheme not in _TCP or engine.tls or parts.scheme == "https" or engine.insecure:
        return
    host = parts.hostname or ""
    if host == "localhost" or _loopback(host):
        return
    raise LaunchError(
        f"{engine.field}: {engine.url} is plain TCP to another machine: whoever reaches that port commands its "
        "Docker engine (root there), unencrypted; give docker.tls: {ca, cert, key} (or DOCKER_TLS_VERIFY=1 and "
        "DOCKER_CERT_PATH), use ssh://host, or set docker.insecure: true to accept it")


def _parts(url: str) -> Any:
    """``url`` split, a bare ``host:port`` read as tcp:// (as the SDK reads it)."""
    return urlsplit(url if "://" in url else f"tcp://{url}")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_kwargs(engine: Engine) -> dict[str, Any]:
    """The SDK's ``DockerClient`` arguments for ``engine`` (``base_url``, and ``tls`` over TCP)."""
    kwargs: dict[str, Any] = {"base_url": engine.url}
    if engine.tls and _parts(engine.url).scheme in _TCP:
        kwargs["tls"] = _pinned_tls()(client_cert=engine.cert, ca_cert=engine.ca, verify=engine.verify)
    return kwargs


def _pinned_tls() -> Any:
    """The SDK's TLSConfig, which also stops requests from reading the environment: requests lets
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE replace the CA a session was given (so an engine's own CA
    would be ignored where either is set), and its proxies are not the engine's way either."""

    class PinnedTls(docker.tls.TLSConfig):
        def configure_client(self, client: Any) -> None:
            super().configure_client(client)
            client.trust_env = False

    return PinnedTls


def connect(engine: Engine, pool: int = 10) -> "docker.DockerClient":
    """A client for ``engine``, pinged; LaunchError naming the fix if unreachable or refused."""
    if not docker.available():
        raise LaunchError("backend docker needs the Python package 'docker' (not installed); "
                          "install it with: pip install 'tfcluster[docker]'")
    check_transport(engine)
    url = engine.url
    try:
        client = docker.DockerClient(timeout=_API_TIMEOUT, max_pool_size=pool, **client_kwargs(engine))
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - every way of failing to connect ends here
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            raise LaunchError(
                f"permission denied on the Docker engine at {url}; add your user to the docker group or run as root"
            ) from None
        if engine.tls and (isinstance(exc, docker.errors.TLSParameterError) or "SSL" in text):
            raise LaunchError(f"the Docker engine at {url}: TLS failed ({one_line(text, 200)}); check docker.tls "
                              "(or DOCKER_CERT_PATH): its ca, cert and key files") from None
        raise LaunchError(
            f"cannot reach the Docker engine at {url}: is dockerd running? "
            "(start it, or point docker.engine / DOCKER_HOST at a running engine)"
        ) from None
