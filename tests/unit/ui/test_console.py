"""launcher/ui/console.py: which lines reach the terminal in each mode (panel, plain, quiet)."""

from __future__ import annotations

import io
import re

from launcher.ui.console import Console
from launcher.record.view import RunModel

NOISE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:  # rich asks for the terminal's size through it
        raise io.UnsupportedOperation


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_panel_mode_prints_lines_above_the_panel_but_not_heartbeats_or_noise(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    term = FakeTerminal()
    console = Console(out=term, err=term)
    assert console.start_panel(RunModel())
    console.task_line("worker:0", NOISE)
    console.task_line("worker:0", "hello from my script")
    console.task_progress("worker:0", "tfcluster-step epoch=0 step=10 global_step=10 time=1.0")
    console.task_progress("worker:0", "tfcluster-epoch epoch=1 loss=0.5 accuracy=0.7")
    console.task_line("worker:0", "tfcluster-epoch epoch=99 loss=0.0 accuracy=1.0")  # printed: the task's text
    console.info("restarting the whole group")
    console.report(["  the report"])
    shown = _plain(term.getvalue())
    # The epoch as a person reads it (shown at the end: no start line said which tasks train)
    assert "epoch 1  loss 0.5000  accuracy 0.700  (worker:0)" in shown
    assert "[worker:0] hello from my script" in shown  # a script's own output, as it is
    assert "[worker:0] tfcluster-epoch epoch=99 loss=0.0 accuracy=1.0" in shown and "epoch 99" not in shown
    assert "tfcluster: restarting the whole group" in shown
    assert shown.rstrip().endswith("the report")
    assert shown.count("tfcluster-") == 1 and "absl" not in shown


def test_panel_mode_one_line_per_epoch_for_the_run_and_the_strategy_once(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    term = FakeTerminal()
    console = Console(out=term, err=term)
    assert console.start_panel(RunModel())
    start = ("tfcluster-start epoch=0 step=0 global_step=0 time=1795696600.000 strategy=multi_worker_mirrored "
             "strategy_class=tensorflow.python.distribute.collective_all_reduce_strategy.CollectiveAllReduceStrategy "
             "replicas=2 global_batch=64 epochs=30 steps_per_epoch=23")
    epoch = ("tfcluster-epoch epoch=16 global_step=368 loss=0.0851 accuracy=0.9803 examples_per_sec={rate} "
             "learning_rate=0.001 time=1795696618.254")
    for key in ("worker:0", "worker:1"):
        console.task_progress(key, start)
    console.task_progress("worker:0", epoch.format(rate="4029.9"))
    console.task_progress("worker:1", epoch.format(rate="4031.1"))
    console.end_panel()
    shown = _plain(term.getvalue()).splitlines()
    assert [line for line in shown if line.startswith(("epoch ", "strategy "))] == [
        "strategy multi_worker_mirrored (CollectiveAllReduceStrategy, 2 replica(s), global batch 64)",
        "epoch 16/30  loss 0.0851  accuracy 0.980  4,030 ex/s  (worker:0-1)"]
    assert not any("tfcluster-" in line or "1795696618" in line for line in shown), shown


def test_no_panel_on_a_pipe_or_a_dumb_terminal(monkeypatch):
    assert not Console(out=io.StringIO(), err=io.StringIO()).start_panel(RunModel())
    monkeypatch.setenv("TERM", "dumb")
    assert not Console(out=FakeTerminal(), err=FakeTerminal()).start_panel(RunModel())


def test_plain_mode_prints_every_line_but_noise_and_quiet_prints_none():
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO())
    for line in (NOISE, "tfcluster-step epoch=0 step=10", "hello"):
        console.task_line("worker:1", line)
    assert out.getvalue() == "[worker:1] tfcluster-step epoch=0 step=10\n[worker:1] hello\n"
    console.quiet_tasks = True
    console.task_line("worker:1", "more")
    console.task_progress("worker:1", "tfcluster-eval checkpoint=ckpt-1 loss=0.5")
    assert out.getvalue().count("\n") == 2


def test_plain_mode_shows_the_records_to_people_never_the_protocol_and_verbose_as_they_came():
    """In a pipe (``tfcluster up | tee run.log``): the tasks' own lines and people's lines of their
    records; the protocol itself only with ``verbose``."""
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO())
    for kind in ("start epoch=0 step=0 global_step=0 epochs=2 strategy=mirrored",
                 "step epoch=0 step=10 global_step=10 time=1.0", "epoch epoch=1 loss=0.5 accuracy=0.7"):
        for key in ("worker:0", "worker:1"):
            console.task_progress(key, "tfcluster-" + kind)
    console.task_progress("worker:1", "(standby) tfcluster-standby ready after=1.0s")
    console.task_progress("evaluator:0", "tfcluster-eval checkpoint=ckpt-1 global_step=10 loss=0.5 accuracy=0.7")
    assert out.getvalue() == ("[tfcluster] strategy mirrored\n"
                              "[tfcluster] epoch 1/2  loss 0.5000  accuracy 0.700  (worker:0-1)\n"
                              "[evaluator:0] evaluated ckpt-1  loss 0.5000  accuracy 0.700\n")
    verbose = io.StringIO()
    console = Console(out=verbose, err=io.StringIO())
    console.verbose = True
    console.task_progress("worker:1", "(standby) tfcluster-standby ready after=1.0s")
    console.task_progress("worker:0", "tfcluster-step epoch=0 step=10 global_step=10 time=1.0")
    assert verbose.getvalue() == ("[worker:1] (standby) tfcluster-standby ready after=1.0s\n"
                                  "[worker:0] tfcluster-step epoch=0 step=10 global_step=10 time=1.0\n")


