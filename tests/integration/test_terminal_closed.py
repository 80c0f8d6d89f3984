"""A foreground `tfcluster up` whose terminal goes away (its window closed, the SSH session to a
jump host dropped: SIGHUP, and the terminal gone with it) stops the run as Ctrl-C does: every task
saves (SIGTERM), the record gets its outcome (`stopped`), nothing is left running (and the next
`up` resumes where they saved: the stop is Ctrl-C's, checked with TensorFlow in
test_worker_resize.py). The launcher never dies writing to the dead terminal. Done the way it
happens: `up` in a tmux window that is then killed, or on a pseudo-terminal whose master is closed
with no SIGHUP sent (a shell that does not pass it on). Each task is a stand-in (no TensorFlow)
that saves on SIGTERM as the reference worker does."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import threading

import pytest

from tests.support.cli import ROOT, start_on_terminal, tfcluster
from tests.support.processes import pids_with_env
from tests.support.specs import local_spec
from tests.support.terminal import outcome as outcome_of, up_in_a_terminal_closed_when
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration]

# Each task serves its port, prints a line every 50 ms, and on SIGTERM says it saved and exits
# 143, as the reference worker does.
SAVER = [sys.executable, str(ROOT / "tests" / "support" / "saver_task.py"), "0.05"]


class _Terminal:
    """Reads a pseudo-terminal's master (a terminal that is never read fills up and blocks its
    writer) until ``close``, which closes it: the window goes away."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.seen = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.seen += data

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(5)
            os.close(self.master)


def test_a_terminal_that_goes_away_without_a_sighup_stops_the_run_as_ctrl_c(tmp_path):
    """The launcher is not told (no SIGHUP): its next write to the terminal fails (EIO) or its
    check finds it hung up. Before, that write raised out of the live panel and the launcher died
    with no outcome recorded, its tasks killed by their lifelines without saving."""
    spec = local_spec(tmp_path, json.dumps(SAVER), watchdog="{stop_grace: 20}")
    proc, master = start_on_terminal("up", spec)
    term = _Terminal(master)
    try:
        log = tmp_path / "runs" / "t" / "latest" / "logs" / "worker-1.log"
        wait_for(lambda: log.exists() and "line 20\n" in log.read_text(), 60,
                 what="worker:1's 20th line", detail=lambda: term.seen[-2000:].decode(errors="replace"))
        assert b"worker:1" in term.seen  # the live panel was up on it
        term.close()  # the window closes
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the launcher did not end within 60 s of its terminal going away") from None
    finally:
        term.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 130
    run = (tmp_path / "runs" / "t" / "latest").resolve()
    outcome = outcome_of(run)
    assert outcome is not None and outcome["outcome"] == "interrupted", outcome
    # Found by the failed write or the check, not by a signal.
    assert re.fullmatch(r"the terminal of `tfcluster up` went away \(std(out|err): hung up\); every task was "
                        r"stopped as on Ctrl-C", outcome["reason"]), outcome
    for key in ("worker-0", "worker-1"):  # the graceful path: SIGTERM, and each saved
        assert re.search(r"\nsaved at \d+\n\Z", (run / "logs" / f"{key}.log").read_text()), key
    status = tfcluster("status", spec)
    assert ": stopped, attempt 1," in status.stdout.splitlines()[0], status.stdout
    assert "the terminal of `tfcluster up` went away" in status.stdout
    wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run.name), 15, what="every task of the run to exit")


def test_closing_the_tmux_window_of_up_stops_the_run_as_ctrl_c_and_every_task_saves(tmp_path):
    """`tfcluster up` with its live panel in a tmux window; the window is killed mid-run (the pty
    goes, tmux hangs up the command). Every task is stopped the graceful way (SIGTERM: each says
    it saved, as the reference worker does), the run is `stopped` with its record closed, and no
    process of it is left. (That a worker stopped so saves the step its peers agree on and the next
    `up` resumes there is the same stop as Ctrl-C's, checked with TensorFlow in
    test_worker_resize.py; over ssh with Ctrl-C: test_ssh_state.py, and the terminal closed there,
    with stand-ins: test_ssh_console.py.)"""
    spec = local_spec(tmp_path, json.dumps(SAVER), watchdog="{stop_grace: 20}")
    latest = tmp_path / "runs" / "t" / "latest"
    log = latest / "logs" / "worker-1.log"
    outcome = up_in_a_terminal_closed_when(spec, latest, lambda: log.exists() and "line 20\n" in log.read_text(),
                                           "worker:1's 20th line")
    assert outcome["outcome"] == "interrupted" and "the terminal of `tfcluster up` went away" in outcome["reason"]
    run = latest.resolve()
    for key in ("worker-0", "worker-1"):  # the graceful path: SIGTERM, and each saved
        assert re.search(r"\nsaved at \d+\n\Z", (run / "logs" / f"{key}.log").read_text()), key
    status = tfcluster("status", spec)
    assert status.returncode == 1 and ": stopped, attempt 1," in status.stdout.splitlines()[0], status.stdout
    wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run.name), 15, what="every task of the run to exit")
