"""No import circle in launcher/ or worker/.

The graph is built from the source with ``ast``: every ``import``/``from ... import`` counts, at module
level and inside functions (a function-level import is still a dependency, only a late one); imports
under ``if TYPE_CHECKING:`` do not (they never run). An edge goes to the module named, not to the
packages above it; ``from pkg import name`` goes to ``pkg.name`` when that is a module, else to ``pkg``.
The backend registry's ``importlib.import_module`` strings are not imports: that is the lazy registry.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "worker")

# Circles known today that cannot be removed yet, each with the reason. The test fails on any other
# circle, and on a listed one that is gone (then drop it from here).
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False):
    """Every Import/ImportFrom node, skipping the bodies of ``if TYPE_CHECKING:`` unless
    ``type_checking``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree, type_checking):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base_parts = package.split(".")
                    if node.level > 1:
                        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                # ``import a.b.c`` names a.b.c; fall back to the nearest module we know.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def cycle_in(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete circle inside a component, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    parent: dict[str, str] = {}
    queue = [start]
    seen = {start}
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if w not in seen:
                seen.add(w)
                parent[w] = v
                queue.append(w)
    return component


def test_the_graph_sees_module_and_function_imports_but_not_type_checking_ones():
    graph = import_graph()
    assert "launcher.spec.model" in graph["launcher.plan.build"]  # module level, relative
    assert "launcher.backends" in graph["launcher.loader.load"]  # the loader is above the registry
    assert "launcher.backends.ssh.supervisor" in graph["launcher.backends.ssh.backend"]  # inside a method
    assert "launcher.contract.progress" in graph["worker.progress"]  # worker/ imports launcher/ absolutely
    assert "launcher.backends.ssh.pool" not in graph["launcher.backends.ssh.probe"]  # if TYPE_CHECKING: only


