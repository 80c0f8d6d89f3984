"""launcher/loader/keras3.py against the installed keras and tf_keras, read as text (their
``__init__.py`` files are generated lists of imports; nothing is imported): every name the table
calls Keras 3's alone is in Keras 3 and not in tf_keras, and every such name of the modules it
covers is in the table. Skipped where either package is not installed."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from launcher.loader.keras3 import NESTED, TOP


def _package(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{name} is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _names(init: Path) -> set[str]:
    """The public names a generated ``__init__.py`` binds (its imports' and assignments' names)."""
    if not init.is_file():
        return set()
    out = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in out if not n.startswith("_")}


def test_the_table_is_what_keras3_has_and_tf_keras_lacks():
    k3, k2 = _package("keras"), _package("tf_keras")
    only_top = _names(k3 / "__init__.py") - _names(k2 / "__init__.py")
    assert set(TOP) == only_top, (sorted(set(TOP) - only_top), sorted(only_top - set(TOP)))
    subs = {key.split(".", 1)[0] for key in NESTED}
    for sub in subs:
        only = _names(k3 / sub / "__init__.py") - _names(k2 / sub / "__init__.py")
        listed = {key.split(".", 1)[1] for key in NESTED if key.startswith(sub + ".")}
        assert listed == only, (sub, sorted(listed - only), sorted(only - listed))
