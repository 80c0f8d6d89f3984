"""No function in launcher/ or worker/ is over 80 lines.

A function that long does several things with inputs a reader has to find: split it into named steps
that take what they use. Counted with ``ast`` from ``def`` (its decorators not included) to its last
line, docstring and comments included; a nested function counts inside the one that holds it and on
its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "worker")
LIMIT = 80

# Functions over the limit today, each with the reason. The test fails on any other, and on a
# listed one that is gone or back under the limit (then drop it from here).
KNOWN_LONG: dict[str, str] = {}


def long_functions(root: Path = ROOT, limit: int = LIMIT) -> dict[str, int]:
    """``path:qualified.name`` -> lines, for every function over ``limit`` lines under PACKAGES."""
    found: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            rel = path.relative_to(root).as_posix()
            for name, node in _functions(tree):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found[f"{rel}:{name}"] = lines
    return found


def _functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def test_no_function_over_80_lines():
    found = long_functions()
    unexpected = {name: lines for name, lines in found.items() if name not in KNOWN_LONG}
    assert not unexpected, "functions over %d lines (split them into named steps with explicit inputs): %s" % (
        LIMIT, ", ".join(f"{name} ({lines} lines)" for name, lines in sorted(unexpected.items())))


def test_the_known_long_functions_are_still_long():
    found = long_functions()
    gone = sorted(name for name in KNOWN_LONG if name not in found)
    assert not gone, f"no longer over {LIMIT} lines (drop from KNOWN_LONG): {', '.join(gone)}"


def test_a_long_function_is_found(tmp_path):
    # The check itself: a function of 81 lines, nested in a class, is reported with its class.
    (tmp_path / "launcher").mkdir()
    (tmp_path / "worker").mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(80))
    (tmp_path / "launcher" / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\n\ndef short():\n    pass\n")
    assert long_functions(tmp_path) == {"launcher/m.py:C.f": 81}