def test_a_circle_is_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert cycle_in(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    unexpected = [c for c in found if frozenset(c) not in KNOWN_CIRCLES]
    lines = [" -> ".join(cycle_in(graph, c)) + f"  (all of: {', '.join(c)})" for c in unexpected]
    assert not unexpected, "import circles:\n" + "\n".join(lines)
    gone = [sorted(c) for c in KNOWN_CIRCLES if sorted(c) not in found]
    assert not gone, f"these circles are gone; remove them from KNOWN_CIRCLES: {gone}"


def test_no_import_circle_even_through_type_annotations():
    """Imports under ``if TYPE_CHECKING:`` never run, but a circle through them is still two
    modules that each need the other to be read (farm-studio drew two: blame <-> supervisor,
    and the ssh pool, lease and task)."""
    graph = import_graph(type_checking=True)
    found = circles(graph)
    assert not found, "circles through TYPE_CHECKING imports:\n" + "\n".join(" -> ".join(cycle_in(graph, c))
                                                                             for c in found)


def test_no_private_name_is_used_from_another_module():
    """``from .spec import _Model`` or ``sync_lib._describe``: a name another module uses is public."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module_aliases: set[str] = set()  # local names bound to one of our modules
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        module_aliases.add(alias.asname or alias.name)
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {base} import {alias.name}")
            elif isinstance(node, ast.Import):
                module_aliases.update(a.asname for a in node.names if a.asname and a.name in modules)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used from another module:\n" + "\n".join(found)


def test_spec_models_are_a_leaf_and_only_the_loader_above_the_backends_composes_them():
    graph = import_graph()
    models = {m for m in graph if m == "launcher.spec.model" or m.startswith("launcher.spec.model.")}
    assert len(models) > 1  # a package: one module per topic
    outside = {m: graph[m] - models for m in models if graph[m] - models}
    assert not outside, f"the models import only each other: {outside}"
    below = {m for m in graph if m.startswith("launcher.backends")} | {"launcher.plan.build", "launcher.plan.model",
                                                                         "launcher.record.writer"}
    above = {"launcher.loader.load", "launcher.loader.rules"}
    assert not [m for m in below if graph[m] & above], "the loader and its rules are above the backends"
    assert "launcher.backends" in graph["launcher.loader.load"] and "launcher.export.options" in graph["launcher.loader.load"]
    assert "launcher.backends" in graph["launcher.loader.rules"]  # what each backend can do, through the registry
    # the YAML reader knows no spec key: discovery reads a command's host list with it too
    assert graph["launcher.spec.yamlread"] <= {"launcher.bounded", "launcher.errors"}, graph["launcher.spec.yamlread"]


def _backend_of(module: str, prefixes: dict[str, str]):
    return next((name for name, prefix in prefixes.items() if module == prefix or module.startswith(prefix + ".")), None)


def test_no_module_outside_the_backends_names_a_backend():
    """A backend (its package, or local.py) is imported by the registry's name only, never by another
    module of launcher/ or worker/; and no backend imports another one."""
    from launcher.backends import REGISTRY

    graph = import_graph()
    prefixes = {}
    for name, target in REGISTRY.items():
        module = target.partition(":")[0]
        package = module.rpartition(".")[0]
        prefixes[name] = package if package != "launcher.backends" else module
    assert prefixes["ssh"] == "launcher.backends.ssh" and prefixes["local"] == "launcher.backends.local"
    found = []
    for module, targets in graph.items():
        mine = _backend_of(module, prefixes)
        for target in targets:
            theirs = _backend_of(target, prefixes)
            if theirs is not None and theirs != mine:
                found.append(f"{module} imports {target} (backend {theirs})")
    assert not found, "\n".join(found)


def test_the_ssh_helpers_take_the_host_pool_not_the_backend():
    """Only the registry imports backends/ssh/backend.py: its helpers work on a HostPool (pool.py)."""
    graph = import_graph()
    users = sorted(m for m, targets in graph.items() if "launcher.backends.ssh.backend" in targets)
    assert users == [], users
    ssh = Path(ROOT / "launcher" / "backends" / "ssh")
    assert not [p.name for p in ssh.glob("*.py") if p.name not in ("backend.py", "__init__.py") and "SSHBackend" in p.read_text()]


def test_the_record_package_has_one_writer_one_reader_and_one_run_model():
    """launcher/record/: the reader of the record's files sits low (nothing of the run model),
    the run model (view.py) reads no file, and the package's __init__ is the vocabulary alone
    (policy.py imports record.states; record.status imports policy)."""
    graph = import_graph()
    reader = graph["launcher.record.reader"]
    # launcher.bounded (how outside bytes are shown in a line) is a leaf, as low as it gets.
    assert graph["launcher.bounded"] == set(), graph["launcher.bounded"]
    vocabulary = {"launcher.record.events", "launcher.record.eventbase", "launcher.record.hostevents",
                  "launcher.record.supervisorevents"}
    assert reader <= {"launcher.errors", "launcher.bounded", "launcher.safefile", "launcher.record.layout", *vocabulary}, reader
    # the event classes, their base and their one parser: the words, the error, how a value is shown
    for module in vocabulary:
        assert graph[module] <= {"launcher.errors", "launcher.bounded", "launcher.record._vocabulary", *vocabulary}, module
    assert "launcher.record.events" not in graph["launcher.record.eventbase"] | graph["launcher.record.hostevents"]
    record_io = {"launcher.record.reader", "launcher.record.writer", "launcher.record.feed", "launcher.record.status"}
    assert not graph["launcher.record.view"] & record_io, graph["launcher.record.view"]
    assert graph["launcher.record"] <= {"launcher.record.events", "launcher.record.layout", "launcher.record.states"}
    # the status model is built on the view the feed replays, through the one reader
    assert {"launcher.record.feed", "launcher.record.view", "launcher.record.reader"} <= graph["launcher.record.status"]
    assert "launcher.record.writer" not in graph["launcher.record.status"] | graph["launcher.record.feed"]


# The layers, top to bottom. A module may import its own package and any package below its layer,
# never one above: the arrows of the package graph all point down.
LAYERS: list[tuple[str, ...]] = [
    ("launcher.__main__", "launcher.cli"),  # parses, calls a use case, prints, exits
    ("launcher.compare",),  # a use case made of use cases (one `up` per strategy)
    # What a person reads: views of the record, said by the CLI's console. Nothing below reads
    # it: the use cases report through the sinks the CLI hands them (app/sinks.py), and the
    # supervisor writes events and task lines to the record, which the console listens to.
    ("launcher.ui",),
    ("launcher.app",),  # the use cases
    ("launcher.supervise",),  # the loop over a plan on a backend, and its helpers
    ("launcher.loader",),  # the user's file read into a checked Spec, with every backend's block
    ("launcher.export",),  # files for other systems (compose, TFJob, Vertex); its option blocks
    ("launcher.backends",),  # one package per provider, behind launcher.backends' registry
    ("launcher.record",),  # the run's record: events in, views out
    ("launcher.plan",),  # pure: spec -> plan
    ("launcher.spec",),  # the spec as data: the models, the bounded YAML reader
    ("launcher.contract", "launcher.remote", "worker"),  # what tasks read; code shipped to hosts; the reference worker
    ("launcher", "launcher.errors", "launcher.bounded", "launcher.system", "launcher.safefile",
     "launcher.notices"),  # leaves every layer uses
]
# Reaching up, each with its reason (none is the goal: the test fails on a stale entry).
UPWARD: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, layer in enumerate(LAYERS):
        for package in layer:
            if (module == package or module.startswith(package + ".")) and len(package) > best:
                best, rank = len(package), i
    assert rank is not None, f"{module} is in no layer: add its package to LAYERS"
    return rank


def test_every_module_has_a_layer_and_the_layers_are_known():
    graph = import_graph()
    assert {layer_of(m) for m in graph} == set(range(len(LAYERS)))  # no layer is empty
    assert layer_of("launcher.cli") < layer_of("launcher.ui.console") < layer_of("launcher.app.up") \
        < layer_of("launcher.supervise.loop") \
        < layer_of("launcher.backends.ssh.backend") < layer_of("launcher.record.view") < layer_of("launcher.plan.build") \
        < layer_of("launcher.spec.model") < layer_of("launcher.contract.envnames")


def test_no_import_runs_up_the_layers():
    """cli -> compare -> ui -> app -> supervise -> loader -> export -> backends -> record -> plan -> spec ->
    contract: every import goes down (or stays in its package), but for the few in UPWARD, each with its
    reason. The supervisor and the use cases import nothing of ui: they write the record, which the
    console says."""
    graph = import_graph(type_checking=True)
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) < layer_of(module) and (module, target) not in UPWARD:
                found.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not found, "imports that run up the layers:\n" + "\n".join(found)
    stale = [pair for pair in UPWARD if pair[1] not in graph[pair[0]]]
    assert not stale, f"these upward imports are gone; remove them from UPWARD: {stale}"


def test_the_layer_rule_sees_an_upward_import():
    assert layer_of("launcher.record.status") > layer_of("launcher.supervise.policy")  # what it would catch
    # The supervisor (and every use case) says nothing to a person itself: an import of the
    # console, a report's lines or the panel from there runs up.
    assert layer_of("launcher.ui.console") < layer_of("launcher.app.up") < layer_of("launcher.supervise.outcome")
    assert layer_of("launcher") == len(LAYERS) - 1 and layer_of("launcher.bounded") == len(LAYERS) - 1


def imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an Import/ImportFrom names (absolute ones; TYPE_CHECKING imports included), with its line."""
    found = []
    for node in _imports(tree, type_checking=True):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif not node.level and node.module:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def _terminal_imports(tree: ast.AST) -> list[tuple[int, str]]:
    first: dict[int, str] = {}  # one per import line
    for line, name in imported_names(tree):
        if name.split(".")[0] == "rich" or name == "launcher.ui" or name.startswith("launcher.ui."):
            first.setdefault(line, name)
    return sorted(first.items())


def test_no_backend_imports_the_terminal():
    """A backend says what it has to say through the narrow sink below it (launcher/notices.py), never
    the console, the panel or rich: what a person reads is the CLI's to decide. TYPE_CHECKING
    imports count too (a backend typed against the console is one a console's change breaks)."""
    found = []
    for name, path in _modules().items():
        if name == "launcher.backends" or name.startswith("launcher.backends."):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            found += [f"{path.relative_to(ROOT)}:{line}: imports {what}" for line, what in _terminal_imports(tree)]
    assert not found, "backends that import the terminal (report through launcher.notices.Notices):\n" + "\n".join(found)


def test_the_terminal_rule_sees_every_spelling():
    snippets = ["from launcher.ui.console import Console", "import rich.live", "from rich import print",
                "from launcher import ui", "if TYPE_CHECKING:\n    from launcher.ui.console import Console",
                "def f():\n    from launcher.ui import table"]
    assert all(_terminal_imports(ast.parse(s)) for s in snippets)
    assert not _terminal_imports(ast.parse("from launcher.notices import Notices\nimport richer"))
