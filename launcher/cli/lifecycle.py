"""``tfcluster up``, ``down`` and ``tensorboard``: start a run (in the foreground, detached, or as
the detached supervisor itself), stop one, serve its TensorBoard logs."""

from __future__ import annotations

import argparse
import shlex

from launcher.app.results import DetachResult, RunResult
from launcher.backends.elsewhere import Elsewhere
from launcher.cli.common import elsewhere, load
from launcher.errors import LaunchError, exit_code_for
from launcher.record.states import Outcome
from launcher.ui.console import Console
from launcher.ui.table import render


def up(args: argparse.Namespace, console: Console) -> int:
    """The stages `up` runs (launcher/app/up.py), chosen here: the detached supervisor prepares
    and runs; a dry run prepares and probes; otherwise prepare, then hand the command to the
    machine the run lives on where that is another (ssh.supervisor), then run here (or start
    the detached supervisor, ``--detach``)."""
    from launcher.app import detach
    from launcher.app.up import Show, dry_run, prepare, refuse_if_running, run

    show = Show(quiet=args.quiet, verbose=args.verbose, panel=not (args.quiet or args.plain))
    if args.supervise and not args.dry_run:  # this process is the detached supervisor
        return show_run(detach.supervise(args.spec, args.supervise, _plain_console, show, force=args.force), console)
    planned = prepare(args.spec, console, warn=not args.supervise)
    if args.dry_run:
        return show_run(dry_run(planned, console), console)
    code = elsewhere(planned.loaded, Elsewhere("up", detach=args.detach, quiet=args.quiet, plain=args.plain,
                                               verbose=args.verbose, force=args.force), console)
    if code is not None:  # the supervisor runs on another host (ssh.supervisor)
        return code
    if args.detach:
        return show_detached(detach.start(args.spec, console, quiet=args.quiet, force=args.force), args.spec, console)
    if not args.force:
        refuse_if_running(planned, args.spec)
    return show_run(run(planned, console, show), console)


def _plain_console(out, err) -> Console:
    """The detached supervisor's console: plain lines into the channels of its hand-over."""
    return Console(out=out, err=err, color=False)


def show_run(result: RunResult, console: Console) -> int:
    """A run's end is said by its supervisor (the report); a dry run's plan is shown here."""
    if result.dry_run is not None:
        from launcher.ui.plantext import render_plan

        d = result.dry_run
        print(render_plan(d.plan, spares=d.spares, standby=d.standby, notes=d.notes))
        console.info(d.note)
    return exit_code_for(result.outcome)


def show_detached(result: DetachResult, spec: str, console: Console) -> int:
    """Handed over: the run id and the commands that reach the run, on stdout. Else the
    supervisor's own exit status, passed on."""
    from launcher.app.detach import emit_line

    if result.supervisor_pid:
        lines = [f"run {result.run_id} is running detached (supervisor pid {result.supervisor_pid}); "
                 "it goes on when this terminal closes."]
        if result.note:
            lines.append(result.note)
        emit_line(console.out, "\n".join(lines + commands(spec, result.run_id)))
    if result.relayed_exit is not None:
        return result.relayed_exit
    return exit_code_for(result.outcome)


def commands(spec: str, run_id: str) -> list[str]:
    """The commands that reach a detached run, as printed when it detaches."""
    f, r = shlex.quote(spec), f"--run {run_id}"
    rows = [(f"tfcluster status {f} {r}", "state, attempt, a row per task"),
            (f"tfcluster logs {f} {r} -f", "follow every task's output (add a TASK such as worker:0 for one)"),
            (f"tfcluster attach {f} {r}", "live view; Ctrl-C detaches again"),
            (f"tfcluster down {f} {r}", "stop it (tasks save, as on Ctrl-C)")]
    return render(None, [(c, f"# {what}") for c, what in rows])


def down(args: argparse.Namespace, console: Console) -> int:
    from launcher.app.down import down as stop

    loaded, plan = load(args.spec, console)
    code = elsewhere(loaded, Elsewhere("down", run_id=args.run, timeout=args.timeout), console)
    if code is not None:
        return code
    result = stop(loaded, plan, console, run_id=args.run, timeout=args.timeout)
    console.info(f"run {result.run_id}: " + ("stopped" if result.stopped_any else "nothing was running"))
    if result.refused:
        raise LaunchError(f"run {result.run_id}: {len(result.refused)} thing(s) its record names could not be "
                          "proven the run's own and were left alone (above); stop them by hand if they are")
    return exit_code_for(result.outcome)


def tensorboard(args: argparse.Namespace, console: Console) -> int:
    from launcher.app.tensorboard import tensorboard as serve

    loaded, _plan = load(args.spec, console)
    result = serve(loaded, console, port=args.port)
    if result.outcome == Outcome.INTERRUPTED:
        console.info("tensorboard stopped")
    elif result.outcome == Outcome.FAILED:
        console.error(f"tensorboard exited with code {result.server_exit}; its messages are above")
    return exit_code_for(result.outcome)
