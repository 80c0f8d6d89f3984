"""At most 6 modules directly in launcher/: the package's own (``__init__``, ``__main__``) and the
leaves every layer uses (docs/architecture.md, layer 13). Anything else belongs in a package that
says what it is for (``launcher/system/``: this machine's processes and signals)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 6


def top_level_modules(root: Path = ROOT) -> list[str]:
    return sorted(p.name for p in (root / "launcher").glob("*.py"))


def test_at_most_six_modules_sit_directly_in_launcher():
    found = top_level_modules()
    assert len(found) <= LIMIT, f"{len(found)} modules in launcher/ ({', '.join(found)}): move some into a package"


def test_the_count_sees_the_modules(tmp_path):
    (tmp_path / "launcher" / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "pkg/b.py", "notes.txt"):
        (tmp_path / "launcher" / name).write_text("")
    assert top_level_modules(tmp_path) == ["__init__.py", "a.py"]
