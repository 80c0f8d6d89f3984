"""launcher/console.py: which lines reach the terminal in each mode (panel, plain, quiet)."""

from __future__ import annotations

import io
import re

from launcher.console import Console
from launcher.record.view import RunView

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
    assert console.start_panel(RunView())
    console.task_line("worker:0", NOISE)
    console.task_line("worker:0", "hello from my script")
    console.task_line("worker:0", "tfcluster-step epoch=0 step=10 global_step=10 time=1.0")
    console.task_line("worker:0", "tfcluster-epoch epoch=1 loss=0.5 accuracy=0.7")
    console.info("restarting the whole group")
    console.report(["  the report"])
    shown = _plain(term.getvalue())
    # The epoch as a person reads it (shown at the end: no start line said which tasks train)
    assert "epoch 1  loss 0.5000  accuracy 0.700  (worker:0)" in shown
    assert "[worker:0] hello from my script" in shown  # a script's own output, as it is
    assert "tfcluster: restarting the whole group" in shown
    assert shown.rstrip().endswith("the report")
    assert "tfcluster-" not in shown and "absl" not in shown


def test_panel_mode_one_line_per_epoch_for_the_run_and_the_strategy_once(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    term = FakeTerminal()
    console = Console(out=term, err=term)
    assert console.start_panel(RunView())
    start = ("tfcluster-start epoch=0 step=0 global_step=0 time=1795696600.000 strategy=multi_worker_mirrored "
             "strategy_class=tensorflow.python.distribute.collective_all_reduce_strategy.CollectiveAllReduceStrategy "
             "replicas=2 global_batch=64 epochs=30 steps_per_epoch=23")
    epoch = ("tfcluster-epoch epoch=16 global_step=368 loss=0.0851 accuracy=0.9803 examples_per_sec={rate} "
             "learning_rate=0.001 time=1795696618.254")
    for key in ("worker:0", "worker:1"):
        console.task_line(key, start)
    console.task_line("worker:0", epoch.format(rate="4029.9"))
    console.task_line("worker:1", epoch.format(rate="4031.1"))
    console.end_panel()
    shown = _plain(term.getvalue()).splitlines()
    assert [line for line in shown if line.startswith(("epoch ", "strategy "))] == [
        "strategy multi_worker_mirrored (CollectiveAllReduceStrategy, 2 replica(s), global batch 64)",
        "epoch 16/30  loss 0.0851  accuracy 0.980  4,030 ex/s  (worker:0-1)"]
    assert not any("tfcluster-" in line or "1795696618" in line for line in shown), shown


def test_no_panel_on_a_pipe_or_a_dumb_terminal(monkeypatch):
    assert not Console(out=io.StringIO(), err=io.StringIO()).start_panel(RunView())
    monkeypatch.setenv("TERM", "dumb")
    assert not Console(out=FakeTerminal(), err=FakeTerminal()).start_panel(RunView())


def test_plain_mode_prints_every_line_but_noise_and_quiet_prints_none():
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO())
    for line in (NOISE, "tfcluster-step epoch=0 step=10", "hello"):
        console.task_line("worker:1", line)
    assert out.getvalue() == "[worker:1] tfcluster-step epoch=0 step=10\n[worker:1] hello\n"
    console.quiet_tasks = True
    console.task_line("worker:1", "more")
    assert out.getvalue().count("\n") == 2
