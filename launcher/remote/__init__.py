"""Stdlib-only helpers the ssh backend sends to remote hosts (never imported by the launcher
for execution; their source text is uploaded or passed to ``python -c``), and the one locator of
the code that runs beside a task: ``source`` for these helpers, ``taskwrap_path`` for the wrapper."""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def source(name: str) -> str:
    """The text of a helper module shipped to hosts (``agent.py``, ``boot.py``)."""
    return (HERE / name).read_text(encoding="utf-8")


def taskwrap_path() -> Path:
    """launcher/taskwrap.py, the per-task wrapper: run as a file by the local and slurm backends,
    uploaded next to ``boot.py`` by the ssh backend."""
    return HERE.parent / "taskwrap.py"
