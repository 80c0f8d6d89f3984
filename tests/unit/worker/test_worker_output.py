"""worker/output.py: a worker whose reader is gone (its host's shutdown ended the SSH session
that read its lines) goes on to the save its SIGTERM agreed on, and exits with its own code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support.cli import ROOT

PROGRAM = textwrap.dedent("""
    import os, sys
    if sys.argv[1] == "outlive":
        from worker.output import outlive_reader
        outlive_reader()
    for i in range(2000):  # far past any pipe buffer
        print(f"line {i} " + "x" * 100, flush=i % 2 == 0)
        print(f"err {i}", file=sys.stderr)
    open(sys.argv[2], "w").write("saved")  # the save comes after the lines
    os.write(1, b"C++ logging, straight to the descriptor\\n")  # TensorFlow's own writes
    sys.exit(143)
""")


def run_without_reader(tmp_path, mode: str) -> tuple[int, bool]:
    """(exit code, whether it reached its save): stdout and stderr are pipes whose read end is
    closed before it starts writing."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.close(out_r)
    os.close(err_r)
    marker = tmp_path / f"saved-{mode}"
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, mode, str(marker)], cwd=ROOT, stdout=out_w, stderr=err_w,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(out_w)
    os.close(err_w)
    return proc.wait(timeout=60), marker.exists()


def test_a_worker_whose_reader_is_gone_reaches_its_save_and_keeps_its_exit_code(tmp_path):
    code, saved = run_without_reader(tmp_path, "outlive")
    assert (code, saved) == (143, True)


def test_without_it_the_first_line_after_the_reader_left_ends_the_worker(tmp_path):
    """The control: the same program with plain streams dies at its first write (no save)."""
    code, saved = run_without_reader(tmp_path, "plain")
    assert code not in (0, 143) and not saved, code
