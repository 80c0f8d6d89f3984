"""Whether an entrypoint ``python -m worker`` / ``python -m launcher`` would run someone else's code.

``python -m NAME`` puts the task's working directory first on ``sys.path``, so a ``worker.py`` (or
a ``worker/`` package) there runs instead of tfcluster's reference worker, silently. ``validate``
and ``up`` say so in one warning line; the ``tfcluster-worker`` script has no such trap (it imports
the installed package, never the working directory). Pure: paths and the spec in, lines out.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

from launcher.backends import backend_class
from launcher.contract.entrypoint import module_of
from launcher.spec.model import LoadedSpec

SHADOWED = ("worker", "launcher")  # the two top-level packages the distribution installs
_PRODUCT = Path(__file__).resolve().parents[2]  # where this launcher/ (and its worker/) live


def shadowing_file(directory: Path, module: str) -> Optional[Path]:
    """The file in ``directory`` that ``python -m module`` run there would import instead of
    tfcluster's own package (None if there is none, or if it *is* tfcluster's own, as in a checkout)."""
    for candidate in (directory / f"{module}.py", directory / module / "__init__.py", directory / module / "__main__.py"):
        if candidate.is_file():
            if candidate.parent.resolve() == (_PRODUCT / module).resolve():
                return None  # tfcluster's own checkout: this is the reference package
            return candidate
    return None


def task_dirs(loaded: LoadedSpec) -> list[Path]:
    """The local directories whose content becomes a task's working directory, as the spec's
    backend says (``BackendKind.task_dirs``: the workdir where tasks run in it, or in an upload of
    all of it)."""
    return backend_class(loaded.spec.backend).task_dirs(loaded)


def warnings(loaded: LoadedSpec) -> list[str]:
    """One line per entrypoint that a file in the task's working directory would shadow."""
    module = module_of(loaded.spec.argv)
    if module not in SHADOWED:
        return []
    out = []
    for directory in task_dirs(loaded):
        found = shadowing_file(directory, module)
        if found is not None:
            fix = "use the `tfcluster-worker` command instead" if module == "worker" else "use the `tfcluster` command"
            out.append(f"warning: entrypoint: `python -m {module}` would run {found} (the task's directory comes "
                       f"first on sys.path), not tfcluster's {module}; {fix}, or rename that file")
    return out
