"""The one table renderer (launcher/ui/table.py) and the task columns declared once
(launcher/ui/columns.py) that status, the live panel and the final report draw from."""

from __future__ import annotations

import io
import re

from rich.console import Console as RichConsole

from launcher.ui.panel import render as render_panel
from pathlib import Path

from launcher.record.status import RunStatus, TaskRow
from launcher.record.view import RunModel
from launcher.ui.runstatus import task_table as status_table
from launcher.ui.report import task_table as report_table
from launcher.ui import columns
from launcher.ui.table import render

ESCAPE = re.compile(r"\x1b")


def test_columns_align_by_terminal_cells_and_a_missing_value_is_a_dash():
    lines = render(("task", "host", "n", "last"), [("worker:0", "東京", "7", "a line"), ("ps:0", None, "123", "")],
                   right={2})
    assert lines == ["  task      host    n  last",
                     "  worker:0  東京    7  a line",
                     "  ps:0      -     123"]  # (a wide character is two cells; no trailing blanks)
    assert render(None, [("a:", "x"), ("long:", "y")], gap=" ") == ["  a:    x", "  long: y"]
    assert render(None, []) == []


def _view() -> RunModel:
    view = RunModel()
    view.event({"event": "run_start", "time": 1000.0, "name": "t", "tasks": ["worker:0", "worker:1"]})
    view.event({"event": "start", "time": 1000.0, "task": "worker:0", "attempt": 0, "host": "h0"})
    view.progress("worker:0", "tfcluster-start epoch=0 step=0 global_step=0 epochs=2 steps_per_epoch=10 global_batch=8",
              1001.0)
    view.progress("worker:0", "tfcluster-epoch epoch=1 global_step=10 loss=0.5 accuracy=0.75 time=1002", 1002.0)
    view.event({"event": "exit", "time": 1003.0, "task": "worker:0", "code": 0})
    return view


def test_each_table_takes_its_columns_from_the_one_declaration():
    view = _view()
    rows = [columns.Row.of_view(t) for t in view.tasks.values()]
    assert [c.header for c in columns.for_table(columns.REPORT, rows)] == [
        "task", "host", "state", "exit", "attempts", "steps", "examples/s", "loss", "accuracy"]
    assert [c.header for c in columns.for_table(columns.PANEL, rows)] == [
        "task", "host", "state", "att", "epoch", "in epoch", "step", "loss", "acc", "ex/s", "idle"]
    report = report_table(view)
    assert report[0].split() == ["task", "host", "state", "exit", "attempts", "steps", "examples/s", "loss", "accuracy"]
    assert report[1].split() == ["worker:0", "h0", "succeeded", "0", "1", "10", "-", "0.5000", "0.7500"]
    assert report[2].split() == ["worker:1", "-", "pending", "-", "0", "-", "-", "-", "-"]


def test_a_new_column_is_one_entry_and_every_table_it_names_shows_it(monkeypatch):
    extra = columns.Column("host kind", "kind", (columns.STATUS, columns.PANEL, columns.REPORT),
                           lambda r: "gpu-box" if r.host == "h0" else None)
    monkeypatch.setattr(columns, "COLUMNS", columns.COLUMNS + (extra,))
    view = _view()
    report = report_table(view)
    assert report[0].endswith("kind") and report[1].endswith("gpu-box") and report[2].endswith("-")
    out = io.StringIO()
    RichConsole(file=out, width=200, color_system=None).print(render_panel(view, 1010.0, 200))
    panel = out.getvalue().splitlines()
    assert panel[2].rstrip().endswith("kind") and "gpu-box" in panel[3] and "gpu-box" not in panel[4]
    assert not ESCAPE.search(out.getvalue())
    status = RunStatus("r1", Path("r1"), "t", "local", "running", tasks=[
        TaskRow(key, view.tasks[key], task=view.tasks[key], planned_host="p") for key in view.tasks])
    table = status_table(status)
    assert table[0].split() == ["task", "host", "state", "epoch/step", "loss", "accuracy", "examples/s", "restarts",
                                "last", "line", "kind"]
    assert table[1].split()[:3] == ["worker:0", "h0", "succeeded"] and table[1].endswith("gpu-box")
    assert table[2].split()[:3] == ["worker:1", "p", "pending"] and table[2].endswith("-")


def test_the_plain_tables_never_carry_an_escape_code():
    view = _view()
    assert not any(ESCAPE.search(line) for line in report_table(view))
