"""Prerequisites of integration tests: skip with a reason on a developer machine, but under
``CI=true`` a missing prerequisite is a failure, never a silent skip."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (or, in CI, fail) the calling test/fixture unless ``condition`` holds."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI prerequisite missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_tf() -> None:
    have = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf_keras", "tensorflow_datasets"))
    require(have, "TensorFlow, tf-keras and tensorflow-datasets are not installed (pip install -e '.[tf]')")


def require_root() -> None:
    require(os.geteuid() == 0, "needs root (network namespaces / dockerd)")


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"'{name}' not found; install Debian package {package}")
    return path or ""
