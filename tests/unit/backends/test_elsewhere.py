"""``Backend.run_elsewhere``'s request: the command line it becomes there parses, with tfcluster's own
parser, back into the same command and options (the ssh supervisor host runs that command line)."""

from __future__ import annotations

import pytest

from launcher.backends.elsewhere import Elsewhere
from launcher.cli.parser import build_parser, resolve_file

SPEC = "/home/u/.tfcluster/specs/c.yaml"  # the spec's path on the other machine


def _parsed(request: Elsewhere):
    argv = request.argv(SPEC)
    args = build_parser().parse_args(argv)
    resolve_file(args, argv)
    return args


@pytest.mark.parametrize("request_, expected", [
    (Elsewhere("status", run_id="20250101-120000-ab12", json=True), {"run": "20250101-120000-ab12", "json": True}),
    (Elsewhere("status"), {"run": None, "json": False}),
    (Elsewhere("runs", json=True), {"json": True}),
    (Elsewhere("attach", run_id="r1"), {"run": "r1"}),
    (Elsewhere("down", run_id="r2", timeout=7.5), {"run": "r2", "timeout": 7.5}),
    (Elsewhere("logs", task="worker:1", run_id="r3", follow=True, attempt=2, tail=0),
     {"task": "worker:1", "run": "r3", "follow": True, "attempt": 2, "tail": 0}),
    (Elsewhere("logs"), {"task": None, "follow": False, "attempt": None, "tail": None}),
    (Elsewhere("stacks", task="worker:1", run_id="r4", timeout=12.5), {"task": "worker:1", "run": "r4", "timeout": 12.5}),
    (Elsewhere("stacks", timeout=30.0), {"task": None, "run": None, "timeout": 30.0}),
    (Elsewhere("up", detach=True, quiet=True, force=True),
     {"detach": True, "quiet": True, "force": True, "plain": False, "verbose": False, "dry_run": False}),
    (Elsewhere("up", plain=True, verbose=True), {"detach": False, "plain": True, "verbose": True, "quiet": False}),
])
def test_the_request_becomes_a_command_line_that_parses_back_to_it(request_, expected):
    args = _parsed(request_)
    assert args.command == request_.command and args.spec == SPEC
    assert {k: getattr(args, k) for k in expected} == expected


def test_only_the_commands_whose_run_may_live_elsewhere_are_requests():
    with pytest.raises(ValueError, match="'plan' does not run elsewhere"):
        Elsewhere("plan")
