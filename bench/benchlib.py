"""What the local-backend benchmarks share: the repository root on ``sys.path`` (for
``launcher`` and the ``tests`` helpers) and one cluster.yaml writer."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.ports import free_base  # noqa: E402


def write_spec(work: Path, entrypoint: str, tfds_dir: Path, *, name: str = "bench",
               strategy: str = "multi_worker_mirrored", tasks: str = "{worker: 2}", extra: str = "") -> Path:
    """``work/cluster.yaml`` for a local run of ``entrypoint`` on fresh ports, with the offline
    dataset in ``tfds_dir``; ``extra`` is appended YAML (restart, watchdog ...)."""
    spec = work / "cluster.yaml"
    spec.write_text(textwrap.dedent(f"""\
        name: {name}
        strategy: {strategy}
        entrypoint: {entrypoint}
        tasks: {tasks}
        ports: {{base: {free_base(8)}}}
        env: {{PYTHONPATH: {ROOT}, TFDS_DATA_DIR: {tfds_dir}, TF_CPP_MIN_LOG_LEVEL: "2"}}
    """) + textwrap.dedent(extra))
    return spec
