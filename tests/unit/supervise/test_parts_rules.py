"""The supervisor's parts (launcher/supervise/, docs/architecture.md "The supervisor") take small
explicit inputs: the run's context (context.py) and the few collaborators each uses, never a way
back into the object that owns them. An object of launcher/supervise/'s classes built inside a
class's method is never handed one of that class's own methods (``launch=self._launch``,
``self._on_line``), nor a lambda that calls one (a thread's target is its own: not a part): what
the owner acts on comes back as the part's answer, and work two parts share belongs to a third
object both are given (starts.py's ``Starter``, output.py's ``TaskOutput``)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

from launcher.supervise.context import RunContext
from launcher.supervise.loop import Supervisor

SUPERVISE = Path(__file__).resolve().parents[3] / "launcher" / "supervise"
# Constructor parameters (besides self) a part may take: the context and a few collaborators.
MOST_PARAMETERS = 6
# Counted apart from the parts: the owner itself.
NOT_A_PART = {"Supervisor"}


def owner_callbacks(source: str, parts: set[str]) -> list[tuple[str, str, str]]:
    """(owner class, constructed class, what it was handed) for each call of one of ``parts``
    (class names) inside a class's methods handed one of that class's own methods, or a lambda
    calling one."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        own = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}

        def own_method(node: ast.AST) -> bool:
            return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                    and node.attr in own)

        for call in ast.walk(cls):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else ""  # (threading.Thread: not a part)
            if name not in parts:
                continue
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                handed = [arg] if own_method(arg) else (
                    [n.func for n in ast.walk(arg) if isinstance(n, ast.Call) and own_method(n.func)]
                    if isinstance(arg, ast.Lambda) else [])
                found += [(cls.name, name, f"self.{h.attr}") for h in handed]
    return found


def test_the_scan_finds_a_callback_into_the_owner():
    source = ("class Owner:\n"
              "    def __init__(self):\n"
              "        self.part = Part(launch=self._launch, ready=lambda a: self._ready(a), plain=self.members)\n"
              "    def _launch(self): ...\n"
              "    def _ready(self, a): ...\n")
    assert owner_callbacks(source, {"Part"}) == [("Owner", "Part", "self._launch"), ("Owner", "Part", "self._ready")]


def test_no_part_of_the_supervisor_is_handed_a_method_of_its_owner():
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(SUPERVISE.glob("*.py"))}
    parts = {c.name for source in sources.values() for c in ast.walk(ast.parse(source)) if isinstance(c, ast.ClassDef)}
    assert {"AttemptPhases", "Prewarm", "WarmStandby", "Membership"} <= parts
    found = [f"{path.name}: {owner} hands {handed} to {part}"
             for path, source in sources.items()
             for owner, part, handed in owner_callbacks(source, parts)]
    assert not found, ("a part calls back into its owner; return what the owner should do, or give both a "
                       "collaborator that does it:\n" + "\n".join(found))


def _parts() -> dict[str, type]:
    """The parts ``Supervisor`` builds (the classes of launcher/supervise/ but the context), by name,
    as its constructor's source names them."""
    import launcher.supervise.loop as loop

    tree = ast.parse(textwrap.dedent(inspect.getsource(Supervisor.__init__)))
    names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    classes = {n: getattr(loop, n) for n in names if isinstance(getattr(loop, n, None), type)}
    return {n: c for n, c in classes.items() if c.__module__.startswith("launcher.supervise.") and c is not RunContext}


def test_each_part_takes_the_context_and_a_few_collaborators():
    parts = _parts()
    assert {"AttemptPhases", "Prewarm", "Reporter", "WarmStandby", "Starter", "TaskOutput", "Membership"} <= set(parts)
    over = {name: params for name, cls in parts.items() if name not in NOT_A_PART
            and len(params := [p for p in inspect.signature(cls.__init__).parameters if p != "self"]) > MOST_PARAMETERS}
    assert not over, f"over {MOST_PARAMETERS} constructor parameters (put what every part reads in RunContext): {over}"
    # Every part but the group (a clock alone) reads the shared context.
    for name in ("AttemptPhases", "Prewarm", "Reporter", "WarmStandby", "Starter", "TaskOutput", "Membership"):
        first = next(iter(p for p in inspect.signature(parts[name].__init__).parameters.values() if p.name != "self"))
        assert first.annotation in (RunContext, "RunContext"), f"{name}'s first parameter is not the RunContext"
