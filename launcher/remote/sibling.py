"""Import a module shipped beside this one (launcher/remote/__init__.py TASK_FILES), stdlib only:
on a host the shipped files sit together in one dir that is not on sys.path (the ssh backend's
run dir, the worker image's /usr/local/lib/tfcluster/), and here they are launcher/remote/. The
wrapper, its helpers and the zygote find each other through ``sibling(name)``."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def sibling(name: str):
    """The module ``name`` (gpuplace, zygoteask...) from this file's dir, imported once."""
    sys.path.insert(0, HERE)
    try:
        return __import__(name)
    finally:
        sys.path.remove(HERE)
