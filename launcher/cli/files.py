"""``tfcluster compose`` and ``export``: the spec as a file for another system (launcher/export/)."""

from __future__ import annotations

import argparse

from launcher.app.up import EXIT_OK
from launcher.cli.common import load
from launcher.ui.console import Console


def compose(args: argparse.Namespace, console: Console) -> int:
    from launcher.export.compose import write_compose

    loaded, plan = load(args.spec, console)
    written = write_compose(loaded, args.output, image=args.image)
    if written is not None:
        console.info(f"wrote {written} ({len(plan.tasks)} services); run: docker compose -f {written} up "
                     f"--abort-on-container-exit --exit-code-from {plan.success_task.replace(':', '-')}")
    return EXIT_OK


def export(args: argparse.Namespace, console: Console) -> int:
    from launcher.export.write import export as write

    loaded, _plan = load(args.spec, console)
    result = write(loaded, args.to, args.output, image=args.image, strict=args.strict)
    for note in result.notes:
        console.info(note)
    for path in result.written:
        console.info(f"wrote {path}")
    return EXIT_OK
