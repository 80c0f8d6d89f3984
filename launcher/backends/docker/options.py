"""``docker:`` -- the options block of ``backend: docker`` (validated here, opaque to spec.py)."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, field_validator

from launcher.spec.model import IMAGE_RE, OptionsModel

SIZE_RE = re.compile(r"^[1-9][0-9]*[bkmg]?$", re.IGNORECASE)


class DockerBuild(OptionsModel):
    """How ``backend: docker`` builds its image (docker/Dockerfile of this project by default)."""

    # Build context, relative to the spec file; the Dockerfile path is relative to the context.
    context: str = "."
    dockerfile: str = "docker/Dockerfile"
    # The BASE_IMAGE build arg (default in the Dockerfile: an official Python image).
    base_image: Optional[str] = None
    args: dict[str, str] = Field(default_factory=dict)
    # Network for RUN steps, e.g. "host" when the engine's bridge has no way out.
    network: Optional[str] = None
    # "missing": build only when the image is absent; "always": build on every `up` (cached).
    when: Literal["missing", "always"] = "missing"


class DockerOptions(OptionsModel):
    """``docker:`` -- the image, its build, and the engine used by ``backend: docker``."""

    image: str = "tfcluster-worker:latest"
    build: Optional[DockerBuild] = None
    # Without docker.build, a missing image is pulled ("missing") or reported ("never").
    pull: Literal["missing", "never"] = "missing"
    # Engine URL like unix:///var/run/docker.sock or tcp://host:2375 (default: $DOCKER_HOST).
    engine: Optional[str] = None
    # Extra bind mounts for every task, "HOST_PATH:CONTAINER_PATH[:ro]" (host path relative to the spec).
    volumes: tuple[str, ...] = ()
    # Run tasks as this user (default: the image's user, or yours when you are not root).
    user: Optional[str] = None
    # Each container's /dev/shm ("1g", "512m", bytes); default: 1g for a container with GPUs
    # (NCCL's shared-memory transport needs more than Docker's 64m), the engine's for the others.
    shm_size: Optional[str] = None

    @field_validator("shm_size", mode="before")
    @classmethod
    def _shm_size(cls, v):
        if v is None:
            return v
        text = str(v).strip() if not isinstance(v, bool) else ""
        if not SIZE_RE.match(text):
            raise ValueError(f"{v!r} is not a size; use e.g. 1g, 512m or a number of bytes")
        return text.lower()

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.match(v):
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
