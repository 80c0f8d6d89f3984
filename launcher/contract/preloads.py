"""Which of a user's script's own imports its host's fork server may import ahead, beside
TensorFlow: read as text (``ast``), nothing of it run.

A task forked from the zygote (launcher/remote/zygote.py) finds in ``sys.modules`` what the zygote
imported; whatever the script then imports again costs it nothing. TensorFlow's import is most of
it, and the zygote makes it for every script that uses TensorFlow; the libraries of its family
that scripts import next are the rest (tf_keras about 0.3 s a process on a 2-core machine, which
every task of the group pays at once, on its start and its restart).

A library imported ahead must be the one the script's own import would have made. Some read the
environment while they are imported (tensorflow_datasets its ``TFDS_*``, Keras ``KERAS_HOME`` and
``KERAS_BACKEND``), and scripts set such variables just before: so a module is imported ahead
only where it is imported at the script's top level with nothing before it but other imports (none
of a module of its own beside it, whose code then runs), a docstring, and environment settings of literal names that are none of its own (``os.environ[NAME]
= ...``, ``os.environ.setdefault(NAME, ...)``, ``os.putenv(NAME, ...)``). Anything else before it
(a call, a condition, a ``try``, an ``os.environ.update``) ends the look: what comes after it may
depend on what ran.

Stdlib only.
"""

from __future__ import annotations

import ast
import os
from typing import Optional

from launcher.contract.usestf import module_beside

# The libraries imported ahead where a script imports them, and the prefixes of the environment
# variables each reads as it is imported (a script that sets one of them first gets its own import).
PRELOADABLE: dict[str, tuple[str, ...]] = {
    "tf_keras": ("KERAS_",),
    "keras": ("KERAS_",),
    "tensorflow_datasets": ("TFDS_",),
}
MOST_BYTES = 2**20  # a script larger than this is not read


def _env_name(node: ast.stmt) -> tuple[bool, Optional[str]]:
    """(whether ``node`` sets the environment, the literal name it sets or None where not known)."""
    call = node.value if isinstance(node, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        target = ast.unparse(call.func.value)
        if call.func.attr == "setdefault" and target in ("os.environ", "environ") or \
                call.func.attr == "putenv" and target == "os":
            first = call.args[0] if call.args else None
            return True, first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        if target in ("os.environ", "environ"):
            return True, None  # update, pop, clear...
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
        sub = node.targets[0]
        if ast.unparse(sub.value) in ("os.environ", "environ"):
            key = sub.slice
            return True, key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
    return False, None


def script_preloads(path: str) -> tuple[str, ...]:
    """The modules of PRELOADABLE the script at ``path`` imports first thing (see above), in its
    order; () where it cannot be read or parsed."""
    try:
        if os.path.getsize(path) > MOST_BYTES:
            return ()
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return ()
    found: list[str] = []
    names: set[str] = set()  # the environment variables set so far
    folder = os.path.dirname(os.path.abspath(path))  # where a module of its own would be
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.ImportFrom):
                tops = [node.module.split(".")[0]] if node.module and not node.level else []
            else:
                tops = [alias.name.split(".")[0] for alias in node.names]
            if not tops or any(module_beside(folder, top) for top in tops):
                break  # a module of the script's own: its code ran, and may have set anything
            for top in tops:
                prefixes = PRELOADABLE.get(top)
                if prefixes is None or top in found:
                    continue
                if any(name.startswith(prefixes) for name in names):
                    return tuple(found)  # set for it: its own import, and what follows after it
                found.append(top)
            continue
        sets, name = _env_name(node)
        if not sets or name is None:
            break
        names.add(name)
    return tuple(found)
