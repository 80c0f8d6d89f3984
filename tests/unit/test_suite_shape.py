"""The test suite's own shape: what tests share is written once, in tests/support.

- the CLI runs in a subprocess through tests/support/cli.py (``tfcluster``, ``start_tfcluster``,
  ``terminal_command``), never through another ``[sys.executable, "-m", "launcher", ...]``;
- a spec's one error line comes from tests/support/errors.py (``one_error``, ``spec_errors``);
- the fake backend the supervisor runs against is tests/support/fakes.py;
- a test that needs TensorFlow is marked ``tf``: tests/conftest.py runs the check (skip, or fail
  under CI=true) for it, so no test calls ``require_tf()`` itself;
- a helper module that more than one test file imports lives in tests/support (the labs they start in
  tests/labs), so a reader finds every shared helper in one folder and none is written twice.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# What a test file must not write itself, and where it is instead.
WRITTEN_ONCE = {
    r'"-m",\s*"launcher"': "runs the CLI itself: use tests/support/cli.py",
    r"^\s*def one_error\(": "defines its own one_error: use tests/support/errors.py",
    r"^class \w+\((Backend|TaskHandle)\)": "defines its own fake backend: use (or extend) tests/support/fakes.py",
    r"\brequire_tf\(\)": "checks for TensorFlow itself: mark the test tf (pytest.mark.tf) instead",
}
# Files allowed what the rule forbids, each with the reason.
OWNERS = {"support", "conftest.py"}  # tests/support/ and tests/conftest.py are where these live


def _test_files() -> list[Path]:
    out = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel.split("/")[0] in OWNERS or path == Path(__file__).resolve():
            continue
        out.append(path)
    return out


def test_what_tests_share_is_written_once_in_tests_support():
    found = []
    for path in _test_files():
        text = path.read_text()
        for pattern, why in WRITTEN_ONCE.items():
            for m in re.finditer(pattern, text, re.M):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(TESTS.parent)}:{line}: {why}")
    assert not found, "\n".join(found)


SHARED_HOMES = ("tests.support", "tests.labs")
IMPORT = re.compile(r"^\s*(?:from\s+(tests(?:\.\w+)+)\s+import|import\s+(tests(?:\.\w+)+))", re.M)
RELATIVE = re.compile(r"^\s*from\s+\.+(\w+)\s+import", re.M)  # from .test_x import: a sibling's helpers


def test_helpers_that_tests_share_live_in_tests_support():
    importers: dict[str, list[str]] = {}
    for path in _test_files():
        for m in IMPORT.finditer(path.read_text()):
            module = m.group(1) or m.group(2)
            if not module.startswith(SHARED_HOMES):
                importers.setdefault(module, []).append(path.relative_to(TESTS.parent).as_posix())
        for m in RELATIVE.finditer(path.read_text()):
            if m.group(1) != "conftest":  # a folder's fixtures and constants stay in its conftest.py
                importers.setdefault(f".{m.group(1)}", []).append(path.relative_to(TESTS.parent).as_posix())
    shared = {module: files for module, files in importers.items() if len(set(files)) > 1}
    assert not shared, f"move these to tests/support/: {shared}"
    # no test module is another's helper library: what a test file defines for others belongs in support
    from_tests = {module: files for module, files in importers.items() if module.rsplit(".", 1)[-1].startswith("test_")}
    assert not from_tests, f"imports a test module's helpers (move them to tests/support/): {from_tests}"
    # and nothing but tests, their conftest and the labs sits outside tests/support
    helpers = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
               if p.name not in ("conftest.py", "__init__.py", *ONE_TESTS_DATA) and not p.name.startswith("test_")
               and p.relative_to(TESTS).parts[0] not in ("support", "labs")]
    assert not helpers, f"helper modules outside tests/support/: {sorted(helpers)}"


# Modules outside tests/support that hold one test file's data (not shared, so they stay beside it).
ONE_TESTS_DATA = ("plan_goldens_specs.py",)  # test_plan_scale.py's specs


def test_the_rules_see_the_files():
    files = {p.relative_to(TESTS).as_posix() for p in _test_files()}
    assert {"integration/test_local_tf.py", "unit/spec/test_spec.py", "unit/supervise/test_supervisor_scripted.py"} <= files
    assert "integration/ssh/test_ssh_elastic.py" in files  # the ssh lab's tests too
    assert not any(f.startswith("support/") for f in files)


def test_the_unit_tests_mirror_the_packages():
    """tests/unit/<package>/ holds the tests of launcher/<package>/ (tests/unit/worker/ those of worker/);
    tests/unit/ itself the top-level modules' and the rules of the whole tree (layers, comments, docs)."""
    root = TESTS.parent
    folders = {p.parent.relative_to(TESTS / "unit").as_posix() for p in (TESTS / "unit").rglob("test_*.py")} - {"."}
    strays = sorted(f for f in folders if f != "worker" and not (root / "launcher" / f / "__init__.py").exists())
    assert not strays, f"tests/unit/ folders with no launcher package of that name: {strays}"
    assert {"spec", "plan", "supervise", "backends/ssh", "record", "ui", "cli"} <= folders
