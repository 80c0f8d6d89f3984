"""The entrypoint's own Python script, read before any task starts (``validate``, ``plan``, ``up``):
what would fail in every task is refused in one line naming the file and line, with the fix.

* a script that writes TF_CONFIG itself (a tutorial's ``os.environ["TF_CONFIG"] = ...`` with
  localhost:12345), unguarded and not an edit of the one it was given: under a cluster strategy it
  would replace the plan's, and the tasks would wait for a cluster that is not this run's;
* where a task's ``import keras`` is tf_keras (launcher/plan/kerasplan.py), a script that uses what
  only Keras 3 has (launcher/loader/keras3.py) or sets another Keras backend (in the script, or
  KERAS_BACKEND in the spec's env).

The script is read where it is the task's own file: the spec's workdir for the backends that run
tasks there (local, slurm) or upload all of it (ssh with ``ssh.sync: [.]``), as
launcher/loader/shadow.py finds it; with the modules beside it that it imports, two levels deep
(as launcher/contract/usestf.py). A script not found or not readable here is not judged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from launcher.bounded import one_line
from launcher.contract.entrypoint import is_reference_worker, module_of
from launcher.contract.usestf import module_beside
from launcher.errors import SpecError
from launcher.loader.scriptread import MAX_SOURCE, Facts, Use, read_source
from launcher.loader.shadow import task_dirs
from launcher.plan.kerasplan import keras_major
from launcher.spec.model import CLUSTER_STRATEGIES, LoadedSpec

SHOWN = 5  # refusals shown; the rest are counted
DEPTH = 2  # levels of the modules beside the script that are read (as usestf.py)
_WITH_VALUE = {"-X", "-W", "-Q"}


def script_word(argv) -> Optional[str]:
    """SCRIPT of ``python[3[.x]] [options] SCRIPT ...``, else None (``-m`` is module_of's; ``-c``: none)."""
    if not argv or not os.path.basename(argv[0]).startswith("python") or is_reference_worker(argv):
        return None
    words = iter(argv[1:])
    for word in words:
        if word in _WITH_VALUE:
            next(words, None)
        elif word == "-c" or word.startswith("-m") or word == "-":
            return None
        elif not word.startswith("-"):
            return word
    return None


def entry_file(loaded: LoadedSpec) -> Optional[Path]:
    """The entrypoint's script (or ``-m`` module's file) where a task's working directory is a
    local one, if it is a file there."""
    argv = loaded.spec.argv
    module = module_of(argv)
    script = None if module else script_word(argv)
    if is_reference_worker(argv) or not (module or script):
        return None
    for directory in task_dirs(loaded):
        if script:
            path = directory / script
            if path.is_file():
                return path
        else:
            base = directory.joinpath(*module.split("."))
            for path in (base.with_suffix(".py"), base / "__main__.py"):
                if path.is_file():
                    return path
    return None


def _read(path: Path) -> Optional[str]:
    """Its text (the first MAX_SOURCE bytes), where it is a regular file (a FIFO planted there is
    never waited on); else None."""
    from launcher.safefile import open_regular

    try:
        with open_regular(path) as fh:
            return fh.read(MAX_SOURCE).decode("utf-8", errors="replace")
    except OSError:  # (NotRegular and UnsafeFile are OSErrors)
        return None


def entry_source(argv, path: str) -> Optional[str]:
    """The text of ``path`` (a file a task's traceback names) when it is the script ``argv`` runs
    (the same file name) and a file here; else None. A task's output names the path: no other
    file is opened for it."""
    script = script_word(argv)
    if not script or os.path.basename(path) != os.path.basename(script) or not path.endswith(".py"):
        return None
    where = Path(path)
    return _read(where) if where.is_file() else None


def script_facts(first: Path) -> list[tuple[Path, Facts]]:
    """Each file read (the script first, then the modules beside it it imports) with its facts."""
    out: list[tuple[Path, Facts]] = []
    todo, seen = [(first, 0)], set()
    while todo:
        path, depth = todo.pop(0)
        real = path.resolve()
        if real in seen:
            continue
        seen.add(real)
        text = _read(path)
        if text is None:
            continue
        facts = read_source(text)
        out.append((path, facts))
        if depth < DEPTH:
            for name in sorted(facts.imports):
                near = module_beside(str(path.parent), name)
                if near:
                    todo.append((Path(near), depth + 1))
    return out


def _where(loaded: LoadedSpec, path: Path, use: Use) -> str:
    try:
        shown = os.path.relpath(path, loaded.base_dir)
    except ValueError:
        shown = str(path)
    return one_line(f"{shown}:{use.line}", 200)


def problems(loaded: LoadedSpec) -> list[tuple[tuple, str]]:
    """The refusals, as (key of the spec, message) pairs: the spec's own KERAS_BACKEND first, then
    what its script does."""
    spec = loaded.spec
    aliased = keras_major(spec) == 2
    out: list[tuple[tuple, str]] = []
    keep = "or set `keras: 3` in the spec to keep Keras 3 (a custom training loop only: its model.fit cannot " \
           f"train under {spec.strategy})"
    why = f"under {spec.strategy} a task's `import keras` is tf_keras"
    backend = spec.env.get("KERAS_BACKEND", "tensorflow").strip().lower()
    if aliased and backend not in ("tensorflow", ""):
        out.append((("env", "KERAS_BACKEND"), f"{one_line(backend, 40)}: {why}, which runs on TensorFlow only; "
                    f"remove KERAS_BACKEND, {keep}"))
    first = entry_file(loaded)
    if first is None:
        return out
    for path, facts in script_facts(first):
        for use in (facts.tf_config if spec.strategy in CLUSTER_STRATEGIES else []):
            out.append((("entrypoint",), f"{_where(loaded, path, use)} sets TF_CONFIG itself ({use.what}) over the "
                        "one tfcluster gives each task: the tasks would wait for a cluster that is not this run's; "
                        "remove that line (each task's TF_CONFIG comes from the plan: `tfcluster plan` shows it), or "
                        "guard it with `if \"TF_CONFIG\" not in os.environ:`"))
        if not aliased:
            continue
        for use in facts.backend:
            out.append((("entrypoint",), f"{_where(loaded, path, use)} sets {one_line(use.what, 60)}: {why}, which "
                        f"runs on TensorFlow only; remove that line, {keep}"))
        for use in facts.keras3:
            fix = f"use {use.fix}, " if use.fix else "write it with what tf_keras or TensorFlow has, "
            out.append((("entrypoint",), f"{_where(loaded, path, use)} uses {one_line(use.what, 80)}, which only "
                        f"Keras 3 has: {why} (Keras 3 model.fit cannot train under it); {fix}{keep}"))
    return out


def check_script(loaded: LoadedSpec) -> None:
    """SpecError with a line for each refusal (at most SHOWN, then their count), else nothing."""
    found = problems(loaded)
    if not found:
        return
    lines = [message for _, message in found[:SHOWN]]
    keys: list = [key for key, _ in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(f"... and {len(found) - SHOWN} more such lines")
        keys.append(None)
    raise SpecError(*lines, keys=tuple(keys))
