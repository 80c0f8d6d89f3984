"""A run record's events as the tests and benchmarks read them: through the record's one reader
(launcher/record/reader.py), each line its event class (launcher/record/events.py), dispatched on
by type (``isinstance(e, ev.Failure)``, ``e.task``), never by the line's ``"event"`` string
(tests/unit/test_events_read_as_types.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable

import launcher.record.events as ev
from launcher.record.reader import read_events


def read_records(run_dir: Path) -> list[ev.RecordEvent]:
    """The events of the run in ``run_dir``; a line that is not an event of its kind fails the
    test (RunRecordDamaged naming it), as a record tfcluster wrote never has one."""
    return read_events(Path(run_dir), strict=True)


def of(events: Iterable[ev.RecordEvent], *kinds: type) -> list:
    """The events of ``kinds`` (event classes), in order."""
    return [e for e in events if isinstance(e, kinds)]


def kinds(events: Iterable[ev.RecordEvent], *only: type) -> list[type]:
    """Each event's class, in order; with ``only``, of those kinds alone."""
    return [type(e) for e in events if not only or isinstance(e, only)]


def event_key_reads(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that read a line's ``"event"`` key: ``x.get("event")``, ``x["event"]``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "event":
            found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "event" \
                and isinstance(node.ctx, ast.Load):
            found.append(node.lineno)
    return sorted(found)
