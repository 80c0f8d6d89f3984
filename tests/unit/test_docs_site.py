"""The docs site builds with `mkdocs build --strict`: every page in the nav, every link and
anchor between pages resolves (a warning fails it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from tests.support.cli import ROOT
from tests.support.prereq import require


def test_mkdocs_build_strict(tmp_path):
    have = all(importlib.util.find_spec(m) is not None for m in ("mkdocs", "material"))
    require(have, "mkdocs and mkdocs-material are not installed (pip install -e '.[docs]')")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert (tmp_path / "site" / "reference" / "spec" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cluster.schema.json").is_file()
