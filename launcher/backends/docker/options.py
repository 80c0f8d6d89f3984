"""``docker:`` -- the options block of ``backend: docker`` (validated here, opaque to spec.py)."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from launcher.spec.model import IMAGE_RE, Flag, OptionsModel, whole_number

SIZE_RE = re.compile(r"^[1-9][0-9]*[bkmg]?$", re.IGNORECASE)


class DockerBuild(OptionsModel):
    """How ``backend: docker`` builds its image: with neither ``context`` nor ``dockerfile``, tfcluster's
    own worker image, from the installed tfcluster (its Dockerfile ships in the package; no checkout
    needed: `tfcluster image build` builds the same); else the Dockerfile of a context of yours."""

    context: Optional[str] = None
    """Build context, relative to the spec file; the Dockerfile path is relative to the context (none, with no
    dockerfile either: the worker image of the installed tfcluster; with a dockerfile: the spec's directory)."""
    dockerfile: Optional[str] = None
    """The Dockerfile, relative to the context (default with a context: its Dockerfile, as `docker build`)."""

    @property
    def packaged(self) -> bool:
        """Neither context nor dockerfile: tfcluster's own worker image (launcher/image/)."""
        return self.context is None and self.dockerfile is None

    @property
    def file(self) -> str:
        """The Dockerfile in a context of yours (not packaged)."""
        return self.dockerfile or "Dockerfile"
    base_image: Optional[str] = None
    """The BASE_IMAGE build arg (default in the Dockerfile: an official Python image)."""
    args: dict[str, str] = Field(default_factory=dict)
    """Build args (--build-arg KEY=value)."""
    network: Optional[str] = None
    """Network for RUN steps, e.g. "host" when the engine's bridge has no way out."""
    when: Literal["missing", "always"] = "missing"
    """missing: build only when the image is absent; always: build on every `up` (cached)."""


class DockerTls(OptionsModel):
    """TLS to an engine over TCP (dockerd --tlsverify), as the docker CLI's --tlscacert, --tlscert,
    --tlskey and --tlsverify; paths relative to the spec file."""

    ca: Optional[str] = None
    """The CA certificate that signed the engine's (default: the system's CAs)."""
    cert: Optional[str] = None
    """Your client certificate (with `key`), which an engine run with --tlsverify asks for."""
    key: Optional[str] = None
    """The client certificate's private key."""
    verify: Flag = True
    """Check the engine's certificate against `ca` (false: encrypt only, as DOCKER_TLS_VERIFY unset)."""

    @model_validator(mode="after")
    def _pair(self) -> "DockerTls":
        if bool(self.cert) != bool(self.key):
            raise ValueError("give cert and key together (the client certificate and its private key)")
        return self


# HOST_PATH:/CONTAINER_PATH[:ro|rw], as _volumes reads it (the schema says the same to an editor).
VOLUME_PATTERN = "^[^:]+:/[^:]*(:(ro|rw))?$"


class DockerOptions(OptionsModel):
    """``docker:`` -- the image, its build, and the engine used by ``backend: docker``."""

    image: str = Field("tfcluster-worker:latest", json_schema_extra={"pattern": IMAGE_RE.pattern})
    """The image every task's container runs (built from `build` or pulled when missing)."""
    build: Optional[DockerBuild] = None
    """How to build the image (none: pull it, or report it missing)."""
    pull: Literal["missing", "never"] = "missing"
    """Without docker.build, a missing image is pulled ("missing") or reported ("never")."""
    engine: Optional[str] = None
    """Engine URL like unix:///var/run/docker.sock, ssh://user@host or tcp://host:2376 with `tls`
    (default: $DOCKER_HOST, with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH). Plain TCP to another
    machine is refused unless `insecure` is true: the Docker API has no authentication of its own."""
    tls: Optional[DockerTls] = None
    """TLS to a tcp:// engine (default: DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the docker CLI)."""
    insecure: Flag = False
    """Accept plain TCP (no TLS) to an engine on another machine: whoever reaches its port commands it."""
    volumes: tuple[Annotated[str, WithJsonSchema({"type": "string", "pattern": VOLUME_PATTERN})], ...] = ()
    """Extra bind mounts for every task, "HOST_PATH:CONTAINER_PATH[:ro]" (host path relative to the spec)."""
    user: Optional[str] = None
    """Run tasks as this user (default: the image's user, or yours when you are not root). As root,
    the run dir and the state dir are given to that user's uid (a name is looked up in the image's
    /etc/passwd; one that is not there is refused), and stay 0700."""
    shm_size: Annotated[Optional[str], WithJsonSchema({"anyOf": [
        {"type": "string", "pattern": "^[1-9][0-9]*[bkmgBKMG]?$"}, {"type": "integer", "minimum": 1}, {"type": "null"}]})] = None
    """Each container's /dev/shm ("1g", "512m", bytes); default: 1g for a container with GPUs (NCCL's
    shared-memory transport needs more than Docker's 64m), the engine's for the others."""

    @field_validator("shm_size", mode="before")
    @classmethod
    def _shm_size(cls, v):
        v = whole_number(v)
        if v is None:
            return v
        text = str(v).strip() if not isinstance(v, bool) else ""
        if not SIZE_RE.fullmatch(text):
            raise ValueError(f"{v!r} is not a size; use e.g. 1g, 512m or a number of bytes")
        return text.lower()

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.fullmatch(v):
            raise ValueError(f"'{v}' is not a valid image reference; use e.g. tfcluster-worker:latest (lowercase)")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            parts = item.split(":")
            if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/") or (
                len(parts) == 3 and parts[2] not in ("ro", "rw")
            ):
                raise ValueError(f"'{item}' is not HOST_PATH:/CONTAINER_PATH[:ro]; e.g. ./data:/data:ro")
        return v
