"""The run's image: present on the engine, pulled or built as the spec says, and what it tells
the backend about itself (its own init, the lifeline wrapper, its user)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import LaunchError
from launcher.notices import Notices
from launcher.backends.docker.engine import docker, requests
from launcher.backends.docker.options import DockerOptions

# On the image: the command that runs a task under a stdin lifeline (docker/Dockerfile sets it).
LABEL_LIFELINE = "tfcluster.lifeline"
# ... and that its wrapper takes --control (launcher/remote/taskstream.py): the task's control channel.
LABEL_CHANNEL = "tfcluster.channel"
_BUILD_TIMEOUT = 3600


@dataclass(frozen=True)
class ImageConfig:
    """What the image's config decides about its containers."""

    init: bool  # the image has no init (tini) of its own: the engine's goes in
    wrapper: list[str] = field(default_factory=list)  # the lifeline command, [] without one
    user: str = ""  # the image's USER
    # Its wrapper frames the task's output with its control channel; False: no such wrapper (a user's
    # image, an older tfcluster's): the task's control lines are read in band (backends/channel.py).
    channel: bool = False


def config(client: Any, image: str) -> ImageConfig:
    cfg = client.api.inspect_image(image)["Config"] or {}
    labels = cfg.get("Labels") or {}
    wrapper = labels.get(LABEL_LIFELINE, "")
    return ImageConfig(init=not cfg.get("Entrypoint"), wrapper=shlex.split(wrapper) if wrapper else [],
                       user=cfg.get("User") or "", channel=bool(wrapper) and labels.get(LABEL_CHANNEL) == "1")


def ensure(client: Any, opts: DockerOptions, base_dir: Path, url: str, console: Notices) -> None:
    """The image on the engine: kept if there (unless docker.build.when says rebuild), else built
    from docker.build, else pulled unless docker.pull is never."""
    image = opts.image
    build = opts.build
    present = True
    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        present = False
    if present and (build is None or build.when == "missing"):
        return
    if build is not None:
        build_image(client, opts, base_dir, console)
        return
    fix = f"build it (tfcluster image build -t {image}) or add docker.build to the spec"
    if opts.pull == "never":
        raise LaunchError(
            f"docker.image: image '{image}' is not on the Docker engine at {url} and docker.pull is never; {fix}"
        )
    pull_image(client, image, url, console, fix)


def pull_image(client: Any, image: str, url: str, console: Notices, fix: str) -> None:
    console.info(f"pulling image {image}")
    error = ""
    try:
        for chunk in client.api.pull(image, stream=True, decode=True):
            if "error" in chunk:
                error = str(chunk["error"])
    except docker.errors.APIError as exc:
        error = exc.explanation or str(exc)
    except requests.exceptions.RequestException as exc:
        error = f"lost the engine during the pull ({exc.__class__.__name__})"
    if error:
        reason = error.strip().splitlines()[0][:200]
        raise LaunchError(
            f"docker.image: image '{image}' is not on the Docker engine at {url} and pulling it failed "
            f"({reason}); {fix}, or check the name and registry login"
        )


def build_image(client: Any, opts: DockerOptions, base_dir: Path, console: Notices) -> None:
    build = opts.build
    assert build is not None
    args = dict(build.args)
    if build.base_image:
        args["BASE_IMAGE"] = build.base_image
    if build.packaged:  # tfcluster's own worker image, from the installed tfcluster
        build_packaged(client, opts.image, args, build.network, console)
        return
    context = (base_dir / (build.context or ".")).resolve()
    if not context.is_dir():
        raise LaunchError(f"docker.build.context: {context} is not a directory; fix the path (relative to the spec)")
    dockerfile = build.file
    if not (context / dockerfile).is_file():
        raise LaunchError(
            f"docker.build.dockerfile: {context / dockerfile} not found; give its path relative to the build context "
            "(or neither context nor dockerfile: tfcluster's worker image)"
        )
    console.info(f"building image {opts.image} from {context / dockerfile} (context {context})")
    _build(client, opts.image, context, dockerfile, args, build.network, console)


def build_packaged(client: Any, image: str, args: dict[str, str], network: Any, console: Notices) -> None:
    """The worker image of the installed tfcluster: its packaged Dockerfile on a context made from
    what is installed (launcher/image/), in a temporary directory."""
    import tempfile

    from launcher import image as workerimage

    with tempfile.TemporaryDirectory(prefix="tfcluster-image-") as tmp:
        context = workerimage.make_context(Path(tmp) / "context")
        console.info(f"building image {image} from tfcluster {workerimage.launcher.__version__}'s worker "
                     "Dockerfile (the installed package)")
        _build(client, image, context, "Dockerfile", args, network, console)


def _build(client: Any, image: str, context: Path, dockerfile: str, args: dict[str, str], network: Any,
           console: Notices) -> None:
    started = time.monotonic()
    tail: list[str] = []
    error = ""
    try:
        stream = client.api.build(
            path=str(context), dockerfile=dockerfile, tag=image, buildargs=args or None,
            network_mode=network, rm=True, forcerm=True, decode=True, timeout=_BUILD_TIMEOUT,
        )
        for chunk in stream:
            if "error" in chunk:
                error = str(chunk["error"]).strip()
            text = chunk.get("stream")
            if text:
                for line in text.rstrip("\n").splitlines():
                    tail = (tail + [line])[-20:]
                    if line.startswith("Step ") or line.startswith("Successfully"):
                        console.info(f"build: {line}")
    except docker.errors.APIError as exc:
        error = exc.explanation or str(exc)
    except requests.exceptions.RequestException as exc:
        error = f"lost the engine during the build ({exc.__class__.__name__})"
    if error:
        if tail:
            console.block([f"  | {line}" for line in tail])
        first = error.splitlines()[0][:300]
        raise LaunchError(
            f"docker.build: building image '{image}' failed: {first}; fix the Dockerfile, docker.build.args "
            "or the network the build needs (docker.build.network)"
        )
    console.info(f"built image {image} in {time.monotonic() - started:.0f} s")
