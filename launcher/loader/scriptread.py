"""A task's Python script read as text (its syntax tree; nothing of it run): what it uses of Keras
3 alone, the Keras backend it sets, where it writes TF_CONFIG itself, the modules beside it that it
imports, and the TensorFlow calls it makes before a given line. Pure: source text in, findings out
(launcher/loader/scriptcheck.py finds the files; launcher/supervise/diagnose.py asks for the first
TensorFlow call before the strategy a task created too late).

Names are followed through the script's imports (``import keras as K``, ``from keras import ops``,
``import tensorflow as tf`` with ``tf.keras``, ``from os import environ``); a name made any other
way (``getattr``, ``importlib``) is not seen.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator, Optional

from launcher.loader.keras3 import PACKAGES, fix_of, only_keras3

MAX_SOURCE = 2**20  # bytes of a script read; a longer one is read no further

# TensorFlow calls that may come before the strategy: they do not start TensorFlow's runtime
# (the context), which a MultiWorkerMirroredStrategy must configure first.
SAFE_BEFORE_STRATEGY = (
    "config.experimental.set_memory_growth", "config.set_visible_devices", "config.experimental.set_visible_devices",
    "config.list_physical_devices", "config.experimental.list_physical_devices", "config.threading.",
    "config.optimizer.", "config.set_soft_device_placement", "config.experimental.set_virtual_device_configuration",
    "config.set_logical_device_configuration", "config.experimental.enable_op_determinism", "get_logger",
    "autograph.", "debugging.set_log_device_placement", "random.set_seed", "keras.utils.set_random_seed",
    "distribute.", "compat.v1.logging.", "TensorSpec", "dtypes.", "version",
)
_STRATEGY_WORDS = ("MultiWorkerMirroredStrategy", "ParameterServerStrategy", "CollectiveAllReduceStrategy")


@dataclass(frozen=True)
class Use:
    """One thing the script does, at ``line``: ``what`` as the script spells it, and the ``fix``."""

    line: int
    what: str
    fix: str = ""


@dataclass
class Facts:
    keras3: list[Use] = field(default_factory=list)  # Keras 3's own API, or a package built on it
    backend: list[Use] = field(default_factory=list)  # KERAS_BACKEND set to another backend than TensorFlow
    tf_config: list[Use] = field(default_factory=list)  # TF_CONFIG written or removed, unguarded
    imports: set[str] = field(default_factory=set)  # top-level module names it imports (to follow beside it)


def dotted(node: ast.AST) -> Optional[str]:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Each name the script binds by an import to the module (or member) it is."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _canonical(name: str, names: dict[str, str]) -> str:
    """``name`` with its first part resolved through the imports; ``tensorflow.keras`` is keras."""
    head, _, rest = name.partition(".")
    full = names.get(head, head) + (f".{rest}" if rest else "")
    if full == "tensorflow.keras" or full.startswith("tensorflow.keras."):
        full = "keras" + full[len("tensorflow.keras"):]
    return full


def _keras_use(full: str) -> Optional[str]:
    """``keras.X`` for a name under keras that only Keras 3 has (its shortest such prefix), else None."""
    if not full.startswith("keras."):
        return None
    parts = full.split(".")[1:]
    for n in range(1, min(len(parts), 2) + 1):
        if only_keras3(".".join(parts[:n])):
            return "keras." + ".".join(parts[:n])
    return None


def _environ_key(node: ast.AST, names: dict[str, str]) -> Optional[str]:
    """The constant key of ``os.environ[KEY]``, else None."""
    if isinstance(node, ast.Subscript) and (d := dotted(node.value)) and _canonical(d, names) == "os.environ":
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    return None


def _call_env(node: ast.Call, names: dict[str, str]) -> list[tuple[str, str, Optional[ast.AST]]]:
    """(method, key, value) for ``os.environ.update/pop/setdefault/get(...)`` and ``os.getenv/putenv``."""
    d = dotted(node.func)
    full = _canonical(d, names) if d else ""
    out: list[tuple[str, str, Optional[ast.AST]]] = []
    first = node.args[0] if node.args else None
    key = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
    value = node.args[1] if len(node.args) > 1 else None
    if full in ("os.environ.pop", "os.environ.setdefault", "os.environ.get", "os.getenv", "os.putenv") and key:
        out.append((full.rsplit(".", 1)[1], key, value))
    elif full == "os.environ.update":
        for k in node.keywords:
            if k.arg:
                out.append(("update", k.arg, k.value))
        if isinstance(first, ast.Dict):
            out += [("update", k.value, v) for k, v in zip(first.keys, first.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return out


def read_source(text: str) -> Facts:
    """What the script at hand does, from its text (a script that does not parse: nothing)."""
    facts = Facts()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return facts
    names = _aliases(tree)
    seen: set[tuple[int, str]] = set()
    reads: list[int] = []
    writes: list[Use] = []
    for node, guarded in _walk(tree):
        line = getattr(node, "lineno", 0)
        for full, spelt in _names_at(node, names):
            use = _keras_use(full)
            if use and (line, use) not in seen:
                seen.add((line, use))
                drop = full.count(".") - use.count(".")  # (the use as the script spells it)
                shown = ".".join(spelt.split(".")[:len(spelt.split(".")) - drop]) if drop else spelt
                facts.keras3.append(Use(line, shown, fix_of(use.split(".", 1)[1])))
        _imports(node, facts)
        if isinstance(node, ast.Call):
            for how, key, value in _call_env(node, names):
                if key == "KERAS_BACKEND" and how in ("update", "setdefault", "putenv"):
                    _backend(facts, line, value)
                if key == "TF_CONFIG":
                    (reads if how in ("get", "getenv") else writes if how in ("update", "pop") and not guarded
                     else []).append(line if how in ("get", "getenv") else Use(line, f"os.environ.{how}(...)"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                key = _environ_key(t, names)
                if key == "KERAS_BACKEND" and not isinstance(node, ast.Delete):
                    _backend(facts, line, node.value)
                elif key == "TF_CONFIG" and not guarded:
                    writes.append(Use(line, 'del os.environ["TF_CONFIG"]' if isinstance(node, ast.Delete)
                                      else 'os.environ["TF_CONFIG"] = ...'))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                _environ_key(node, names) == "TF_CONFIG":
            reads.append(line)
        elif isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == "TF_CONFIG"
                                                   for c in [node.left, *node.comparators]):
            reads.append(line)
    # A write after the script read the TF_CONFIG it was given edits that one: left alone.
    facts.tf_config = sorted((w for w in writes if not any(r <= w.line for r in reads)), key=lambda u: u.line)
    facts.keras3.sort(key=lambda u: (u.line, u.what))
    facts.backend.sort(key=lambda u: u.line)
    return facts


def _backend(facts: Facts, line: int, value: Optional[ast.AST]) -> None:
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.lower() != "tensorflow":
        facts.backend.append(Use(line, f"KERAS_BACKEND={value.value[:40]}"))


def _imports(node: ast.AST, facts: Facts) -> None:
    if isinstance(node, ast.Import):
        for a in node.names:
            top = a.name.split(".")[0]
            facts.imports.add(top)
            if top in PACKAGES:
                facts.keras3.append(Use(node.lineno, f"import {a.name}"))
    elif isinstance(node, ast.ImportFrom) and node.module:
        top = node.module.split(".")[0]
        facts.imports.add(top)
        if top in PACKAGES and not node.level:
            facts.keras3.append(Use(node.lineno, f"from {node.module} import ..."))


def _names_at(node: ast.AST, names: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(canonical, as spelt) for the dotted names this node holds itself: an attribute chain, a
    module an import names, each member a ``from`` import takes."""
    if isinstance(node, ast.Attribute) and (d := dotted(node)):
        yield _canonical(d, names), d
    elif isinstance(node, ast.Import):
        for a in node.names:
            yield _canonical(a.name, {}), a.name
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        base = _canonical(node.module, {})
        for a in node.names:
            yield f"{base}.{a.name}", f"{node.module}.{a.name}"


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """Every node, with whether it sits under an ``if`` whose test names TF_CONFIG."""
    todo: list[tuple[ast.AST, bool]] = [(tree, False)]
    while todo:
        node, guarded = todo.pop()
        yield node, guarded
        here = guarded or (isinstance(node, (ast.If, ast.IfExp, ast.While)) and any(
            isinstance(c, ast.Constant) and c.value == "TF_CONFIG" for c in ast.walk(node.test)))
        todo.extend((child, here) for child in ast.iter_child_nodes(node))


