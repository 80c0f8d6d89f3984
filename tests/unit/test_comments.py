"""Comments and docstrings give the reason, never the history: no "issue N" or "session N" in
launcher/, worker/, tests/ or bench/. Which issue asked for a change, and what a soak run saw,
belong in the commit message; the code says what it protects against, so a reader without the
tracker still knows why it is there."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "launcher").is_dir())  # wherever this file sits
FOLDERS = ("launcher", "worker", "tests", "bench")
HISTORY = re.compile(r"\b(?:issues?|session)\s*#?\d+", re.I)


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, or comment of a shell script."""
    text = path.read_text()
    if path.suffix == ".sh":
        return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("#")]
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    return out


def _files() -> list[Path]:
    return sorted(p for folder in FOLDERS for pattern in ("*.py", "*.sh") for p in (ROOT / folder).rglob(pattern))


def test_no_comment_or_docstring_narrates_an_issue_or_a_session():
    found = [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}: say what the code protects against instead"
             for path in _files() for line, text in _prose(path) for m in HISTORY.finditer(text)]
    assert not found, "\n".join(found)


def test_the_check_sees_comments_and_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Module (issue 7)."""\n\ndef f():\n    """Session 3 found it."""\n    return 1  # issue #12\n'
                      'MESSAGE = "issue 5 in a plain string is data, not narration"\n')
    hits = [(line, m.group(0)) for line, text in _prose(sample) for m in HISTORY.finditer(text)]
    assert sorted(hits) == [(1, "issue 7"), (4, "Session 3"), (5, "issue #12")]
    assert {p.relative_to(ROOT).parts[0] for p in _files()} == set(FOLDERS)