# ---------------------------------------------------------------- a terminal that goes away


class _Pty:
    """A real pseudo-terminal: the console writes to its slave (stdout and stderr, as in a
    terminal window); closing the master is the window closing (the slave hangs up: EIO)."""

    def __init__(self) -> None:
        import os

        self.master, slave = os.openpty()
        self.out = os.fdopen(slave, "w", buffering=1)
        self.err = os.fdopen(os.dup(slave), "w", buffering=1)

    def read(self) -> str:
        import os
        import select

        data = b""
        while select.select([self.master], [], [], 0.2)[0]:
            data += os.read(self.master, 65536)
        return data.decode(errors="replace")

    def hang_up(self) -> None:
        import os

        os.close(self.master)

    def close(self) -> None:
        for f in (self.out, self.err):
            try:
                f.close()
            except OSError:
                pass


def _target(stream) -> str:
    import os

    return os.readlink(f"/proc/self/fd/{stream.fileno()}")


def test_a_terminal_that_hangs_up_is_lost_once_and_every_write_after_goes_nowhere():
    pty = _Pty()
    try:
        console = Console(out=pty.out, err=pty.err)
        said: list[str] = []
        console.follow(said.append, every=60)  # the writes find it first here
        console.task_line("worker:0", "before")
        assert "[worker:0] before" in _plain(pty.read())
        pty.hang_up()
        for i in range(3):  # EIO underneath: none of it raises
            console.task_line("worker:0", f"after {i}")
            console.info("stopping every task")
            console.report(["  the report"])
        assert said == ["stdout: hung up"]  # once, however many writes failed
        assert console.out.lost and console.err.lost  # one terminal: both streams went with it
        # Their descriptors now point at /dev/null: Python's last flush at exit, a thread's
        # traceback, anything else writing to them succeeds and goes nowhere.
        assert _target(pty.out) == "/dev/null" and _target(pty.err) == "/dev/null"
        pty.out.write("x" * 10000)
        pty.out.flush()
    finally:
        pty.close()


def test_a_hang_up_is_seen_without_writing_and_a_lost_console_stops_the_next_run_at_once():
    import time

    from tests.support.waits import wait_for

    pty = _Pty()
    try:
        console = Console(out=pty.out, err=pty.err)
        said: list[str] = []
        console.follow(said.append, every=0.05)  # `up --quiet`: nothing written for minutes
        time.sleep(0.2)  # (the terminal is there: nothing is said meanwhile)
        assert said == []
        pty.hang_up()
        wait_for(lambda: said, 10, 0.02, what="the watcher to see the terminal hang up")
        assert said[0].endswith(": hung up") and console.out.lost and console.err.lost, said
        console.unfollow()
        again: list[str] = []
        console.follow(again.append)  # a next run on the same console (compare)
        assert again == said[:1]
        console.unfollow()
    finally:
        pty.close()


def test_the_live_panel_on_a_terminal_that_hangs_up_never_raises_nor_prints_a_traceback(monkeypatch):
    """rich's refresh and the panel's flush thread write to the terminal four times a second: a
    write that fails there killed the thread with a traceback, and the panel's stop raised out of
    the final report, so the run ended without its outcome."""
    import threading

    from tests.support.waits import wait_for

    monkeypatch.setenv("TERM", "xterm")
    crashed: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args))
    pty = _Pty()
    try:
        console = Console(out=pty.out, err=pty.err)
        said: list[str] = []
        console.follow(said.append, every=60)
        assert console.start_panel(RunModel())
        console.task_line("worker:0", "tfcluster-epoch epoch=1 loss=0.5 accuracy=0.7")
        pty.read()
        pty.hang_up()
        for i in range(20):
            console.task_line("worker:0", f"line {i}")
        wait_for(lambda: said, 10, 0.05, what="the panel's next write to fail")
        console.info("stopping every task")
        console.report(["  the report"])  # ends the panel: its last writes fail too
        assert said == ["stdout: hung up"] and crashed == []
    finally:
        console.end_panel()
        pty.close()


def test_a_closed_pipe_is_lost_too_and_says_so():
    import os

    r, w = os.pipe()
    os.close(r)
    out = os.fdopen(w, "w")
    try:
        said: list[str] = []
        console = Console(out=out, err=io.StringIO())
        console.follow(said.append)
        console.task_line("worker:0", "x")  # EPIPE (Python ignores SIGPIPE)
        assert said == ["stdout: broken pipe"] and not console.err.lost  # stderr was no terminal of it
        console.unfollow()
    finally:
        out.close()
