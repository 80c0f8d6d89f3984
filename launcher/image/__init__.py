"""The worker image from the installed tfcluster, no checkout needed: the one Dockerfile is the
checkout's docker/Dockerfile, which the package carries as launcher/image/Dockerfile (a link to it
in the checkout, the file itself in the wheel: package data), and ``make_context`` writes the build
context it expects
from what is installed: ``requirements.txt`` (the installed distribution's requirements, its ``[tf]``
extra included) and ``src/`` (the installed ``launcher`` and ``worker`` packages with a small
pyproject.toml that installs them, console scripts and package data included).

Used by ``backend: docker`` when ``docker.build`` names no context (its SDK builds it), and by
``tfcluster image build|print`` (for docker-compose users: the docker CLI builds it). Stdlib only,
and no backend's: the docker SDK stays in launcher/backends/docker/.
"""

from __future__ import annotations

import re
import shutil
from importlib import metadata, resources
from pathlib import Path

import launcher
from launcher.errors import LaunchError

DISTRIBUTION = "tfcluster"
PACKAGES = ("launcher", "worker")
EXTRA = "tf"  # the extra every worker needs (TensorFlow and the rest)
_EXTRA_RE = re.compile(r"""^\s*extra\s*==\s*["']([^"']+)["']\s*$""")


def dockerfile_text() -> str:
    """The packaged Dockerfile."""
    return resources.files("launcher").joinpath("image", "Dockerfile").read_text(encoding="utf-8")


def requirements(extra: str = EXTRA) -> list[str]:
    """The installed tfcluster's requirements and its ``extra``'s, as requirements.txt lines
    (``; extra == "tf"`` dropped, any other marker kept)."""
    try:
        listed = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise LaunchError(f"the worker image is built from the installed tfcluster, and no '{DISTRIBUTION}' "
                          "distribution is installed here (running from a source tree?); pip install it "
                          "(pip install -e . in a checkout)") from None
    out = []
    for line in listed:
        requirement, _, marker = line.partition(";")
        parts = [p.strip() for p in re.split(r"\band\b", marker)] if marker.strip() else []
        extras = [m.group(1) for p in parts if (m := _EXTRA_RE.match(p))]
        if extras and extras != [extra]:
            continue
        rest = [p for p in parts if not _EXTRA_RE.match(p)]
        if " or " in marker and extras:  # (a marker this simple parser does not split: keep it whole)
            continue
        out.append(canonical(requirement) + (f"; {' and '.join(rest)}" if rest else ""))
    return out


_REQUIREMENT_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503's normalized name


def canonical(requirement: str) -> str:
    """``requirement`` (no marker) as one text whatever wrote the metadata: the name and extras
    normalized (PEP 503), the version specifiers sorted, no spaces. The image's dependency layer is
    cached by requirements.txt's bytes, and two builds of the same pyproject.toml write them
    differently (one setuptools keeps ``importlib_resources``, another writes
    ``importlib-resources``; ``<3,>=2.7`` or ``>=2.7,<3``): without this, a tfcluster of the same
    requirements built elsewhere (a wheel, an editable install) reinstalls TensorFlow in its image."""
    m = _REQUIREMENT_RE.match(requirement)
    if m is None:
        return requirement.strip()
    name, extras, rest = m.groups()
    if rest and not rest.startswith(("(", "@", "<", ">", "=", "!", "~")):
        return requirement.strip()  # (not a requirement this reads: kept as written, for pip to judge)
    if extras:
        extras = "[" + ",".join(sorted(_name(e.strip()) for e in extras[1:-1].split(",") if e.strip())) + "]"
    if rest.startswith("(") and rest.endswith(")"):  # (the old metadata form: "name (>=1)")
        rest = rest[1:-1]
    if not rest.startswith("@"):  # (a URL is kept as written)
        rest = ",".join(sorted(spec.replace(" ", "") for spec in rest.split(",") if spec.strip()))
    return _name(name) + (extras or "") + (f" {rest}" if rest.startswith("@") else rest)


def _scripts() -> list[tuple[str, str]]:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return []
    return sorted((ep.name, ep.value) for ep in dist.entry_points if ep.group == "console_scripts")


def _pyproject() -> str:
    scripts = "\n".join(f'{name} = "{value}"' for name, value in _scripts())
    return f"""\
# Written by tfcluster (launcher/image/__init__.py): installs the packages beside it as
# the tfcluster {launcher.__version__} they were copied from; its requirements are requirements.txt's.
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{launcher.__version__}"
requires-python = ">=3.10"

[project.scripts]
{scripts}

[tool.setuptools.packages.find]
include = ["launcher*", "worker*"]

[tool.setuptools.package-data]
"*" = ["*", "**/*"]
"""


def _package_dir(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__).resolve().parent


def make_context(directory: Path) -> Path:
    """Write the worker image's build context into ``directory`` (made if missing; it must be
    empty): Dockerfile, requirements.txt, src/. Returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise LaunchError(f"{directory}: not empty; give a new or empty directory for the image's build context")
    (directory / "Dockerfile").write_text(dockerfile_text(), encoding="utf-8")
    (directory / "requirements.txt").write_text("\n".join(requirements()) + "\n", encoding="utf-8")
    src = directory / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
    for name in PACKAGES:
        shutil.copytree(_package_dir(name), src / name, ignore=ignore)
    (src / "pyproject.toml").write_text(_pyproject(), encoding="utf-8")
    (directory / ".dockerignore").write_text("**/__pycache__\n", encoding="utf-8")
    return directory
