"""No backend name in generic code: outside launcher/backends/ nothing decides by a backend's name.

Code that behaves differently for one backend asks what the backend declares instead: its
``Capabilities`` (``fork``, ``gpus_here``, ``warm_standby``...) or its kind's attributes and
answers (``BackendKind.task_dirs``, ``plans_compose``). The scan reads the source with ``ast``
and flags, in launcher/ outside launcher/backends/, a registered backend's name as a string
compared with something (``==``, ``!=``, ``in``, also inside a tuple, list or set), looked up by
it (``backend_class("docker")``), or read as an attribute by it (``getattr(spec, "ssh")``). A
name in words (a message, a spec's default ``backend: local``) is not a decision and passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from launcher.backends import backend_names

LAUNCHER = Path(__file__).resolve().parents[2] / "launcher"
LOOKUPS = {"backend_class", "getattr", "hasattr"}  # calls whose string argument names what to use


def _names_in(node: ast.AST, names: set[str]) -> list[str]:
    """The backend names ``node`` is, or holds as a tuple/list/set literal's element."""
    if isinstance(node, ast.Constant) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
    return []


def backend_name_decisions(rel: str, text: str, names: set[str]) -> list[str]:
    """Each place in module ``rel`` (its source ``text``) that decides by a backend's name."""
    found = []
    for node in ast.walk(ast.parse(text, rel)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [f"{rel}:{node.lineno}: compares with backend name {n!r}" for n in _names_in(side, names)]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in LOOKUPS:
                for arg in node.args:
                    found += [f"{rel}:{node.lineno}: {called}() by backend name {n!r}" for n in _names_in(arg, names)]
    return found


def test_generic_code_decides_nothing_by_a_backends_name():
    names = set(backend_names())
    assert {"local", "ssh", "docker", "slurm"} <= names
    found = [line for path in sorted(LAUNCHER.rglob("*.py")) if "backends" not in path.relative_to(LAUNCHER).parts
             for line in backend_name_decisions(str(path.relative_to(LAUNCHER.parent)), path.read_text(encoding="utf-8"),
                                                names)]
    assert found == [], ("a backend's name decides something outside launcher/backends/ (ask its Capabilities or "
                         "a BackendKind attribute instead):\n" + "\n".join(found))


def test_the_rule_sees_each_way_of_deciding_by_name():
    text = ('if plan.backend != "local":\n    pass\n'
            'if spec.backend in ("local", "slurm"):\n    pass\n'
            'kind = backend_class("docker")\n'
            'opts = getattr(spec, "ssh", None)\n'
            'x = "local" == name\n'
            'say(f"backend {name}", "ssh")\n'  # words, not a decision
            'backend: str = "local"\n')
    got = backend_name_decisions("launcher/_sample.py", text, {"local", "ssh", "docker", "slurm"})
    assert got == ["launcher/_sample.py:1: compares with backend name 'local'",
                   "launcher/_sample.py:3: compares with backend name 'local'",
                   "launcher/_sample.py:3: compares with backend name 'slurm'",
                   "launcher/_sample.py:5: backend_class() by backend name 'docker'",
                   "launcher/_sample.py:6: getattr() by backend name 'ssh'",
                   "launcher/_sample.py:7: compares with backend name 'local'"], got
