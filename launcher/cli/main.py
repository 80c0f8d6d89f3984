"""``tfcluster`` command line: ``main(argv) -> int`` is the only exit.

argv is parsed by launcher/cli/parser.py (every command and flag); each command is a function of
the module for it (or for its group of commands) in launcher/cli/, listed in ``COMMANDS``: it turns
its args into a typed call of a use case (launcher/app/, export/, compare/), prints what that
returns and chooses the exit code. Nothing in ``launcher/`` imports this package.

Exit codes (``errors.EXIT_*``, defined there once): 0 ok, 1 run failed (or could not start), 2 bad
spec or usage, 3 the run's supervisor is lost (status/attach), 4 no such run or no run record,
130 interrupted. Every ``--json`` output carries ``"format": JSON_FORMAT`` and ``"tfcluster"`` (its version): JSON_HEAD. FILE, where a command takes
one, is the positional argument, else ``-f/--file``, else ``$TFCLUSTER_FILE``, else ``./cluster.yaml``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable, Optional, Sequence

from launcher.cli.parser import build_parser, resolve_file
from launcher.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UserError
from launcher.system.interrupts import leave
from launcher.ui.console import Console

Command = Callable[[argparse.Namespace, Console], int]

# Each command and the function that runs it, "module:function" in launcher/cli/, imported when that
# command runs: `tfcluster --version` or `status` pays for its own imports only, not for `up`'s
# (the supervisor) or `compare`'s. A new command: its flags in parser.py, its examples in
# parser.EXAMPLES, its function here.
COMMANDS: dict[str, str] = {
    "validate": "specfile:validate", "plan": "specfile:plan", "schema": "specfile:schema",
    "up": "lifecycle:up", "down": "lifecycle:down", "tensorboard": "lifecycle:tensorboard",
    "status": "inspect:status", "logs": "inspect:logs", "stacks": "inspect:stacks", "attach": "inspect:attach",
    "runs": "inspect:runs",
    "compose": "files:compose", "export": "files:export", "image": "files:image",
    "compare": "compare:compare",
    "completion": "completion:completion",
}
NO_SPEC = ("schema", "completion", "image")  # commands that read no spec


def command(name: str) -> Command:
    """The function that runs the command ``name`` (a key of COMMANDS), its module imported now."""
    module, _, function = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(f"launcher.cli.{module}"), function)


def main(argv: Optional[Sequence[str]] = None) -> int:
    console = Console()
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:  # bare `tfcluster`: what it can do
            parser.print_help()
            return EXIT_OK
        if args.command not in NO_SPEC:
            resolve_file(args, argv)
        return command(args.command)(args, console)
    except UserError as exc:
        spec = getattr(locals().get("args"), "spec", None)
        if exc.keys and isinstance(spec, str):
            from launcher.loader.load import locate  # (a plan-time error: FILE:LINE of its key)

            exc = locate(exc, spec)
        for line in exc.lines:
            console.error(line)
        return exc.exit_code
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_USAGE
    except KeyboardInterrupt:
        console.error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tfcluster status FILE | head`: the reader has what it wanted
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK


def main_entry() -> None:
    leave(main())


if __name__ == "__main__":  # pragma: no cover
    main_entry()
