"""What an entrypoint is, read from its argv alone: the module of ``python -m NAME``, and whether it
is tfcluster's own worker (which honours TFCLUSTER_STANDBY itself). Pure."""

from __future__ import annotations

import os
import re
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


# An interpreter by its name (python, python3, python3.11, /venv/bin/python).
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
# Interpreter options the standby stub keeps (given to the stub's interpreter as they are: its
# sys.flags are the cold start's); -W/-X take a value. Any other (-c, -i, -x, -h, a long option)
# leaves the entrypoint without a stub, and plan says which.
_FLAGS = set("bBdEIOPqRsSuv")
_VALUED = set("WX")


def python_entry(argv: Sequence[str]) -> tuple[Optional[tuple[list[str], list[str]]], str]:
    """``python [options] SCRIPT ARGS...`` or ``python [options] -m MODULE ARGS...`` split into
    (interpreter and options, ``[SCRIPT, ARGS...]`` or ``["-m", MODULE, ARGS...]``), or None and
    why it is not one (the words of ``plan``)."""
    if not argv or not _PYTHON.fullmatch(os.path.basename(argv[0])):
        return None, "not a Python interpreter"
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if word == "-" or not word.startswith("-"):
            break
        if word.startswith("--"):
            return None, f"the interpreter option {word} (the stub keeps only short ones)"
        for j, flag in enumerate(word[1:], 1):
            if flag == "m":
                module = word[j + 1:] or (argv[i + 1] if i + 1 < len(argv) else "")
                rest = argv[i + 1:] if word[j + 1:] else argv[i + 2:]
                if not module:
                    return None, "-m without a module"
                return (list(argv[:i]) + ([word[:j]] if j > 1 else []), ["-m", module, *rest]), ""
            if flag in _VALUED:
                if word[j + 1:] == "":
                    i += 1  # its value is the next word
                break
            if flag not in _FLAGS:
                return None, (f"the interpreter option -{flag} (a command string)" if flag == "c" else
                              f"the interpreter option -{flag}")
        i += 1
    if i >= len(argv) or argv[i] == "-":
        return None, "no script (the program comes from stdin)"
    return (list(argv[:i]), list(argv[i:])), ""
