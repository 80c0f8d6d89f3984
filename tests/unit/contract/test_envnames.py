"""The environment variables tfcluster sets are named once, in launcher/contract/envnames.py:
launcher/ and worker/ use its constants; prose (docstrings, help texts) may still name them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.contract import envnames

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"^TFCLUSTER_[A-Z0-9_]+$")


def test_no_module_but_envnames_spells_a_variable_name():
    found = []
    for package in ("launcher", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "launcher" / "contract" / "envnames.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}: use launcher.contract.envnames")
    assert not found, "\n".join(found)


def test_every_name_is_a_tfcluster_variable_and_named_once():
    values = [v for k, v in vars(envnames).items() if k.isupper()]
    assert all(NAME.match(v) for v in values), values
    assert len(values) == len(set(values))
