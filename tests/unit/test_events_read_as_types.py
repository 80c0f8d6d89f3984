"""Tests and benchmarks read a run's events as the product does: through the record's one reader
(launcher/record/reader.py, via tests/support/records.py), each line its event class, dispatched on
by type (``isinstance(e, ev.Failure)``), never by the line's ``"event"`` string nor by parsing
events.jsonl themselves. A test that reads the raw lines checks less than it seems: a line the
reader would refuse (a wrong type, a kind misspelt) passes a string compare. The record's own tests
(tests/unit/record/) read raw lines on purpose: they test the format and the reader; a test may
still *write* raw lines (hostile or old records) for the product to read."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.records import event_key_reads

ROOT = Path(__file__).resolve().parents[2]
EXEMPT = ("tests/unit/record/",)


def raw_record_reads(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that read events.jsonl's text themselves: ``read_text``/``read_bytes``/
    ``open`` of an expression that names the file."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        target = func.value if isinstance(func, ast.Attribute) and func.attr in ("read_text", "read_bytes") else \
            (node.args[0] if isinstance(func, ast.Name) and func.id == "open" and node.args
             and not _writes(node) else None)
        if target is not None and any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                      and n.value.endswith("events.jsonl") for n in ast.walk(target)):
            found.append(node.lineno)
    return sorted(found)


def _writes(call: ast.Call) -> bool:
    """``open(path, mode)`` with a mode that writes (a test writing raw lines for the product)."""
    modes = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "mode")]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax") for m in modes)


def sources() -> list[Path]:
    return [p for folder in ("tests", "bench") for p in sorted((ROOT / folder).rglob("*.py"))
            if not str(p.relative_to(ROOT)).startswith(EXEMPT)]


def test_tests_and_benchmarks_read_events_through_the_reader_as_types():
    found = []
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(ROOT)}:{line}: the line's \"event\" key" for line in event_key_reads(tree)]
        found += [f"{path.relative_to(ROOT)}:{line}: events.jsonl read raw" for line in raw_record_reads(tree)]
    assert not found, ("read a run's events with tests/support/records.py's read_records (or the reader's "
                       "read_events) and dispatch on their classes (isinstance(e, ev.Failure)):\n" + "\n".join(found))


def test_the_rule_tells_a_read_from_a_write():
    reads = ast.parse('k = e["event"]\nx = (run / "events.jsonl").read_text()\nopen(d / "events.jsonl")\n'
                      'e.get("event") == "start"\nopen(d / "events.jsonl", "rb")')
    assert event_key_reads(reads) == [1, 4] and raw_record_reads(reads) == [2, 3, 5]
    writes = ast.parse('line = {"event": "start"}\n(run / "events.jsonl").write_text(x)\nisinstance(e, ev.Start)\n'
                       'open(run / "events.jsonl", "ab")\nopen(run / "events.jsonl", mode="w")')
    assert not event_key_reads(writes) and not raw_record_reads(writes)
