"""Whether a task's Python script or module uses TensorFlow: read as text, nothing of it run.

The standby stub (launcher/remote/pystandby.py) carries this text, to know whether a standby
imports TensorFlow ahead; the local backend imports it, to know whether its host's zygote
(launcher/remote/zygote.py) imports TensorFlow for its tasks.

Stdlib only, no ``from __future__`` and no import of its own package's: the stub carries this text.
"""

import os
import sys


def uses_tensorflow(target, module, search=None, cwd=None):
    """Whether the script (or the module), or a module beside it that it imports (two levels),
    names TensorFlow or Keras: read as text, nothing of it run (a package's own __init__ is not
    imported to find a module). Not found or not readable: True (the stub is there for
    TensorFlow scripts). ``search``: the module search path (default sys.path); ``cwd``: the
    task's working directory (default this process's)."""
    import re

    if module:
        parts = target.split(".")
        where = None
        for entry in (sys.path if search is None else search):
            base = os.path.join(entry or cwd or os.getcwd(), *parts)
            for path in (base + ".py", os.path.join(base, "__main__.py")):
                if os.path.isfile(path):
                    where = path
                    break
            if where:
                break
    else:
        where = target if cwd is None else os.path.join(cwd, target)
    if not where or not os.path.isfile(where):
        return True
    todo, seen = [(os.path.abspath(where), 0)], set()
    while todo:
        path, depth = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, "rb") as fh:
                text = fh.read(2**20)
        except OSError:
            if depth == 0:
                return True
            continue
        if b"tensorflow" in text or b"keras" in text:
            return True
        if depth < 2:
            folder = os.path.dirname(path)
            for name in set(re.findall(rb"^[ \t]*(?:from|import)[ \t]+\.?([A-Za-z_]\w*)", text, re.M)):
                near = module_beside(folder, name.decode())
                if near:
                    todo.append((near, depth + 1))
    return False


def module_beside(folder, name):
    """The file of module ``name`` in ``folder`` (a package's ``__init__.py``, else ``name.py``, as
    Python's own finder looks): the code an ``import name`` runs from a script in that folder; None
    where there is none."""
    for near in (os.path.join(folder, name, "__init__.py"), os.path.join(folder, name + ".py")):
        if os.path.isfile(near):
            return near
    return None
