"""Plans are made only in launcher/plan/ (docs/architecture.md): a backend finds things out (its
preflight returns a HostReport) and runs the plan it is given, it never builds or reshapes one.
Nothing under launcher/backends/ imports a plan-making function of launcher.plan, constructs a
Plan or PlannedTask, or ``replace``s one; it asks launcher/plan/startsmall.py for the plans its
findings give. And the Backend hands no result back through attributes: the use case and the
supervisor get the preflight's findings as its return value."""

from __future__ import annotations

import ast
from pathlib import Path

from launcher.backends.base import Backend

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"

# The functions of launcher.plan that build or reshape a plan (or the placement a plan is built
# from, for a preflight's findings): called from launcher/plan/ and the use cases, never a backend.
PLAN_MAKERS = {"build_plan", "with_workers", "replace_lost", "grow", "on_fresh_ports", "fitting_now",
               "start_without", "gpu_replan", "in_blocks"}
# (file, constructor) -> why a backend may construct it there.
ALLOWED = {
    ("backends/ssh/starts.py", "Plan"): "a plan of no task naming one host: the probe's request for a host "
                                        "that reconnects before its first task, not a plan of what runs",
}


def _offences(path: Path, root: Path = LAUNCHER) -> list[str]:
    rel = str(path.relative_to(root))
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("launcher.plan"):
            out += [f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if a.name in PLAN_MAKERS]
        elif isinstance(node, ast.Attribute) and node.attr in PLAN_MAKERS:
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
                      "def f(spec, placement, plan):\n    replace(plan, tasks=())\n    return Plan(name='x')\n",
                      encoding="utf-8")
    got = _offences(sample, tmp_path)
    assert got == ["backends/_sample_offence.py:1: imports build_plan",
                   "backends/_sample_offence.py:4: replace(plan, ...) reshapes a plan",
                   "backends/_sample_offence.py:5: constructs a Plan"], got


def test_the_backend_hands_back_no_result_as_an_attribute():
    for gone in ("preflight_plan", "start_plan", "absent", "short_why"):
        assert not hasattr(Backend, gone), f"Backend.{gone}: the preflight returns its findings instead"
