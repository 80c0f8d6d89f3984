"""``tfcluster status``, ``logs``, ``attach``, ``runs`` and ``stacks``: call the use case (launcher/app/inspect.py,
app/attach.py), print what it returns (launcher/ui/runstatus.py), choose the exit code."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from typing import TYPE_CHECKING, Optional

from launcher.bounded import escape, for_terminal
from launcher.backends.elsewhere import Elsewhere
from launcher.cli.common import JSON_HEAD, elsewhere, load, print_record_lines
from launcher.interrupts import watching
from launcher.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_RUN, EXIT_OK, EXIT_SUPERVISOR_LOST
from launcher.ui.console import Console
from launcher.ui.jsontext import json_text

if TYPE_CHECKING:  # pragma: no cover
    from launcher.record.status import RunStatus

# (the record's reader and the tables are imported where used: `tfcluster up` starts without them)


def exit_code(view: "RunStatus") -> int:
    """status/attach: 0 running or succeeded, 1 failed or stopped, 3 supervisor lost."""
    from launcher.record.status import LOST, RUNNING, SUCCEEDED

    if view.state in (RUNNING, SUCCEEDED):
        return EXIT_OK
    if view.state == LOST:
        return EXIT_SUPERVISOR_LOST
    return EXIT_FAILED


def status(args: argparse.Namespace, console: Console) -> int:
    from launcher.app import inspect
    from launcher.ui.runstatus import render_status

    loaded, _plan = load(args.spec, console)
    code = elsewhere(loaded, Elsewhere("status", run_id=args.run, json=args.json), console)
    if code is not None:
        return code
    view = inspect.status(loaded, args.run)
    if args.json:
        print(json_text({**JSON_HEAD, **view.to_json()}))
    else:
        print_record_lines(render_status(view, args.spec))
    return exit_code(view)


def _stdout(text: str) -> None:
    """A log's text (decoded with surrogateescape) on stdout: into a pipe or a file its bytes as the
    task wrote them; on a terminal its colours only, no other escape sequence (bounded.for_terminal:
    a task must not retitle the terminal or write the clipboard through OSC 52)."""
    if _on_terminal():
        sys.stdout.write(for_terminal(text))
        sys.stdout.flush()
        return
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # (a stdout replaced by a text-only stream)
        sys.stdout.write(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    else:
        sys.stdout.flush()
        buffer.write(text.encode("utf-8", "surrogateescape"))
        buffer.flush()
    sys.stdout.flush()


def _on_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def logs(args: argparse.Namespace, console: Console) -> int:
    from launcher.app import inspect

    loaded, _plan = load(args.spec, console)
    request = Elsewhere("logs", run_id=args.run, task=args.task, follow=args.follow, attempt=args.attempt,
                        tail=args.tail)
    # Following, Ctrl-C ends it within a second whatever it is blocked on (launcher/interrupts.py).
    with watching("tfcluster: interrupted", EXIT_INTERRUPTED) if args.follow else contextlib.nullcontext():
        code = elsewhere(loaded, request, console)
        if code is not None:
            return code
        done = inspect.logs(loaded, _stdout, task=args.task, run_id=args.run, attempt=args.attempt,
                            tail=args.tail, follow_run=args.follow)
    return EXIT_INTERRUPTED if done.interrupted else EXIT_OK


def attach(args: argparse.Namespace, console: Console) -> int:
    from launcher.app.attach import attach as attach_run
    from launcher.ui.attachtext import TextRenderer

    loaded, _plan = load(args.spec, console)
    # Ctrl-C detaches within a second whatever attach is blocked on (launcher/interrupts.py).
    with watching("tfcluster: detached (Ctrl-C); the run goes on", EXIT_OK):
        code = elsewhere(loaded, Elsewhere("attach", run_id=args.run), console)
        if code is not None:
            return code
        ended = attach_run(loaded, console, TextRenderer(console, args.spec), run_id=args.run)
    return EXIT_OK if ended.detached else exit_code(ended.final)


def runs_json(views: "list[RunStatus]") -> dict:
    """``runs --json``: ``{"format": 1, "runs": [{"name", "run", "started", "duration", "outcome",
    "attempts", "accuracy", "goodput"}, ...]}`` (started: Unix seconds; duration: seconds; goodput:
    as ``status --json`` has it; null when unknown)."""
    def goodput(v: "RunStatus") -> Optional[dict]:
        g = v.goodput()
        return g.to_json() if g is not None else None

    return {**JSON_HEAD, "runs": [
        {"name": v.name, "run": v.run_id, "started": v.started, "duration": v.elapsed(), "outcome": v.state,
         "attempts": v.attempts or None, "accuracy": v.final_accuracy, "goodput": goodput(v)} for v in views]}


def _names_a_run_dir(spec: Optional[str]) -> bool:
    """``runs DIR`` (or no FILE at all: ./runs) rather than ``runs cluster.yaml``."""
    return spec is None or Path(spec).is_dir() or (not Path(spec).exists()
                                                   and Path(spec).suffix not in (".yaml", ".yml"))


def runs(args: argparse.Namespace, console: Console) -> int:
    """The runs of a spec, or under a run dir (one folder per spec name, or one name's folder).
    No run: exit 4 (EXIT_NO_RUN), after saying so (or an empty list in JSON)."""
    from launcher.app import inspect
    from launcher.ui.runstatus import render_runs

    if _names_a_run_dir(args.spec):
        path = Path(args.spec or "runs")
        lists = inspect.runs_under(path)
        views = [v for found in lists for v in found.runs]
        if args.json:
            print(json_text(runs_json(views)))
        elif not lists:
            print(escape(f"no runs under {path}"))  # (a name from the command line: shown, not run)
        else:
            print_record_lines(line for found in lists for line in render_runs(found.runs, found.where))
        return EXIT_OK if views else EXIT_NO_RUN
    loaded, _plan = load(args.spec, console)
    code = elsewhere(loaded, Elsewhere("runs", json=args.json), console)
    if code is not None:
        return code
    found = inspect.runs(loaded)
    if args.json:
        print(json_text(runs_json(found.runs)))
    else:
        print_record_lines(render_runs(found.runs, found.where))
    return EXIT_OK if found.runs else EXIT_NO_RUN


def stacks(args: argparse.Namespace, console: Console) -> int:
    """``tfcluster stacks``: each live task's stacks (faulthandler's text, from the record: escaped),
    under a ``== TASK ==`` line; a task without, one line saying why."""
    from launcher.app.stacks import stacks as take
    from launcher.errors import exit_code_for

    loaded, _plan = load(args.spec, console)
    # (ssh.supervisor: the supervisor to ask runs on that host, where its tasks' pids mean something)
    code = elsewhere(loaded, Elsewhere("stacks", run_id=args.run, task=args.task, timeout=args.timeout), console)
    if code is not None:
        return code
    result = take(loaded, run_id=args.run, task=args.task, timeout=args.timeout)
    for key in sorted(set(result.stacks) | set(result.notes)):
        if key in result.stacks:
            print_record_lines([f"== {key} ==", *result.stacks[key].rstrip("\n").splitlines(), ""])
        else:
            console.info(f"{key}: {result.notes[key]}")
    return exit_code_for(result.outcome)
