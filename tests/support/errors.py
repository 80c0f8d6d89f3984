"""The one-line errors the project promises: a spec's (``SpecError`` lines) and the CLI's."""

from __future__ import annotations

import textwrap

import pytest

from launcher.errors import SpecError
from launcher.loader.load import parse_spec


def spec_errors(text: str, name: str = "c.yaml") -> list[str]:
    """The error lines of parsing the (dedented) spec ``text``, which must fail; none holds a newline."""
    with pytest.raises(SpecError) as info:
        parse_spec(textwrap.dedent(text), name)
    lines = list(info.value.lines)
    assert all("\n" not in line for line in lines), lines
    return lines


def one_error(text: str, name: str = "c.yaml") -> str:
    """The one error line of parsing the (dedented) spec ``text``."""
    lines = spec_errors(text, name)
    assert len(lines) == 1, lines
    return lines[0]


def one_cli_error(err: str) -> str:
    """The CLI's stderr ``err`` is one ``tfcluster: error:`` line and no traceback: that line."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfcluster: error: ") and "Traceback" not in err, err
    return lines[0]
