"""The evaluator sidecar's parts that need no TensorFlow: what it takes as already there when it
starts, and that it looks before importing TensorFlow (a slow import under load would otherwise
let the chief's first checkpoint into the skipped baseline, and it would never be evaluated)."""

from __future__ import annotations

import subprocess
import sys

from worker.evaluator import scan


def test_importing_the_evaluator_loads_no_tensorflow():
    code = ("import sys, worker.evaluator; "
            "sys.exit(1 if {'tensorflow', 'tf_keras', 'keras'} & set(sys.modules) else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_scan_finds_checkpoints_by_their_index_file(tmp_path):
    assert scan(tmp_path / "missing") == {}
    for name in ("ckpt-001.index", "ckpt-001.data-00000-of-00001", "ckpt-12.index", "checkpoint",
                 "ckpt-x.index", "ckpt-3.index.tempstate123"):
        (tmp_path / name).write_text("x")
    found = scan(tmp_path)
    assert sorted(found) == [str(tmp_path / "ckpt-001"), str(tmp_path / "ckpt-12")]
    assert [found[str(tmp_path / "ckpt-001")][0], found[str(tmp_path / "ckpt-12")][0]] == [1, 12]
    assert found[str(tmp_path / "ckpt-12")][1] == (tmp_path / "ckpt-12.index").stat().st_mtime_ns

