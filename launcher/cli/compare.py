"""``tfcluster compare``: check the options, then run the comparison (launcher/compare/)."""

from __future__ import annotations

import argparse
from typing import TextIO

from launcher.errors import SpecError, exit_code_for
from launcher.ui.console import Console


class _Captured(Console):
    """The supervisor's console for one configuration: task lines go to the run record only;
    launcher messages go to a file beside it (and failures also to the comparison's row)."""

    def __init__(self, sink: TextIO) -> None:
        super().__init__(out=sink, err=sink, color=False)
        self.quiet_tasks = True


def compare(args: argparse.Namespace, console: Console) -> int:
    from launcher.compare.configs import Options, parse_strategies
    from launcher.compare.run import compare as run_all

    try:
        strategies = parse_strategies(args.strategies) if args.strategies is not None else ()
    except ValueError as exc:
        raise SpecError(f"{exc} (see 'tfcluster compare --help')") from None
    if args.gpus < 0:
        raise SpecError(f"compare: --gpus must be >= 0, not {args.gpus}")
    if args.gpus and not strategies and len(args.spec) < 2:
        strategies = ("default", "mirrored", "multi_worker_mirrored")
    if not strategies and len(args.spec) < 2:
        raise SpecError("compare: give --strategies (e.g. --strategies default,mirrored) or several spec files "
                        "(see 'tfcluster compare --help')")
    for flag, value, low in (("--repeat", args.repeat, 1), ("--cpus", args.cpus, 0), ("--workers", args.workers, 1),
                             ("--progress-every", args.progress_every, 1)):
        if value < low:
            raise SpecError(f"compare: {flag} must be >= {low}, not {value}")
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        raise SpecError(f"compare: --target-accuracy is a test accuracy in (0, 1], not {args.target_accuracy}")
    options = Options(strategies=strategies, repeat=args.repeat, target_accuracy=args.target_accuracy,
                      cpus=args.cpus, workers=args.workers, progress_every=args.progress_every, gpus=args.gpus)
    # compare says how the comparison ended, and each run's outcome; the exit codes are the CLI's.
    return exit_code_for(run_all(args.spec, options, console, argv=args.argv, exit_code_of=exit_code_for,
                                 captured=_Captured))
