"""The test suite's own shape (issue 21): what tests share is written once, in tests/support.

- the CLI runs in a subprocess through tests/support/cli.py (``tfcluster``, ``start_tfcluster``,
  ``terminal_command``), never through another ``[sys.executable, "-m", "launcher", ...]``;
- a spec's one error line comes from tests/support/errors.py (``one_error``, ``spec_errors``);
- the fake backend the supervisor runs against is tests/support/fakes.py;
- a test that needs TensorFlow is marked ``tf``: tests/conftest.py runs the check (skip, or fail
  under CI=true) for it, so no test calls ``require_tf()`` itself.
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


def test_the_rules_see_the_files():
    files = {p.relative_to(TESTS).as_posix() for p in _test_files()}
    assert {"integration/tfrun.py", "unit/test_spec.py", "unit/test_supervisor_scripted.py"} <= files
    assert "integration/ssh/test_ssh_elastic.py" in files  # the ssh lab's tests too
    assert not any(f.startswith("support/") for f in files)
