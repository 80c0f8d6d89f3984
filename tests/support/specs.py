"""Specs for tests: every cluster.yaml a test writes goes through here.

- ``spec_file``: text the test wrote out in full, into a file;
- ``local_spec``: a local-backend spec on fresh ports (tests/support/ports.py), the keys a test
  varies as arguments and anything else as ``extra`` YAML;
- ``script_spec``: a local spec whose every task runs a small Python script with this Python.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from tests.support.ports import free_base

# The smallest valid spec, for tests that add or change one key (parse_spec, one_error).
BASE = """\
name: demo
strategy: multi_worker_mirrored
entrypoint: python -m worker
tasks:
  worker: 2
"""
# The same on the slurm backend.
SLURM_BASE = BASE.replace("entrypoint:", "backend: slurm\nentrypoint:")


def spec_file(directory: Path, text: str, name: str = "cluster.yaml") -> Path:
    """``text`` (dedented) written to ``directory/name``."""
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def local_spec(directory: Path, entrypoint: str, *, name: str = "t", tasks: str = "{worker: 2}",
               strategy: str = "multi_worker_mirrored", env: dict[str, str] | None = None,
               watchdog: str | None = None, extra: str = "", filename: str = "cluster.yaml") -> Path:
    """A spec for the local backend on fresh local ports. ``env`` is written as a block (one
    ``  KEY: value`` line each, values as YAML); ``extra`` (dedented) is appended as it is."""
    lines = [f"name: {name}", f"strategy: {strategy}", f"entrypoint: {entrypoint}", f"tasks: {tasks}",
             f"ports: {{base: {free_base()}}}"]
    if env:
        lines += ["env:", *(f"  {key}: {value}" for key, value in env.items())]
    if watchdog:
        lines.append(f"watchdog: {watchdog}")
    return spec_file(directory, "\n".join(lines) + "\n" + textwrap.dedent(extra), filename)


def script_spec(tmp_path: Path, script: str, tasks: str = "{worker: 2}", extra: str = "", *,
                strategy: str = "multi_worker_mirrored", watchdog: str | None = "{stop_grace: 1}") -> Path:
    """A cluster.yaml (run name ``t``) whose every task runs ``script`` (written to task.py)
    with this Python on fresh local ports; ``extra`` is appended YAML."""
    (tmp_path / "task.py").write_text(textwrap.dedent(script))
    return local_spec(tmp_path, f"[{json.dumps(sys.executable)}, task.py]", tasks=tasks, strategy=strategy,
                      watchdog=watchdog, extra=extra)
