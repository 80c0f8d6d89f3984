"""What the commands that read a spec share: loading it (and its plan) the one way, and handing a
command to the machine where its run lives (``BackendKind.run_elsewhere``)."""

from __future__ import annotations

from typing import Iterable, Optional

from launcher.app import stages
from launcher.backends.elsewhere import Elsewhere
from launcher import __version__
from launcher.bounded import escape
from launcher.plan.build import Plan
from launcher.loader.load import LoadedSpec
from launcher.ui.console import Console

# The version of every JSON document the CLI prints (``"format": 1``): raised when a field changes
# meaning or goes away (adding a field does not raise it).
JSON_FORMAT = 1
# What every JSON document the CLI prints starts with: its format and the tfcluster that wrote it.
JSON_HEAD = {"format": JSON_FORMAT, "tfcluster": __version__}


def load(spec: str, console: Console, *, discover: bool = False, warn: bool = False,
         gpus: bool = False) -> tuple[LoadedSpec, Plan]:
    """The spec at ``spec`` and its plan, through ``up``'s first stages (launcher/app/stages.py:
    load, discover, plan). ``discover``: hosts: plus what discovery.command prints now; ``warn``:
    say the spec's warnings (keys it shadows) and refuse what its own script would fail at in every
    task (launcher/loader/scriptcheck.py); ``gpus``: this machine's GPUs in the plan (for
    the commands that show what would start). Placeholder hosts where the backend places tasks
    when it allocates."""
    read = stages.load(spec)
    if warn:
        stages.warnings(read, console)
    found = stages.discover(read) if discover else stages.as_found(read.loaded)
    planned = stages.plan(found, gpus=gpus)
    return planned.loaded, planned.plan


def elsewhere(loaded: LoadedSpec, request: Elsewhere, console: Console) -> Optional[int]:
    """Run ``request`` where the spec's supervisor and run record live, if that is not here
    (ssh.supervisor): its exit code; None: they live here."""
    from launcher.backends import backend_class

    return backend_class(loaded.spec.backend).run_elsewhere(loaded, request, console)


def print_record_lines(lines: Iterable[str]) -> None:
    """Lines that hold a run record's bytes, on stdout: escaped, never raw."""
    print("\n".join(escape(line) for line in lines))
