"""Stdlib-only helpers the ssh backend sends to remote hosts (never imported by the launcher
for execution; their source text is uploaded or passed to ``python -c``)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def source(name: str) -> str:
    """The text of a helper module shipped to hosts (``agent.py``, ``boot.py``)."""
    return (HERE / name).read_text(encoding="utf-8")
