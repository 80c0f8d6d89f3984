"""The run record's vocabulary is defined once, in launcher/record/: no other module spells a
record file name, passes an event kind that is not an ``Event`` to the record's writer, or
defines a state of its own (read with ``ast``, so docstrings and comments may mention them)."""

import ast
from pathlib import Path

import pytest

from launcher.backends import backend_names
from launcher.record import layout
from launcher.record.events import Event
from launcher.record.states import AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState

LAUNCHER = Path(__file__).resolve().parents[3] / "launcher"
RECORD = LAUNCHER / "record"
FILE_NAMES = set(layout.RECORD_FILES) | {f"{name}.json" for name in backend_names()}
STATES = {m.value for enum in (AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState) for m in enum}
# The writers and where the kind goes: RunRecord.event(kind, ...), writer.append_event(run_dir, kind, ...).
WRITERS = {"event": 0, "append_event": 1}


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


def test_every_event_written_is_an_event_kind():
    """Each call of the record's event writers names its kind as ``Event.<MEMBER>`` (or passes on
    a variable); a bare string, or a name that is not a member, fails here with file:line."""
    found, written = [], set()
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name not in WRITERS or len(node.args) <= WRITERS[name]:
                continue
            kind = node.args[WRITERS[name]]
            if isinstance(kind, ast.Constant):
                found.append(f"{_where(path, node)}: {name}({kind.value!r}, ...): write Event.{str(kind.value).upper()}")
            elif isinstance(kind, ast.Attribute) and isinstance(kind.value, ast.Name) and kind.value.id == "Event":
                if kind.attr not in Event.__members__:
                    found.append(f"{_where(path, node)}: Event.{kind.attr} is not a kind in launcher/record/events.py")
                written.add(kind.attr)
    assert found == []
    assert {"RUN_START", "START", "EXIT", "OUTCOME"} <= written  # (the scan does see the writers)


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
