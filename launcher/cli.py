"""``tfcluster`` command line: argv is parsed here and ``main(argv) -> int`` is the only exit.

Exit codes: 0 ok, 1 run failed (or could not start), 2 bad spec or usage, 130 interrupted
(``execution.EXIT_*``). Running a spec is ``execution``'s; nothing in ``launcher/`` imports this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from . import __version__
from .console import Console
from .errors import SpecError, UserError
from .execution import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, plan_for, render_plan, spares_of
from .plan import Plan, write_full_json
from .spec import LoadedSpec, load_spec


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise SpecError(f"{message} (see '{self.prog} --help')")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tfcluster", description="Launch and supervise multi-worker TensorFlow clusters.")
    p.add_argument("--version", action="version", version=f"tfcluster {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    v = sub.add_parser("validate", help="check cluster.yaml; exit 0 if valid, 2 if not")
    v.add_argument("spec", metavar="FILE")

    pl = sub.add_parser("plan", help="print the plan: every task's host, port, TF_CONFIG, command and env")
    pl.add_argument("spec", metavar="FILE", nargs="?")  # required: _plan_args (--json FILE also works)
    pl.add_argument("--json", nargs="?", const="full", metavar="FORM",
                    help="machine-readable plan: --json (full: every task with its whole TF_CONFIG and env) or "
                         "--json=compact (the cluster and the shared env once, each task's own part: for big specs)")
    pl.add_argument("--show-secrets", action="store_true", help="do not redact KEY/TOKEN/SECRET/PASSWORD values")

    up = sub.add_parser("up", help="start the cluster and supervise it until it succeeds or fails")
    up.add_argument("spec", metavar="FILE")
    up.add_argument("--dry-run", action="store_true", help="plan and preflight only; start nothing")
    up.add_argument("--quiet", action="store_true",
                    help="show only launcher messages and the final report (log files still get task output)")
    up.add_argument("--plain", action="store_true",
                    help="prefixed task lines instead of the live panel, also on a terminal")
    up.add_argument("--verbose", action="store_true",
                    help="also show TensorFlow's known harmless start-up lines (log files always have them)")
    up.add_argument("--detach", action="store_true",
                    help="once every task is ready, leave the run to a background supervisor and exit 0")
    up.add_argument("--force", action="store_true", help="start even if a run of this spec is still running")
    up.add_argument("--supervise", metavar="RUN_ID", help=argparse.SUPPRESS)  # the detached supervisor itself

    st = sub.add_parser("status", help="state of the latest (or given) run: attempt, elapsed, a row per task")
    st.add_argument("spec", metavar="FILE")
    st.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    st.add_argument("--json", action="store_true", help="machine-readable status")

    lg = sub.add_parser("logs", help="a task's log, or every task's output interleaved")
    lg.add_argument("spec", metavar="FILE")
    lg.add_argument("task", metavar="TASK", nargs="?", help="e.g. worker:0 (default: every task, prefixed)")
    lg.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    lg.add_argument("--attempt", type=int, metavar="N", help="only attempt N (1 = the first)")
    lg.add_argument("--tail", type=int, metavar="N", help="start with the last N lines")

    at = sub.add_parser("attach", help="watch a (detached) run live; Ctrl-C detaches, the run goes on")
    at.add_argument("spec", metavar="FILE")
    at.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")

    rs = sub.add_parser("runs", help="the runs of a spec (or under a run dir): id, start, duration, outcome")
    rs.add_argument("spec", metavar="FILE", nargs="?", default=None,
                    help="a cluster.yaml, or a run dir such as runs/ or runs/NAME (default: ./runs)")

    down = sub.add_parser("down", help="stop the latest (or given) run of this spec")
    down.add_argument("spec", metavar="FILE")
    down.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the run to stop")

    co = sub.add_parser("compose", help="write the plan as a standalone docker-compose.yml")
    co.add_argument("spec", metavar="FILE")
    co.add_argument("-o", "--output", metavar="PATH",
                    help="where to write (default: docker-compose.yml beside FILE; '-' for stdout)")
    co.add_argument("--image", metavar="IMAGE", help="image for every service (default: docker.image of the spec)")

    ex = sub.add_parser("export", help="write the spec as a Kubeflow TFJob or a Vertex AI CustomJob, validated offline")
    ex.add_argument("spec", metavar="FILE")
    ex.add_argument("--to", required=True, choices=("tfjob", "vertex"), help="the engine that runs the job")
    ex.add_argument("-o", "--output", metavar="PATH",
                    help="where to write (default: NAME.tfjob.yaml / NAME.vertex.yaml beside FILE, vertex also "
                         "writes the CustomJob .json beside the .yaml; '-' for the YAML on stdout)")
    ex.add_argument("--image", metavar="IMAGE", help="image for every replica (default: docker.image of the spec)")

    cmp = sub.add_parser("compare", help="run the same training under several strategies or specs, one after "
                         "another, and write a table, a report and plots")
    cmp.add_argument("spec", metavar="FILE", nargs="+", help="one spec with --strategies, or several specs")
    cmp.add_argument("--strategies", metavar="LIST",
                     help="comma-separated strategies to derive from each FILE, e.g. default,one_device,mirrored")
    cmp.add_argument("--repeat", type=int, default=1, metavar="N", help="runs per configuration (medians, min-max)")
    cmp.add_argument("--target-accuracy", type=float, metavar="A", help="report the time to reach this test accuracy")
    cmp.add_argument("--cpus", type=int, default=2, metavar="N",
                     help="logical CPU devices (replicas) for mirrored/central_storage when the spec sets no "
                          "devices.cpus (default 2; 0 = leave devices alone, e.g. to use GPUs)")
    cmp.add_argument("--workers", type=int, default=2, metavar="N",
                     help="workers for multi_worker_mirrored/parameter_server derived from another strategy")
    cmp.add_argument("--gpus", type=int, default=0, metavar="N",
                     help="compare on N GPUs: mirrored over N, multi_worker_mirrored N workers of one GPU each, "
                          "default on one (the strategies unless --strategies says others)")
    cmp.add_argument("--progress-every", type=int, default=5, metavar="N",
                     help="steps between progress lines: the intervals examples/s is the median of")

    tb = sub.add_parser("tensorboard", help="run TensorBoard on the logs of the latest run of this spec")
    tb.add_argument("spec", metavar="FILE")
    tb.add_argument("--port", type=int, default=6006, help="the port TensorBoard serves on (default: 6006)")

    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    console = Console()
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = _parser().parse_args(argv)
        args.argv = argv
        return _dispatch(args, console)
    except UserError as exc:
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
    sys.exit(main())


def _dispatch(args: argparse.Namespace, console: Console) -> int:
    if args.command == "compare":
        return _compare(args, console)
    if args.command == "runs" and (args.spec is None or Path(args.spec).is_dir()):
        from .runcmds import runs_under

        return runs_under(Path(args.spec or "runs"), console)
    from .backends import backend_class

    if args.command == "plan":
        _plan_args(args)
    loaded = load_spec(args.spec)
    if args.command in ("plan", "validate", "up"):
        from .discovery import with_discovered

        loaded = with_discovered(loaded)  # hosts: plus what discovery.command prints now
    # placeholder hosts if the backend places tasks when it allocates; this machine's GPUs only
    # for the commands that start a run or show what would start (validate checks the spec)
    plan = plan_for(loaded.spec, gpus=args.command in ("plan", "up"))
    run_elsewhere = backend_class(loaded.spec.backend).run_elsewhere
    if args.command in ("up", "status", "logs", "attach", "down", "runs") \
            and not (args.command == "up" and (args.dry_run or args.supervise)):
        code = run_elsewhere(loaded, args.argv, args.spec, args.command, console)
        if code is not None:  # the supervisor and the run record live elsewhere (ssh.supervisor)
            return code
    if args.command == "validate":
        print(f"{args.spec}: ok ({plan.strategy}, {len(plan.tasks)} tasks on {plan.backend})")
        return EXIT_OK
    if args.command == "plan":
        if args.json == "compact":
            print(json.dumps(plan.to_compact_json(secrets=args.show_secrets), indent=2))
        elif args.json:
            write_full_json(plan, sys.stdout, secrets=args.show_secrets)
        else:
            print(render_plan(plan, show_secrets=args.show_secrets, spares=spares_of(loaded.spec)))
        return EXIT_OK
    if args.command == "up":
        return _up(loaded, plan, args, console)
    if args.command == "down":
        from .down import down

        return down(loaded, plan, console, run_id=args.run, timeout=args.timeout)
    if args.command in ("status", "logs", "attach", "runs"):
        from . import runcmds

        return getattr(runcmds, args.command)(loaded, args, console)
    if args.command == "compose":
        from .compose import write_compose

        written = write_compose(loaded, args.output, image=args.image)
        if written is not None:
            console.info(f"wrote {written} ({len(plan.tasks)} services); run: docker compose -f {written} up "
                         f"--abort-on-container-exit --exit-code-from {plan.success_task.replace(':', '-')}")
        return EXIT_OK
    if args.command == "export":
        from .export.write import export

        result = export(loaded, args.to, args.output, image=args.image)
        for note in result.notes:
            console.info(note)
        for path in result.written:
            console.info(f"wrote {path}")
        return EXIT_OK
    if args.command == "tensorboard":
        from .tensorboard import tensorboard

        return tensorboard(loaded, console, port=args.port)
    raise SpecError(f"unknown command {args.command}")


def _plan_args(args: argparse.Namespace) -> None:
    """``plan``'s FILE and --json's optional form: ``plan --json FILE`` gives --json the file,
    which is FILE then."""
    if args.json not in (None, "full", "compact"):
        if args.spec is not None:
            raise SpecError(f"argument --json: invalid choice: {args.json!r} (choose from 'full', 'compact') "
                            "(see 'tfcluster plan --help')")
        args.spec, args.json = args.json, "full"
    if args.spec is None:
        raise SpecError("the following arguments are required: FILE (see 'tfcluster plan --help')")


def _up(loaded: LoadedSpec, plan: Plan, args: argparse.Namespace, console: Console) -> int:
    from . import detach, execution

    options = dict(dry_run=args.dry_run, force=args.force, quiet=args.quiet, verbose=args.verbose,
                   panel=not (args.quiet or args.plain))
    if args.detach and not args.dry_run and not args.supervise:
        return detach.start(args.spec, console, quiet=args.quiet, force=args.force)
    if args.supervise:  # this process is the detached supervisor
        return detach.supervise(loaded, plan, args.spec, args.supervise, **options)
    return execution.up(loaded, plan, console, shown=args.spec, **options)


def _compare(args: argparse.Namespace, console: Console) -> int:
    from .compare.configs import Options, parse_strategies
    from .compare.run import compare

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
    return compare(args.spec, options, console, argv=args.argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
