"""docs/architecture.md's "Where a change goes", held to its word.

A new spec key is one field in the model: a dummy key added to a copy of the model reaches the
loader, the JSON Schema, the generated reference and the export without any other edit. A new
event kind that moves a task's state is one entry in record/fold.py: every kind the fold acts on
moves a state there, and every other kind moves none, in the fold and in the live panel's view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest

from launcher.cli import docsgen
from launcher.errors import SpecError
from launcher.export.common import inexpressible
from launcher.record import fold
from launcher.record.events import Event, parse_event
from launcher.record.view import RunModel
from launcher.loader import load
from launcher.spec.model import EXPORTED, LoadedSpec, Spec
from tests.support.specs import BASE

ROOT = Path(__file__).resolve().parents[2]


class WithDummy(Spec):
    dummy: Annotated[int, EXPORTED] = 0
    """A key that exists only in this test."""


@pytest.fixture
def dummy_key(monkeypatch):
    """The loader's own Spec replaced by one with the dummy key, its built models forgotten."""
    home = load.spec_model.__globals__
    assert home["Spec"] is Spec  # the loader builds on the model's Spec: what the doc says
    monkeypatch.setitem(home, "Spec", WithDummy)
    monkeypatch.setitem(home, "_SPEC_MODELS", {})
    yield
    home["_SPEC_MODELS"].clear()


def test_a_new_spec_key_is_one_field_of_the_model(dummy_key, tmp_path):
    spec = load.parse_spec(BASE + "dummy: 3\n")
    assert spec.dummy == 3
    with pytest.raises(SpecError) as bad:
        load.parse_spec(BASE + "dummy: three\n", shown="c.yaml")
    assert str(bad.value).startswith(f"c.yaml:{BASE.count(chr(10)) + 1}: dummy:"), str(bad.value)
    schema = load.json_schema()
    assert schema["properties"]["dummy"]["description"] == "A key that exists only in this test."
    assert "dummy" in docsgen.spec_page(schema) and "exists only in this test" in docsgen.spec_page(schema)
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + "dummy: 3\n")
    assert inexpressible(LoadedSpec(spec, path), "tfjob") == []  # EXPORTED: the export takes it


def test_without_the_dummy_the_loader_refuses_the_key():
    """The control: the same text on the real model is an unknown key (so the test above is the
    field's doing)."""
    with pytest.raises(SpecError, match="dummy"):
        load.parse_spec(BASE + "dummy: 3\n")


def _running() -> list[dict]:
    return [{"event": Event.START, "task": "worker:0", "host": "h1", "attempt": 0},
            {"event": Event.READY, "task": "worker:0"}]


@pytest.mark.parametrize("kind", list(Event))
def test_only_the_folds_kinds_move_a_tasks_state(kind):
    event = {"event": kind.value, "task": "worker:0", "code": 3, "attempt": 0, "reason": "r", "host": "h1"}
    before = fold.fold([parse_event(e) for e in _running()], ["worker:0"])["worker:0"].state
    after = fold.fold([parse_event(e) for e in (*_running(), event)], ["worker:0"])["worker:0"].state
    view = RunModel(name="demo", strategy="multi_worker_mirrored", backend="local")
    for record in (*_running(), event):
        view.event(record)
    assert view.tasks["worker:0"].state == after  # the panel folds it the same way
    if kind in fold.STATE_KINDS:
        assert after != before or kind in (Event.READY, Event.ATTEMPT_READY), (kind, before, after)
    else:
        assert after == before, f"{kind} moved a task's state but is not in fold.STATE_KINDS"


def test_a_use_case_returns_a_result_and_the_cli_alone_maps_it_to_an_exit_code():
    """"A new CLI command": its use case in launcher/app/ returns a result of app/results.py (how it
    ended, in words); launcher/cli/ shows it and calls errors.exit_code_for, and nothing else names
    it (compare's report gets each run's exit code through the mapping the CLI hands it); the
    supervisor returns an Outcome, and the record holds outcomes, not exit codes."""
    import ast

    from launcher.app import detach, down, results, stacks, tensorboard, up

    kinds = {name for name, value in vars(results).items() if isinstance(value, type) and value.__module__ == results.__name__}
    use_cases = [up.run, up.dry_run, up.run_spec, up.supervise, detach.start, detach.launch, detach.supervise, down.down,
                 tensorboard.tensorboard,
                 stacks.stacks]
    returns = {f.__qualname__: f.__annotations__["return"] for f in use_cases}  # (names: postponed annotations)
    assert set(returns.values()) <= kinds, returns
    callers = set()
    for path in sorted((ROOT / "launcher").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Name) and n.id == "exit_code_for" for n in ast.walk(tree)):
            callers.add(str(path.relative_to(ROOT)))
    assert callers == {"launcher/cli/lifecycle.py", "launcher/cli/inspect.py", "launcher/cli/compare.py"}, callers


def test_the_supervisor_returns_an_outcome_and_names_no_exit_code():
    """launcher/supervise/ says how a run ended as record/states.py's Outcome (``Supervisor.run``,
    Membership's decisions), and so do the use cases (launcher/app/) and compare's driver (its
    report's exit codes come from the mapping the CLI hands it); only the CLI turns an outcome into
    an exit code."""
    import ast
    import typing

    from launcher.compare.run import compare
    from launcher.record.states import Outcome
    from launcher.supervise.loop import Supervisor

    found = []
    paths = [p for package in ("supervise", "app", "compare") for p in sorted((ROOT / "launcher" / package).rglob("*.py"))]
    assert len(paths) > 10 and any(p.parent.name == "compare" for p in paths)
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
                node.name if isinstance(node, ast.alias) else ""
            if name.startswith("EXIT_") or name == "exit_code_for":
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: {name}")
    assert not found, found
    assert typing.get_type_hints(Supervisor.run)["return"] is Outcome
    assert typing.get_type_hints(compare)["return"] is Outcome


def test_a_new_notice_is_a_method_of_the_sink_and_of_the_console():
    """"Something a backend tells the user": a method of launcher/notices.py's Notices, which the
    console (what the CLI hands a backend) and PlainNotices (a backend's default) both have."""
    from launcher.notices import Notices, PlainNotices
    from launcher.ui.console import Console

    said = {n for n in vars(Notices) if not n.startswith("_") and callable(getattr(Notices, n))}
    assert said == {"info", "error", "block", "countdown"}, said
    for sink in (Console, PlainNotices):
        assert all(callable(getattr(sink, n, None)) for n in said), sink