def first_tf_call(text: str, before: int) -> Optional[tuple[int, str]]:
    """The first TensorFlow call that starts its runtime (SAFE_BEFORE_STRATEGY passed over) in the
    same function as line ``before`` (or at the module's top level) and above it: (line, the call
    as spelt), or None."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    names = _aliases(tree)
    home = _enclosing(tree, before)
    found: list[tuple[int, str]] = []
    for call, owner in _calls(tree, None):
        line = call.lineno
        d = dotted(call.func)
        if line >= before or d is None or owner not in (None, home):
            continue
        full = _canonical(d, names)
        if not full.startswith("tensorflow."):
            continue
        rest = full[len("tensorflow."):]
        if any(rest.startswith(p) for p in SAFE_BEFORE_STRATEGY) or any(w in rest for w in _STRATEGY_WORDS):
            continue
        found.append((line, d))
    return min(found) if found else None


def _enclosing(tree: ast.AST, line: int) -> Optional[ast.AST]:
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


def _calls(node: ast.AST, owner: Optional[ast.AST]) -> Iterator[tuple[ast.Call, Optional[ast.AST]]]:
    for child in ast.iter_child_nodes(node):
        inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
        if isinstance(child, (ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(child, ast.Call):
            yield child, owner
        yield from _calls(child, inner)
