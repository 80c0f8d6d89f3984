"""What the commands that read a spec share: loading it (and its plan) the one way, and handing a
command to the machine where its run lives (``BackendKind.run_elsewhere``)."""

from __future__ import annotations

from typing import Iterable, Optional

from launcher.app.up import plan_for
from launcher.backends.elsewhere import Elsewhere
from launcher import __version__
from launcher.bounded import escape
from launcher.plan.build import Plan
from launcher.loader.load import LoadedSpec, load_spec
from launcher.ui.console import Console

# The version of every JSON document the CLI prints (``"format": 1``): raised when a field changes
# meaning or goes away (adding a field does not raise it).
JSON_FORMAT = 1
# What every JSON document the CLI prints starts with: its format and the tfcluster that wrote it.
JSON_HEAD = {"format": JSON_FORMAT, "tfcluster": __version__}


def load(spec: str, console: Console, *, discover: bool = False, warn: bool = False,
         gpus: bool = False, wait_for_room: bool = False) -> tuple[LoadedSpec, Plan]:
    """The spec at ``spec`` and its plan. ``discover``: hosts: plus what discovery.command prints
    now; ``warn``: say the spec's warnings (keys it shadows) and refuse
    what its own script would fail at in every task (launcher/loader/scriptcheck.py); ``gpus``: this machine's GPUs in the
    plan (for the commands that start a run or show what would start); ``wait_for_room``: ``up``'s
    wait for discovered hosts with room for tasks.worker.min (launcher/app/up.py's plan_with_room).
    Placeholder hosts where the backend places tasks when it allocates."""
    loaded = load_spec(spec)
    if discover:
        from launcher.loader.discovery import with_discovered

        loaded = with_discovered(loaded)
    if warn:
        from launcher.loader.scriptcheck import check_script
        from launcher.loader.shadow import warnings

        for line in warnings(loaded):
            console.info(line)
        check_script(loaded)  # (its own script's refusals: TF_CONFIG written, Keras 3 alone where keras is tf_keras)
    if wait_for_room:  # up: discovered hosts without room for tasks.worker.min yet are waited for
        from launcher.app.up import plan_with_room

        return plan_with_room(loaded, console, gpus=gpus)
    return loaded, plan_for(loaded.spec, gpus=gpus)


def elsewhere(loaded: LoadedSpec, request: Elsewhere, console: Console) -> Optional[int]:
    """Run ``request`` where the spec's supervisor and run record live, if that is not here
    (ssh.supervisor): its exit code; None: they live here."""
    from launcher.backends import backend_class

    return backend_class(loaded.spec.backend).run_elsewhere(loaded, request, console)


def print_record_lines(lines: Iterable[str]) -> None:
    """Lines that hold a run record's bytes, on stdout: escaped, never raw."""
    print("\n".join(escape(line) for line in lines))
