"""launcher/app/ holds the use cases: they return typed results (launcher/app/results.py) and leave
printing and exit codes to the CLI. Held with ``ast`` over the source: no ``print``, no ``EXIT_*``
name, no ``sys.exit``/``exit``/``SystemExit``, no import of ``launcher.ui``; and no function over 80 lines (a use case reads
top to bottom in one screen or is split into named steps)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "launcher" / "app"
LONGEST = 80


def _sources() -> dict[str, ast.AST]:
    found = {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
             for p in sorted(APP.rglob("*.py"))}
    assert len(found) > 5, found  # up, detach, down, attach, inspect, tensorboard...
    return found


def printing_or_exiting(tree: ast.AST) -> list[tuple[int, str]]:
    """Where ``tree`` prints, names an exit code or exits: (line, what)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "exit", "quit"):
            found.append((node.lineno, f"{node.func.id}()"))
        elif isinstance(node, ast.Attribute) and node.attr == "exit" and isinstance(node.value, ast.Name) \
                and node.value.id in ("sys", "os"):
            found.append((node.lineno, f"{node.value.id}.exit"))
        elif isinstance(node, ast.Attribute) and node.attr in ("_exit",) and isinstance(node.value, ast.Name):
            found.append((node.lineno, f"{node.value.id}._exit"))
        elif isinstance(node, ast.Name) and (node.id.startswith("EXIT_") or node.id == "SystemExit"):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("EXIT_"):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.alias) and (node.name.startswith("EXIT_") or node.name == "exit"):
            found.append((getattr(node, "lineno", 0), f"import {node.name}"))
    return sorted(found)


def long_functions(tree: ast.AST, limit: int = LONGEST) -> list[tuple[int, str, int]]:
    return sorted((node.lineno, node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.end_lineno - node.lineno + 1 > limit)


def test_no_use_case_prints_names_an_exit_code_or_exits():
    found = [f"{path}:{line}: {what}" for path, tree in _sources().items() for line, what in printing_or_exiting(tree)]
    assert not found, ("launcher/app/ returns results (launcher/app/results.py); the CLI prints them and "
                       "maps their outcome with launcher.errors.exit_code_for:\n" + "\n".join(found))


def ui_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Where ``tree`` imports launcher.ui (or a module of it): (line, module)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name == "launcher.ui" or a.name.startswith("launcher.ui.")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "launcher.ui" or node.module.startswith("launcher.ui."):
                found.append((node.lineno, node.module))
            elif node.module == "launcher" and any(a.name == "ui" for a in node.names):
                found.append((node.lineno, "launcher.ui"))
    return found


def test_no_use_case_imports_the_terminal():
    """A use case reports through the sinks it is given (launcher/app/sinks.py: the CLI's
    Console is one; ``Notices`` for the plainer ones) and returns data the CLI renders."""
    found = [f"{path}:{line}: {module}" for path, tree in _sources().items() for line, module in ui_imports(tree)]
    assert not found, "launcher/app/ imports nothing of launcher.ui:\n" + "\n".join(found)
    assert all(ui_imports(ast.parse(src)) for src in (
        "from launcher.ui.console import Console", "import launcher.ui.table", "from launcher import ui",
        "def f():\n    from launcher.ui.plantext import render_plan"))
    assert not ui_imports(ast.parse("from launcher.notices import Notices\nfrom launcher.uix import y"))


def test_no_use_case_function_is_over_80_lines():
    found = [f"{path}:{line}: {name} is {n} lines" for path, tree in _sources().items()
             for line, name, n in long_functions(tree)]
    assert not found, f"split these into named steps (at most {LONGEST} lines each):\n" + "\n".join(found)


def test_the_rules_see_what_they_forbid():
    bad = ("print('x')", "import sys\nsys.exit(2)", "from launcher.errors import EXIT_OK",
           "from launcher import errors\nreturn_ = errors.EXIT_FAILED", "raise SystemExit(1)", "exit(3)",
           "import os\nos._exit(1)")
    assert all(printing_or_exiting(ast.parse(src)) for src in bad), [s for s in bad if not printing_or_exiting(ast.parse(s))]
    assert not printing_or_exiting(ast.parse("console.info('x')\nresult = exit_code_for\nexit_note = 1"))
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == [(1, "f", LONGEST + 1)]
    assert long_functions(ast.parse(f"def f():\n{body}\n"), LONGEST + 1) == []
