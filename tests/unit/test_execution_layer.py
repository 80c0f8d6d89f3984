"""The CLI is the top: running a spec lives in launcher/execution.py, and no module of the
launcher imports launcher/cli.py (only ``python -m launcher``, __main__.py, calls its main, and
``python -m launcher.docsgen`` documents its parser: two entry points above it, which nothing
imports)."""

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


ABOVE_THE_CLI = (LAUNCHER / "__main__.py", LAUNCHER / "docsgen.py")


def test_nothing_in_the_launcher_imports_the_cli():
    importers = [str(p.relative_to(LAUNCHER.parent)) for p in sorted(LAUNCHER.rglob("*.py"))
                 if p not in ABOVE_THE_CLI and p != LAUNCHER / "cli.py" and "launcher.cli" in _imports(p)]
    assert importers == []


def test_nothing_imports_the_entry_points_above_the_cli():
    importers = [str(p.relative_to(LAUNCHER.parent)) for p in sorted(LAUNCHER.rglob("*.py"))
                 if _imports(p) & {"launcher.docsgen", "launcher.__main__"}]
    assert importers == []


def test_the_use_cases_are_reached_through_execution():
    assert "launcher.execution" in _imports(LAUNCHER / "cli.py")
    assert "launcher.execution" in _imports(LAUNCHER / "compare" / "run.py")
    assert "launcher.execution" in _imports(LAUNCHER / "detach.py")
