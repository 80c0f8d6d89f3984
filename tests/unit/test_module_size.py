"""No module in launcher/ is over 450 lines.

A module that long holds several topics a reader has to tell apart: split it by topic into sibling
modules, each with a docstring that says what it holds (a module of launcher/remote/ a task's host
imports goes in launcher.remote.TASK_FILES too). Counted as the file's lines, docstring and
comments included.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 450

# Modules over the limit today, each with the reason. The test fails on any other, and on a listed
# one that is gone or back under the limit (then drop it from here).
KNOWN_LARGE: dict[str, str] = {}


def large_modules(root: Path = ROOT, limit: int = LIMIT) -> dict[str, int]:
    """``path`` -> lines, for every module of launcher/ over ``limit`` lines."""
    found = {}
    for path in sorted((root / "launcher").rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_is_over_the_limit():
    found = large_modules()
    new = {p: n for p, n in found.items() if p not in KNOWN_LARGE}
    assert not new, "split by topic into sibling modules:\n" + "\n".join(f"{p}: {n} lines" for p, n in new.items())
    stale = sorted(set(KNOWN_LARGE) - set(found))
    assert not stale, f"under the limit now (or gone): drop them from KNOWN_LARGE: {stale}"


def test_the_count_finds_a_long_module(tmp_path):
    (tmp_path / "launcher" / "pkg").mkdir(parents=True)
    (tmp_path / "launcher" / "pkg" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    (tmp_path / "launcher" / "short.py").write_text("x = 1\n" * LIMIT)
    assert large_modules(tmp_path) == {"launcher/pkg/long.py": LIMIT + 1}
