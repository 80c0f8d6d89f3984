"""What the use cases return (launcher/app/results.py) and how the CLI turns it into output and an
exit code (launcher/cli/lifecycle.py): the same lines and codes the commands had when the use
cases printed and returned codes themselves."""

from __future__ import annotations

import io
from pathlib import Path

from launcher.app.results import DetachResult, DryRun, RunResult
from launcher.app.up import run_result
from launcher.cli.lifecycle import show_detached, show_run
from launcher.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from launcher.record.events import RunOutcome
from launcher.record.run import RunFacts
from launcher.record.states import Outcome
from launcher.ui.console import Console


class _Record:
    run_id, dir = "r1", Path("/runs/demo/r1")


def _facts(*events) -> RunFacts:
    facts = RunFacts()
    for at, event in enumerate(events):
        facts.apply(event.stamped(float(at)))
    return facts


def test_a_runs_result_is_the_supervisors_outcome_with_the_reason_its_event_gave():
    facts = _facts(RunOutcome(outcome=Outcome.INTERRUPTED, attempts=1, reason="the terminal went away"))
    assert run_result(Outcome.INTERRUPTED, facts, _Record()) == RunResult(
        Outcome.INTERRUPTED, "r1", Path("/runs/demo/r1"), "the terminal went away")
    # no outcome reached the fold (its listener failed): the supervisor's word, and that said
    assert run_result(Outcome.FAILED, RunFacts(), _Record()) == RunResult(
        Outcome.FAILED, "r1", Path("/runs/demo/r1"), "the run's outcome was not recorded")


def _console() -> tuple[Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Console(out=out, err=err, color=False), out, err


def test_the_cli_shows_a_dry_run_and_maps_each_outcome(capsys):
    from launcher.app.up import plan_for
    from launcher.loader.load import parse_spec
    from launcher.ui.plantext import render_plan

    plan = plan_for(parse_spec("name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 2}\n"))
    console, _out, err = _console()
    dry = DryRun(plan, "dry run: preflight passed", standby="warm standby: off", notes=("starts as planned",))
    assert show_run(RunResult(Outcome.SUCCEEDED, dry_run=dry), console) == EXIT_OK
    shown = capsys.readouterr().out
    assert shown == render_plan(plan, standby="warm standby: off", notes=["starts as planned"]) + "\n"
    assert "worker:1" in shown and err.getvalue() == "tfcluster: dry run: preflight passed\n"
    assert [show_run(RunResult(o), console) for o in (Outcome.FAILED, Outcome.INTERRUPTED)] == [EXIT_FAILED, EXIT_INTERRUPTED]


def test_a_detached_run_is_shown_with_its_commands_and_a_supervisors_exit_is_passed_on():
    console, out, _err = _console()
    assert show_detached(DetachResult(Outcome.SUCCEEDED, "r1", supervisor_pid="42", note="note"), "a b.yaml", console) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "run r1 is running detached (supervisor pid 42); it goes on when this terminal closes."
    assert lines[1] == "note" and lines[2].strip().startswith("tfcluster status 'a b.yaml' --run r1 ")
    assert len(lines) == 6 and lines[-1].strip().startswith("tfcluster down 'a b.yaml' --run r1")
    console, out, _err = _console()
    assert show_detached(DetachResult(Outcome.FAILED, "r1", relayed_exit=EXIT_USAGE), "c.yaml", console) == EXIT_USAGE
    assert show_detached(DetachResult(Outcome.INTERRUPTED, "r1"), "c.yaml", console) == EXIT_INTERRUPTED
    assert out.getvalue() == ""  # nothing handed over: no commands to reach it
