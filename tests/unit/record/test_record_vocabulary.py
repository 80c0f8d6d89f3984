"""The run record's vocabulary is defined once, in launcher/record/: no other module spells a
record file name, writes an event that is not a value of its class in events.py, or
defines a state of its own (read with ``ast``, so docstrings and comments may mention them)."""

import ast
from pathlib import Path

import pytest

from launcher.backends import backend_names
from launcher.record import layout
from launcher.record import events
from launcher.record.events import Event
from tests.support.records import event_key_reads
from launcher.record.states import AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState

LAUNCHER = Path(__file__).resolve().parents[3] / "launcher"
RECORD = LAUNCHER / "record"
FILE_NAMES = set(layout.RECORD_FILES) | {f"{name}.json" for name in backend_names()}
STATES = {m.value for enum in (AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState) for m in enum}
# The writers and where the event goes: RunRecord.write(event), writer.append_event(run_dir, event).
WRITERS = {"write": 0, "append_event": 1}


def _modules():
    for path in sorted(LAUNCHER.rglob("*.py")):
        if RECORD not in path.parents:
            yield path, ast.parse(path.read_text(), str(path))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(LAUNCHER.parent)}:{node.lineno}"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_record_file_names_are_spelled_only_in_the_record_package():
    found = []
    for path, tree in _modules():
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
                if text in FILE_NAMES or any(text.endswith("/" + name) for name in FILE_NAMES):
                    found.append(f"{_where(path, node)}: {text!r} (use launcher.record.layout)")
    assert found == []


def _event_class(node: ast.AST):
    """The events.py class a call ``ev.Start(...)`` / ``Start(...)`` builds, else None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return getattr(events, name, None) if name else None


def test_every_event_written_is_an_event_value():
    """Each call of the record's writers (``RunRecord.write(event)``, ``append_event(run_dir,
    event)``) passes an event class of launcher/record/events.py built in place; no keyword-bag
    writer (``record.event(Event.X, key=...)``) is left. A bare dict, a string or another
    class fails here with file:line."""
    found, written = [], set()
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name == "event" and isinstance(func, ast.Attribute) and node.args and \
                    isinstance(node.args[0], ast.Attribute) and getattr(node.args[0].value, "id", "") == "Event":
                found.append(f"{_where(path, node)}: a keyword-bag event: write record.write(ev.<Kind>(...))")
                continue
            if name not in WRITERS or len(node.args) <= WRITERS[name]:
                continue
            if name == "write" and not (isinstance(func, ast.Attribute) and "record" in ast.unparse(func.value)):
                continue  # (another object's write: a file's, a snapshot's)
            cls = _event_class(node.args[WRITERS[name]])
            if cls is None or not (isinstance(cls, type) and issubclass(cls, events.RecordEvent)) \
                    or cls.KIND not in events.KINDS:
                found.append(f"{_where(path, node)}: {name}({ast.unparse(node.args[WRITERS[name]])[:60]}): "
                             "write an event class of launcher/record/events.py")
                continue
            written.add(cls.KIND)
    assert found == []
    assert {"run_start", "start", "exit", "outcome"} <= written  # (the scan does see the writers)


def test_every_kind_has_one_class_and_every_class_one_kind():
    assert set(events.KINDS) == set(Event.values())
    assert all(cls.KIND == kind for kind, cls in events.KINDS.items())


def test_states_are_defined_only_in_the_record_package():
    """No module-level NAME = "running" (or a tuple of such) outside launcher/record/states.py."""
    found = []
    for path, tree in _modules():
        for node in tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for value in values:
                if isinstance(value, ast.Constant) and value.value in STATES:
                    found.append(f"{_where(path, value)}: {value.value!r} (use launcher.record.states)")
    assert found == []


def test_the_runs_dir_of_a_spec_is_computed_only_by_record_layout():
    """``spec.run_dir`` is read in one place, ``record.layout.runs_dir`` (and ``name_dir``)."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "run_dir":
                owner = node.value
                if (isinstance(owner, ast.Name) and owner.id == "spec") or \
                        (isinstance(owner, ast.Attribute) and owner.attr == "spec"):
                    found.append(f"{_where(path, node)}: spec.run_dir (use launcher.record.layout.runs_dir)")
    assert found == []


@pytest.mark.parametrize("enum", [Event, AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState])
def test_members_are_their_strings(enum):
    """What is printed, compared, hashed and written is the value, as with the strings before."""
    import json

    for member in enum:
        assert str(member) == f"{member}" == member.value and member == member.value
        assert hash(member) == hash(member.value) and {member.value: 1}[member] == 1
        assert json.dumps({"k": member}) == json.dumps({"k": member.value})


# Where a line's "event" key is read, in the whole launcher/ tree: events.py parses a line into its
# class, reader.py hands the lines over; every other module dispatches on the classes
# (``isinstance(e, Start)``, ``e.task``): the task fold, the run fold and goodput's marks too.
EVENT_KEY_READERS = {"record/events.py", "record/reader.py"}


def test_readers_dispatch_on_event_classes_not_on_the_event_key():
    found = [f"{path.relative_to(LAUNCHER)}:{line}" for path in sorted(LAUNCHER.rglob("*.py"))
             if str(path.relative_to(LAUNCHER)) not in EVENT_KEY_READERS
             for line in event_key_reads(ast.parse(path.read_text(), str(path)))]
    assert not found, "read the event's class (record/reader.py parses each line once):\n" + "\n".join(found)
    assert event_key_reads(ast.parse('e.get("event") == "start"\nk = e["event"]')) == [1, 2]
    assert not event_key_reads(ast.parse('out = {"event": "x"}\nout["event"] = "y"\nisinstance(e, Start)'))
