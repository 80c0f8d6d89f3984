"""``tfcluster up``, ``down`` and ``tensorboard``: start a run (in the foreground, detached, or as
the detached supervisor itself), stop one, serve its TensorBoard logs."""

from __future__ import annotations

import argparse

from launcher.backends.elsewhere import Elsewhere
from launcher.cli.common import elsewhere, load
from launcher.ui.console import Console


def up(args: argparse.Namespace, console: Console) -> int:
    from launcher.app import detach
    from launcher.app import up as execution

    supervise = args.supervise  # set: this process is the detached supervisor
    loaded, plan = load(args.spec, console, discover=True, warn=not supervise, gpus=True, wait_for_room=True)
    if not (args.dry_run or supervise):
        code = elsewhere(loaded, Elsewhere("up", detach=args.detach, quiet=args.quiet, plain=args.plain,
                                           verbose=args.verbose, force=args.force), console)
        if code is not None:  # the supervisor runs on another host (ssh.supervisor)
            return code
    panel = not (args.quiet or args.plain)
    if args.detach and not args.dry_run and not supervise:
        return detach.start(args.spec, console, quiet=args.quiet, force=args.force)
    if supervise:
        return detach.supervise(loaded, plan, args.spec, supervise, dry_run=args.dry_run, force=args.force,
                                quiet=args.quiet, verbose=args.verbose, panel=panel)
    return execution.up(loaded, plan, console, shown=args.spec, dry_run=args.dry_run, force=args.force,
                        quiet=args.quiet, verbose=args.verbose, panel=panel)


def down(args: argparse.Namespace, console: Console) -> int:
    from launcher.app.down import down as stop

    loaded, plan = load(args.spec, console)
    code = elsewhere(loaded, Elsewhere("down", run_id=args.run, timeout=args.timeout), console)
    if code is not None:
        return code
    return stop(loaded, plan, console, run_id=args.run, timeout=args.timeout)


def tensorboard(args: argparse.Namespace, console: Console) -> int:
    from launcher.app.tensorboard import tensorboard as serve

    loaded, _plan = load(args.spec, console)
    return serve(loaded, console, port=args.port)
