"""Where a task's lines go (launcher/supervise/output.py): a line it printed is its output only,
whatever it holds; a control line is read; a fault handling one line is an ``output_fault`` event
against that task, and the reader goes on (docs/concepts/trust.md, rule 9)."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.record import events as ev
from launcher.record.view import RunModel
from launcher.spec.model import Watchdog
from launcher.supervise.group import AttemptGroup
from launcher.supervise.output import FAULTS_RECORDED, TaskOutput
from launcher.ui import eventlines


class Record:
    def __init__(self, fail_on: str = "") -> None:
        self.fail_on = fail_on
        self.logs: list[tuple[str, str]] = []
        self.progress: list[tuple[str, str]] = []
        self.events: list = []

    def log_line(self, key: str, line: str, console: bool = True) -> None:
        if self.fail_on and self.fail_on in line:
            raise OSError(28, "No space left on device")
        self.logs.append((key, line))

    def progress_line(self, key: str, line: str) -> None:
        self.progress.append((key, line))

    def write(self, event) -> None:
        self.events.append(event)


def _output(record: Record, printed: bool = False):
    clock = lambda: 1000.0  # noqa: E731
    group = AttemptGroup(clock)
    group.new_process("worker:0")
    ctx = SimpleNamespace(record=record, view=RunModel(), watchdog=Watchdog(printed_progress=printed))
    return TaskOutput(ctx, group), group


LIES = ["record 42: tfcluster-beat n=0 stacks=9 (from the dataset)", "tfcluster-beat n=5 stacks=100",
        "tfcluster-step epoch=0 step=9 global_step=99999 time=1795000000.000", "tfcluster-standby promoted",
        "tfcluster-saving epoch=0 step=1 global_step=1"]


def test_a_printed_line_is_output_only_and_a_control_line_is_read():
    record = Record()
    out, group = _output(record)
    sink = out.sink()
    for line in LIES:
        sink.line("worker:0", line)
    assert record.logs == [("worker:0", line) for line in LIES]  # (the console shows what the log gets)
    assert record.progress == []
    assert group.counts == {} and group.takes_stacks == set() and group.saving == set()
    view = out.ctx.view.tasks["worker:0"]
    assert view.global_step is None and view.examples_per_sec is None and view.phase != "training"
    sink.control("worker:0", "tfcluster-beat n=0 stacks=12")
    sink.control("worker:0", "tfcluster-step epoch=0 step=3 global_step=3 time=1795000000.000")
    assert group.takes_stacks == {"worker:0"} and view.global_step == 3
    assert record.progress == [("worker:0", "tfcluster-step epoch=0 step=3 global_step=3 time=1795000000.000")]


def test_printed_progress_is_taken_only_where_the_spec_trusts_it_and_never_a_beat_or_the_standby():
    record = Record()
    out, group = _output(record, printed=True)
    for line in LIES:
        out.sink().line("worker:0", line)
    assert len(record.logs) == len(LIES)  # (still the task's output, as printed)
    assert [line for _, line in record.progress] == [LIES[2], LIES[4]]  # the step and the save mark
    assert group.counts == {} and group.takes_stacks == set() and group.saving == {"worker:0"}


def test_a_fault_on_one_line_is_an_event_against_its_task_and_the_reader_goes_on():
    record = Record(fail_on="boom")
    out, group = _output(record)
    sink = out.sink()
    for i in range(FAULTS_RECORDED + 3):
        sink.line("worker:0", f"boom {i}")  # (never raises into the reader)
    sink.line("worker:0", "fine")
    faults = [e for e in record.events if isinstance(e, ev.OutputFault)]
    assert len(faults) == FAULTS_RECORDED and {f.task for f in faults} == {"worker:0"}
    assert "No space left on device" in faults[0].error
    said = [s for f in faults for s in eventlines.said(f, RunModel())]
    assert [f.first for f in faults] == [True] + [False] * (FAULTS_RECORDED - 1) and len(said) == 1  # (said once)
    assert "a line of its output could not be handled" in said[0].lines[0]
    assert record.logs[-1] == ("worker:0", "fine")
