"""worker/main.py ``end``: after a preemption's agreed save (exit 143) the worker's process ends
at once, without the interpreter's teardown (where TensorFlow's data iterator can keep it for
seconds: the function's docstring), its lines flushed; any other exit is the usual one.
A real process; the slow teardown is an exit handler that leaves a mark."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import ROOT

CODE = """
import atexit, sys
atexit.register(lambda: open(sys.argv[1], "w").write("teardown ran"))
from worker.main import end
print("the save's line", end="")  # (buffered: no newline, not flushed)
end(int(sys.argv[2]))
"""


@pytest.mark.parametrize("code,teardown", [(143, False), (0, True), (1, True)])
def test_the_end_after_an_agreed_save_skips_the_teardown_and_loses_no_line(tmp_path, code, teardown):
    mark = tmp_path / "mark"
    p = subprocess.run([sys.executable, "-c", CODE, str(mark), str(code)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert (p.returncode, p.stdout) == (code, "the save's line"), p.stderr
    assert mark.exists() is teardown
