"""Plans are made only in launcher/plan/ (docs/architecture.md): a backend finds things out (its
preflight returns a HostReport) and runs the plan it is given, env included, it never builds or
reshapes one. Nothing under launcher/backends/ imports a plan-making function of launcher.plan
(every one, found in its source: ``plan_makers``), constructs a Plan or PlannedTask, or
``replace``s one; the use case asks launcher/plan/preflight.py for the plans a preflight's
findings give. And the Backend hands no result back through attributes: the use case and the
supervisor get the preflight's findings as its return value."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.backends.base import Backend

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"

# What a plan maker returns: a plan, a change of one, or a step of the preflight's (probe this
# plan, start with that one). Every function of launcher/plan/ annotated so is a plan maker
# (``plan_makers`` finds them), besides those named here: they reshape the spec a plan is built
# from, the placement a preflight's findings give, or a task's env (its threads, its GPUs).
MAKES = re.compile(r"\b(Plan|PlanChange|Step|StartWith|ProbeAgain|Seen)\b")
NAMED = {"with_workers", "gpu_replan", "in_blocks", "on_fresh_ports",  # the spec or the placement, reshaped
         "complete", "budget_env", "inside"}  # a task's env: its threads' budget, its GPUs, a container's GPUs


def plan_makers() -> set[str]:
    """The functions of launcher/plan/ that build or reshape a plan, found in its source (a new
    one is named here without anyone listing it), and the NAMED ones."""
    found = set()
    for path in sorted((LAUNCHER / "plan").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.returns is not None \
                    and MAKES.search(ast.unparse(node.returns)):
                found.add(node.name)
    return found | NAMED


PLAN_MAKERS = plan_makers()
# (file, constructor) -> why a backend may construct it there.
ALLOWED = {
    ("backends/ssh/starts.py", "Plan"): "a plan of no task naming one host: the probe's request for a host "
                                        "that reconnects before its first task, not a plan of what runs",
}


def _plan_modules(tree: ast.AST) -> set[str]:
    """The names a module binds to modules of launcher.plan (``from launcher.plan import threads``,
    ``import launcher.plan.gpus as g``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "launcher.plan":
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.asname for a in node.names if a.asname and a.name.startswith("launcher.plan"))
    return names


def _offences(path: Path, root: Path = LAUNCHER) -> list[str]:
    rel = str(path.relative_to(root))
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    modules = _plan_modules(tree)  # the names its modules of launcher.plan are bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("launcher.plan"):
            out += [f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if a.name in PLAN_MAKERS]
        elif isinstance(node, ast.Attribute) and node.attr in PLAN_MAKERS and \
                (ast.unparse(node.value) in modules or ast.unparse(node.value).startswith("launcher.plan")):
            out.append(f"{rel}:{node.lineno}: uses .{node.attr}")
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in ("Plan", "PlannedTask") and (rel, name) not in ALLOWED:
                out.append(f"{rel}:{node.lineno}: constructs a {name}")
            first = node.args[0] if node.args else None
            said = first.id if isinstance(first, ast.Name) else getattr(first, "attr", "")
            if name == "replace" and ("plan" in said.lower() or said in ("task", "t")):
                out.append(f"{rel}:{node.lineno}: replace({said}, ...) reshapes a plan")
    return out


def test_no_backend_builds_or_reshapes_a_plan():
    found = [o for p in sorted((LAUNCHER / "backends").rglob("*.py")) for o in _offences(p)]
    assert found == [], "plans are made in launcher/plan/ (a backend returns what it found):\n" + "\n".join(found)


def test_the_allowed_constructions_are_still_there():
    for (rel, name), why in ALLOWED.items():
        assert f"{name}(" in (LAUNCHER / rel).read_text(), f"{rel} no longer constructs a {name}; drop it from ALLOWED"


def test_the_rule_sees_an_offence(tmp_path):
    """The scan itself can fail: a backend module that builds, reshapes or constructs a plan."""
    sample = tmp_path / "backends" / "_sample_offence.py"
    sample.parent.mkdir()
    sample.write_text("from launcher.plan.build import Plan, build_plan\nfrom dataclasses import replace\n"
                      "def f(spec, placement, plan):\n    replace(plan, tasks=())\n    return Plan(name='x')\n"
                      "from launcher.plan.preflight import step\nfrom launcher.plan import threads\n"
                      "env = threads.complete({}, 4, 'X')\n", encoding="utf-8")
    got = sorted(_offences(sample, tmp_path), key=lambda o: int(o.split(':')[1]))
    assert got == ["backends/_sample_offence.py:1: imports build_plan",
                   "backends/_sample_offence.py:4: replace(plan, ...) reshapes a plan",
                   "backends/_sample_offence.py:5: constructs a Plan",
                   "backends/_sample_offence.py:6: imports step",
                   "backends/_sample_offence.py:8: uses .complete"], got


def test_every_plan_maker_is_named():
    """The makers the rule once missed (the preflight's plans, the start-small and by-GPUs ones, a
    container's env) and the long-known ones are all found."""
    assert {"build_plan", "fitting_now", "start_without", "replace_lost", "grow", "step", "gpu_replan",
            "with_workers", "in_blocks", "on_fresh_ports", "complete", "inside"} <= PLAN_MAKERS, PLAN_MAKERS


def test_the_backend_hands_back_no_result_as_an_attribute():
    for gone in ("preflight_plan", "start_plan", "absent", "short_why"):
        assert not hasattr(Backend, gone), f"Backend.{gone}: the preflight returns its findings instead"
