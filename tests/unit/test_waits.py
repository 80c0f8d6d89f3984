"""tests/support/waits.py: the rest of a launcher's output after ``wait_line`` is all of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waits import read_rest, wait_line

TESTS = Path(__file__).resolve().parents[1]
# Two lines in one write, so one read of the pipe takes both; a third once the test says so on
# stdin (after wait_line returned), or never.
TWO_AT_ONCE = "import sys; print('one\\ntwo', flush=True); sys.stdin.readline(); print('three', flush=True)"


def _started(code: str = TWO_AT_ONCE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _go_on(proc: subprocess.Popen) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def test_communicate_after_wait_line_loses_the_lines_its_read_ahead_took():
    """Why read_rest exists: this is the loss it prevents (Popen.communicate with a timeout reads
    the descriptor beneath the text pipe, past what wait_line's read-ahead already holds)."""
    proc = _started()
    seen: list[str] = []
    wait_line(proc, "one", seen, 10)
    _go_on(proc)
    rest, _ = proc.communicate(timeout=10)
    assert seen == ["one"] and "two" not in rest and "three" in rest


def test_read_rest_after_wait_line_keeps_every_line():
    proc = _started()
    seen: list[str] = []
    wait_line(proc, "one", seen, 10)
    _go_on(proc)
    proc.stdin.close()
    assert read_rest(proc, 10).split() == ["two", "three"] and proc.returncode == 0


def test_read_rest_past_its_timeout_kills_the_group_and_says_so():
    proc = _started("import sys; print('up', flush=True); sys.stdin.readline()")  # held until killed
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        read_rest(proc, 1)
    proc.stdin.close()
    assert exc.value.output.split() == ["up"] and proc.poll() is not None


def test_no_test_reads_a_launcher_with_communicate_after_wait_line():
    offenders = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py"))
                 if p.parent.name != "support" and p.name != Path(__file__).name
                 and "wait_line(" in (text := p.read_text()) and ".communicate(" in text]
    assert offenders == [], f"use tests/support/waits.py read_rest after wait_line in {offenders}"
