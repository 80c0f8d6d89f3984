"""The CLI is the top: running a spec lives in launcher/app/up.py, and no module of the launcher
outside launcher/cli/ imports it (only ``python -m launcher``, __main__.py, calls its main, and
``python -m launcher.cli.docsgen`` documents its parser: entry points, which nothing imports)."""

import ast
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    package = path.relative_to(LAUNCHER.parent).with_suffix("").parts[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def test_nothing_in_the_launcher_imports_the_cli():
    importers = [str(p.relative_to(LAUNCHER.parent)) for p in sorted(LAUNCHER.rglob("*.py"))
                 if p.name != "__main__.py" and LAUNCHER / "cli" not in p.parents
                 and any(m.startswith("launcher.cli") for m in _imports(p))]
    assert importers == []


def test_nothing_imports_the_entry_points_above_the_cli():
    importers = [str(p.relative_to(LAUNCHER.parent)) for p in sorted(LAUNCHER.rglob("*.py"))
                 if _imports(p) & {"launcher.cli.docsgen", "launcher.__main__"}]
    assert importers == []


def test_the_use_cases_are_reached_through_execution():
    assert "launcher.app.up" in _imports(LAUNCHER / "cli" / "lifecycle.py")  # `tfcluster up`
    assert "launcher.app.up" in _imports(LAUNCHER / "compare" / "run.py")
    assert "launcher.app.up" in _imports(LAUNCHER / "app" / "detach.py")
