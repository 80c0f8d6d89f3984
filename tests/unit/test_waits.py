"""tests/support/waits.py: the rest of a launcher's output after ``wait_line`` is all of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waits import read_rest, wait_line

TESTS = Path(__file__).resolve().parents[1]
# Two lines in one write, so one read of the pipe takes both; a third after wait_line returned.
TWO_AT_ONCE = "import time; print('one\\ntwo', flush=True); time.sleep(0.3); print('three', flush=True)"


def _started() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TWO_AT_ONCE], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_communicate_after_wait_line_loses_the_lines_its_read_ahead_took():
    """Why read_rest exists: this is the loss it prevents (Popen.communicate with a timeout reads
    the descriptor beneath the text pipe, past what wait_line's read-ahead already holds)."""
    proc = _started()
    seen: list[str] = []
    wait_line(proc, "one", seen, 10)
    rest, _ = proc.communicate(timeout=10)
    assert seen == ["one"] and "two" not in rest and "three" in rest


def test_read_rest_after_wait_line_keeps_every_line():
    proc = _started()
    seen: list[str] = []
    wait_line(proc, "one", seen, 10)
    assert read_rest(proc, 10).split() == ["two", "three"] and proc.returncode == 0


def test_read_rest_past_its_timeout_kills_the_group_and_says_so():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        read_rest(proc, 1)
    assert exc.value.output.split() == ["up"] and proc.poll() is not None


def test_no_test_reads_a_launcher_with_communicate_after_wait_line():
    offenders = [p.relative_to(TESTS).as_posix() for p in sorted(TESTS.rglob("*.py"))
                 if p.parent.name != "support" and p.name != Path(__file__).name
                 and "wait_line(" in (text := p.read_text()) and ".communicate(" in text]
    assert offenders == [], f"use tests/support/waits.py read_rest after wait_line in {offenders}"
