"""What an entrypoint is, read from its argv alone: the module of ``python -m NAME``, and whether it
is tfcluster's own worker (which honours TFCLUSTER_STANDBY itself). Pure."""

from __future__ import annotations

import os
from typing import Optional, Sequence

# Interpreter options that take a value as the next word (``python -X dev -m worker``).
_WITH_VALUE = {"-X", "-W", "-Q"}


def module_of(argv: Sequence[str]) -> Optional[str]:
    """NAME of ``python[3[.x]] [options] -m NAME ...``, or None for any other command."""
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return None
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, None)
        if word.startswith("-m") and len(word) > 2:
            return word[2:]
        if word in _WITH_VALUE:
            next(words, None)
        elif word == "-c" or not word.startswith("-"):  # a command string or a script: no module
            return None
    return None


def is_reference_worker(argv: Sequence[str]) -> bool:
    """``python -m worker`` (or ``worker.main``) or the ``tfcluster-worker`` script: tfcluster's
    own worker, which honours TFCLUSTER_STANDBY."""
    if argv and os.path.basename(argv[0]) == "tfcluster-worker":
        return True
    return module_of(argv) in ("worker", "worker.main")
