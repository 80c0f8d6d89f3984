"""``tfcluster`` command line: argv is parsed here and ``main(argv) -> int`` is the only exit.

Exit codes: 0 ok, 1 run failed (or could not start), 2 bad spec or usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading
from typing import Optional, Sequence

from . import __version__
from .console import Console
from .errors import LaunchError, SpecError, UserError
from .plan import Plan, build_plan, redact_env
from .spec import LoadedSpec, load_spec

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    pl.add_argument("spec", metavar="FILE")
    pl.add_argument("--json", action="store_true", help="machine-readable plan")
    pl.add_argument("--show-secrets", action="store_true", help="do not redact KEY/TOKEN/SECRET/PASSWORD values")

    up = sub.add_parser("up", help="start the cluster and supervise it until it succeeds or fails")
    up.add_argument("spec", metavar="FILE")
    up.add_argument("--dry-run", action="store_true", help="plan and preflight only; start nothing")
    up.add_argument("--quiet", action="store_true", help="do not echo task output (log files still get it)")

    down = sub.add_parser("down", help="stop the latest (or given) run of this spec")
    down.add_argument("spec", metavar="FILE")
    down.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the run to stop")

    co = sub.add_parser("compose", help="write the plan as a standalone docker-compose.yml")
    co.add_argument("spec", metavar="FILE")
    co.add_argument("-o", "--output", metavar="PATH",
                    help="where to write (default: docker-compose.yml beside FILE; '-' for stdout)")
    co.add_argument("--image", metavar="IMAGE", help="image for every service (default: docker.image of the spec)")

    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    console = Console()
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
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


def main_entry() -> None:
    sys.exit(main())


def _dispatch(args: argparse.Namespace, console: Console) -> int:
    loaded = load_spec(args.spec)
    plan = build_plan(loaded.spec)
    if args.command == "validate":
        print(f"{args.spec}: ok ({plan.strategy}, {len(plan.tasks)} tasks on {plan.backend})")
        return EXIT_OK
    if args.command == "plan":
        if args.json:
            data = plan.to_json()
            if not args.show_secrets:
                for task in data["tasks"]:
                    task["env"] = redact_env(task["env"])
            print(json.dumps(data, indent=2))
        else:
            print(render_plan(plan, show_secrets=args.show_secrets))
        return EXIT_OK
    if args.command == "up":
        return _up(loaded, plan, args, console)
    if args.command == "down":
        from .down import down

        return down(loaded, plan, console, run_id=args.run, timeout=args.timeout)
    if args.command == "compose":
        from .compose import write_compose

        written = write_compose(loaded, args.output, image=args.image)
        if written is not None:
            console.info(f"wrote {written} ({len(plan.tasks)} services); run: docker compose -f {written} up "
                         f"--abort-on-container-exit --exit-code-from {plan.success_task.replace(':', '-')}")
        return EXIT_OK
    raise SpecError(f"unknown command {args.command}")


def render_plan(plan: Plan, show_secrets: bool = False) -> str:
    rows = [("task", "host", "address:port", "command")]
    for t in plan.tasks:
        rows.append((t.key, t.host, t.endpoint or "(no port: not in cluster)", shlex.join(t.command)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"plan {plan.name}: {plan.strategy} on backend {plan.backend}, {len(plan.tasks)} tasks"]
    for r in rows:
        out.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:3])) + "  " + r[3])
    out.append("TF_CONFIG:")
    for t in plan.tasks:
        out.append(f"  {t.key}: {t.tf_config_json}")
    if plan.tasks:
        common = {k: v for k, v in plan.tasks[0].env if k != "TF_CONFIG" and not k.startswith("TFCLUSTER_TASK")}
        shown = common if show_secrets else redact_env(common)
        out.append("env (every task, plus TF_CONFIG and TFCLUSTER_TASK):")
        for k, v in shown.items():
            out.append(f"  {k}={v}")
    return "\n".join(out)


def _up(loaded: LoadedSpec, plan: Plan, args: argparse.Namespace, console: Console) -> int:
    from .backends import make_backend
    from .rundir import RunRecord
    from .supervisor import Supervisor

    spec = loaded.spec
    record = RunRecord(loaded.base_dir / spec.run_dir, plan, on_problem=console.error)
    backend = make_backend(spec.backend, **_backend_args(loaded, record))
    try:
        backend.preflight(plan)
        if args.dry_run:
            print(render_plan(plan))
            console.info(f"dry run: preflight passed; would start {len(plan.tasks)} tasks on backend {plan.backend}")
            backend.close()
            return EXIT_OK
        try:
            record.create()
        except OSError as exc:
            raise LaunchError(f"run_dir: cannot write the run record in {record.dir} ({exc.strerror}); "
                              "fix run_dir in the spec or the directory's permissions") from None
    except BaseException:
        backend.close()  # connections and clients opened for the preflight
        raise
    console.quiet_tasks = args.quiet
    supervisor = Supervisor(plan, backend, record, console, spec.restart, spec.watchdog)
    previous = {}

    def on_signal(signum: int, _frame) -> None:
        supervisor.interrupt()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
    console.info(
        f"run {record.run_id}: {len(plan.tasks)} tasks ({', '.join(plan.keys)}) on {plan.backend}; "
        f"logs in {record.logs_dir}"
    )
    try:
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        record.close()


def _backend_args(loaded: LoadedSpec, record) -> dict:
    spec = loaded.spec
    if spec.backend == "local":
        return {
            "workdir": (loaded.base_dir / spec.workdir).resolve(),
            "run_dir": record.dir,
            "state_dir": record.state_dir,
            "stop_grace": spec.watchdog.stop_grace,
        }
    return {"loaded": loaded, "record": record}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
