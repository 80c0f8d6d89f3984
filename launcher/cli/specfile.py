"""``tfcluster validate``, ``plan`` and ``schema``: the spec itself, nothing started."""

from __future__ import annotations

import argparse
import json
import sys

from launcher.app.up import EXIT_OK, plan_for, spares_of, standby_line
from launcher.bounded import escape
from launcher.cli.common import JSON_FORMAT, load
from launcher.errors import UserError
from launcher.plan.build import COMPACT, write_full_json
from launcher.loader.load import load_spec
from launcher.ui.console import Console
from launcher.ui.plantext import render_plan


def validate(args: argparse.Namespace, console: Console) -> int:
    if args.json:
        return _validate_json(args.spec)
    # No command of the spec runs here (docs/concepts/trust.md): discovery.command runs at `up`.
    _loaded, plan = load(args.spec, console, warn=True)
    print(f"{escape(str(args.spec))}: ok ({plan.strategy}, {len(plan.tasks)} tasks on {plan.backend})")
    return EXIT_OK


def _validate_json(spec: str) -> int:
    """``validate --json``: one JSON object on stdout, valid or not (the error lines in it as well
    as on stderr)."""
    out: dict = {"format": JSON_FORMAT, "file": spec}
    try:
        from launcher.loader.shadow import warnings

        loaded = load_spec(spec)  # (discovery.command does not run: validating runs nothing of the spec)
        plan = plan_for(loaded.spec)
    except UserError as exc:
        print(json.dumps({**out, "valid": False, "errors": list(exc.lines)}, indent=2))
        raise
    notes = warnings(loaded)
    print(json.dumps({**out, "valid": True, "name": loaded.spec.name, "strategy": plan.strategy,
                      "backend": plan.backend, "tasks": len(plan.tasks), "warnings": notes}, indent=2))
    for line in notes:
        Console().info(line)
    return EXIT_OK


def plan(args: argparse.Namespace, console: Console) -> int:
    discover = getattr(args, "discover", False)
    loaded, planned = load(args.spec, console, discover=discover, gpus=True)
    if loaded.spec.discovery is not None and not discover and not planned.placeholder:
        console.info(f"hosts: only those under hosts: ({len(loaded.spec.hosts)}); more come from discovery.command "
                     "at `up` (run it now: tfcluster plan --discover)")
    if args.json == "compact":  # ("format" is the version here; "shape" says compact)
        compact = {k: v for k, v in planned.to_compact_json(secrets=args.show_secrets).items() if k != "format"}
        print(json.dumps({"format": JSON_FORMAT, "shape": COMPACT, **compact}, indent=2))
    elif args.json:
        write_full_json(planned, sys.stdout, secrets=args.show_secrets, head={"format": JSON_FORMAT})
    else:
        print(render_plan(planned, show_secrets=args.show_secrets, spares=spares_of(loaded.spec),
                          standby=standby_line(loaded.spec, planned)))
    return EXIT_OK


def schema(args: argparse.Namespace, console: Console) -> int:
    from launcher.loader.load import json_schema

    print(json.dumps(json_schema(), indent=2))
    return EXIT_OK
