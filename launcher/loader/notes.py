"""What ``validate``, ``plan`` and ``up`` warn about in a spec that is valid: an entrypoint a file
of the task's directory would shadow (shadow.py), and arguments of the entrypoint that hold a
secret, which every local user can read while the task runs (``ps`` shows a process's command
line to all; ``/proc/PID/environ`` only to its own user and root). Pure: the spec in, lines out."""

from __future__ import annotations

import re

from launcher.loader import shadow
from launcher.remote.masking import masked_args
from launcher.spec.model import LoadedSpec

# The most arguments a warning names (then how many more).
NAMED = 3


def secret_args(loaded: LoadedSpec) -> list[str]:
    """One line if the entrypoint's arguments hold a secret (``masking.mask_argv``'s rule, the
    same as env's), naming them masked, with the fix."""
    found = masked_args(loaded.spec.argv)
    if not found:
        return []
    named = ", ".join(found[:NAMED]) + (f" and {len(found) - NAMED} more" if len(found) > NAMED else "")
    return [f"warning: entrypoint: an argument holds a secret ({named}): every local user can read a task's "
            f"arguments in `ps` while it runs (tfcluster itself shows ***); fix: pass it in env (env: "
            f"{{{_name_for(found[0])}: ...}}, which the script reads) or in a file only you can read"]


def _name_for(found: str) -> str:
    """A variable name for the secret ``found`` names (``--hub-token ***`` -> HUB_TOKEN)."""
    word = found.split()[0].split("=")[0].lstrip("-")
    name = re.sub(r"[^A-Za-z0-9]+", "_", word).strip("_").upper()
    return name if found.startswith("-") or "=" in found.split()[0] and name else "SECRET"


def warnings(loaded: LoadedSpec) -> list[str]:
    """Every warning line for the spec, in one list (``validate``, ``validate --json``, ``plan``, ``up``)."""
    return shadow.warnings(loaded) + secret_args(loaded)
