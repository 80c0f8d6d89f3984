"""A full disk under run_dir: a tiny tmpfs as run_dir fills while tasks print.
The launcher keeps reading every task's output (a task never blocks on its pipe), says once per
file, in one line, which file is no longer written and on which file system, and its exit code
and its record never contradict each other; Ctrl-C still gives 130."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.tfrun import run_and_act
from tests.support.prereq import require_root
from tests.support.specs import script_spec
import launcher.record.events as ev
from launcher.record.reader import read_events

pytestmark = [pytest.mark.integration]
FLOOD = """\
    import os, sys, time
    for i in range(3000):
        print(f"line {i} " + "x" * 500, flush=True)  # 1.5 MB, the disk holds 256 KiB
    print("flooded", flush=True)
    time.sleep(float(os.environ.get("SLEEP", "0")))
    print("done", flush=True)
"""
LOG_LINE = re.compile(r"^tfcluster: error: cannot write (\S+/logs/worker-(\d)\.log): No space left on device "
                      r"\(file system (\S+): \S+ \S+ free of 256\.0 KiB\); the log of worker:\2 is no longer written; "
                      r"its output still shows here$", re.M)


@pytest.fixture
def small_disk(tmp_path):
    require_root()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True, timeout=30)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def _spec(tmp_path: Path, disk: Path, sleep: float) -> Path:
    return script_spec(tmp_path, FLOOD, extra=f"run_dir: {disk}/runs\nenv: {{SLEEP: '{sleep}'}}\n")


def _events(disk: Path) -> list[ev.RecordEvent]:
    """The run's events; a line the full disk cut short is skipped (the reader's ``strict=False``)."""
    return read_events((disk / "runs" / "t" / "latest").resolve(), strict=False)


def test_full_disk_never_stops_reading_output_and_exit_matches_record(tmp_path, small_disk):
    code, out = run_and_act(_spec(tmp_path, small_disk, 0), [], timeout=90)
    assert code == 0, out[-3000:]
    assert "Traceback" not in out and "Exception in thread" not in out, out[-3000:]
    assert "[worker:0] done" in out and "[worker:1] done" in out  # read to the end
    reported = LOG_LINE.findall(out)
    assert sorted(k for _, k, _ in reported) == ["0", "1"], out[-3000:]  # once per task
    assert all(fs == str(small_disk) for _, _, fs in reported), reported
    # The record holds the outcome (succeeded: the launcher's exit 0), or, when the disk filled
    # before it was written, none, and then the launcher said it could not write events.jsonl.
    outcomes = [e for e in _events(small_disk) if isinstance(e, ev.RunOutcome)]
    assert len(outcomes) <= 1 and all(e["outcome"] == "succeeded" for e in outcomes), outcomes
    if not outcomes:
        assert re.search(r"^tfcluster: error: cannot write \S+/events\.jsonl: No space left on device", out, re.M)


def test_ctrl_c_while_the_disk_is_full_exits_130(tmp_path, small_disk):
    code, out = run_and_act(_spec(tmp_path, small_disk, 600), [
        (r"^\[worker:\d\] flooded", lambda proc: None),
        (r"^\[worker:\d\] flooded", lambda proc: proc.send_signal(signal.SIGINT)),  # both flooded the disk
    ], timeout=90)
    assert code == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert len(LOG_LINE.findall(out)) == 2
