"""Specs for tests: a cluster.yaml whose tasks run a small Python script."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from tests.support.ports import free_base


def script_spec(tmp_path: Path, script: str, tasks: str = "{worker: 2}", extra: str = "", *,
                strategy: str = "multi_worker_mirrored", watchdog: str = "{stop_grace: 1}") -> Path:
    """A cluster.yaml (run name ``t``) whose every task runs ``script`` (written to task.py)
    with this Python on fresh local ports; ``extra`` is appended YAML."""
    (tmp_path / "task.py").write_text(textwrap.dedent(script))
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: t
        strategy: {strategy}
        entrypoint: [{json.dumps(sys.executable)}, task.py]
        tasks: {tasks}
        ports: {{base: {free_base()}}}
        watchdog: {watchdog}
    """) + textwrap.dedent(extra))
    return path
