"""One class per name in launcher/: a name a reader meets in one layer means the same class in every
other (the record's ``Failure`` event is not the supervisor's ``AttemptFailure``, the spec's
``TaskGroup`` block not the supervisor's ``AttemptGroup``). Nested classes count too."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def classes_defined_twice(root: Path = ROOT) -> dict[str, list[str]]:
    """Class name -> the modules of launcher/ that define it, for each name defined more than once."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted((root / "launcher").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_no_two_classes_share_a_name():
    twice = classes_defined_twice()
    assert not twice, "rename one of each (a name says what the class is in its layer):\n" + "\n".join(
        f"{name}: {', '.join(places)}" for name, places in sorted(twice.items()))


def test_the_scan_finds_a_name_defined_twice(tmp_path):
    (tmp_path / "launcher" / "a").mkdir(parents=True)
    (tmp_path / "launcher" / "a" / "x.py").write_text("class Plan:\n    class Inner:\n        pass\n")
    (tmp_path / "launcher" / "y.py").write_text("class Plan:\n    pass\nclass Other:\n    pass\n")
    assert classes_defined_twice(tmp_path) == {"Plan": ["launcher/a/x.py:1", "launcher/y.py:1"]}
