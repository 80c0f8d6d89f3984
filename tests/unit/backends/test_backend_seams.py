"""The backend contract is two narrow seams (launcher/backends/base.py, docs/architecture.md "The
backend's two seams"): ``Hosts`` and ``Tasks``, each with at most 10 public methods, beside the
kind (``BackendKind``: what a backend answers before a run) and the run's ``Backend`` (the pair).
No class of base.py grows past 10 public methods, nor does any backend's implementation of a
seam; and the use cases (launcher/app/) and the supervisor (launcher/supervise/) read no result
off a backend: they call a seam's method, or read what the kind declares."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import launcher.backends
from launcher.backends import backend_classes
from launcher.backends.base import Backend, BackendKind, Capabilities, Hosts, Tasks

LAUNCHER = Path(__file__).resolve().parents[3] / "launcher"
MOST = 10
# What a Backend (the pair) may be asked for besides its two seams: declarations of its kind,
# and the one close. Anything else read off it would be a result handed back as an attribute.
DECLARED = {"capabilities", "name", "detach_note", "close", "kind"}
SEAMS = {"hosts": Hosts, "tasks": Tasks}


def public_methods(cls: type) -> list[str]:
    """The public callables and properties a class offers (its own and inherited, not object's)."""
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in vars(object)
                  and (callable(getattr(cls, n, None)) or isinstance(getattr(cls, n, None), property))
                  and not isinstance(getattr(cls, n, None), type))


def test_every_public_class_of_base_has_at_most_ten_public_methods():
    tree = ast.parse((LAUNCHER / "backends" / "base.py").read_text(encoding="utf-8"))
    counted = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            counted[node.name] = [f.name for f in node.body
                                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_")]
    assert {"BackendKind", "Hosts", "Tasks", "Backend", "TaskHandle"} <= set(counted)
    over = {name: methods for name, methods in counted.items() if len(methods) > MOST}
    assert not over, f"more than {MOST} public methods (split the class): {over}"


def _seam_implementations() -> list[type]:
    for info in pkgutil.walk_packages(launcher.backends.__path__, "launcher.backends."):
        importlib.import_module(info.name)
    found, todo = [], [Hosts, Tasks]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("launcher.backends."):
                found.append(sub)
            todo.append(sub)
    return found


def test_each_backend_implements_each_seam_in_one_narrow_class():
    made = _seam_implementations()
    for kind in backend_classes():
        package = kind.__module__.rpartition(".")[0] if kind.__module__.count(".") > 2 else kind.__module__
        for seam in (Hosts, Tasks):
            own = [c for c in made if issubclass(c, seam) and c.__module__.startswith(package)]
            assert len(own) == 1, f"backend {kind.name}: one {seam.__name__} class, found {own}"
            wide = public_methods(own[0])
            assert len(wide) <= MOST, f"{own[0].__name__}: {len(wide)} public methods {wide}"


def _backend_reads(rel: str, text: str) -> list[str]:
    """Each place in module ``rel`` (its source ``text``) that reads off a backend (a name
    ``backend`` or an attribute ``.backend``) anything but a seam's method, called, or what its
    kind declares."""
    tree = ast.parse(text, rel)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def is_backend(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "backend") or \
            (isinstance(node, ast.Attribute) and node.attr == "backend" and not _is_plan_like(node.value))

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr",
                                                                                               "vars", "hasattr"):
            if node.args and (is_backend(node.args[0]) or _is_seam(node.args[0], is_backend)):
                out.append(f"{rel}:{node.lineno}: {node.func.id}() on a backend")
        if not (isinstance(node, ast.Attribute) and is_backend(node.value)):
            continue
        if node.attr in DECLARED:
            continue
        if node.attr not in SEAMS:
            out.append(f"{rel}:{node.lineno}: backend.{node.attr}")
            continue
        use = parent.get(node)
        method = use.attr if isinstance(use, ast.Attribute) else None
        called = isinstance(parent.get(use), ast.Call) and parent[use].func is use
        if method not in public_methods(SEAMS[node.attr]) or not called:
            out.append(f"{rel}:{node.lineno}: backend.{node.attr}.{method or '?'} (not a call of a seam's method)")
    return out


def _is_plan_like(node: ast.AST) -> bool:
    """``plan.backend``, ``spec.backend``, ``view.backend``: the backend's name in data, not a backend."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name in ("plan", "spec", "view", "loaded", "run", "info") or name.endswith(("plan", "spec"))


def _is_seam(node: ast.AST, is_backend) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in SEAMS and is_backend(node.value)


def test_app_and_supervise_read_no_result_off_a_backend():
    found = [o for package in ("app", "supervise") for p in sorted((LAUNCHER / package).rglob("*.py"))
             for o in _backend_reads(str(p.relative_to(LAUNCHER.parent)), p.read_text(encoding="utf-8"))]
    assert found == [], ("a result crosses as a backend's attribute (return it from a seam's method "
                         "instead):\n" + "\n".join(found))
    calls = sum(p.read_text(encoding="utf-8").count(f"backend.{seam}.") for package in ("app", "supervise")
                for p in (LAUNCHER / package).rglob("*.py") for seam in SEAMS)
    assert calls > 20, f"the scan saw {calls} seam calls: is the backend still called ``backend`` there?"


def test_the_attribute_rule_sees_an_offence():
    """The scan itself can fail: a use case that reads a result off the backend or its seams."""
    text = ("def f(backend, self):\n    backend.absent\n    getattr(backend, 'plan')\n    x = backend.hosts.probe\n"
            "    self.backend.tasks.started\n    backend.hosts.probe(1)\n    plan.backend\n    backend.capabilities.stacks\n")
    got = _backend_reads("launcher/app/_sample_offence.py", text)
    assert got == ["launcher/app/_sample_offence.py:2: backend.absent",
                   "launcher/app/_sample_offence.py:3: getattr() on a backend",
                   "launcher/app/_sample_offence.py:4: backend.hosts.probe (not a call of a seam's method)",
                   "launcher/app/_sample_offence.py:5: backend.tasks.started (not a call of a seam's method)"], got


def test_the_pair_declares_what_its_kind_does():
    class Kind(BackendKind):
        name = "k"
        capabilities = Capabilities(stacks=True)
        detach_note = "stay up"

    class H(Hosts):
        closed = False

        def allocate(self, spec):
            raise AssertionError

        def close(self):
            self.closed = True

    class T(Tasks):
        def start(self, request, on_line):
            raise AssertionError

        def close(self):
            H.closed_after = hosts.closed

    hosts = H()
    pair = Backend(Kind, hosts, T())
    assert (pair.name, pair.capabilities.stacks, pair.detach_note) == ("k", True, "stay up")
    pair.close()
    assert hosts.closed and H.closed_after is False  # the tasks' side first, then the hosts'
