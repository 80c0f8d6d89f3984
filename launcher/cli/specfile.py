"""``tfcluster validate``, ``plan`` and ``schema``: the spec itself, nothing started."""

from __future__ import annotations

import argparse
import sys

from launcher.app.up import EXIT_OK, plan_for, spares_of, standby_line
from launcher.cli.common import JSON_FORMAT, load
from launcher.errors import UserError
from launcher.plan.build import COMPACT, write_full_json
from launcher.loader.load import load_spec
from launcher.ui.console import Console
from launcher.ui.jsontext import json_text
from launcher.ui.plantext import render_plan


def validate(args: argparse.Namespace, console: Console) -> int:
    if args.json:
        return _validate_json(args.spec)
    _loaded, plan = load(args.spec, console, discover=True, warn=True)
    print(f"{args.spec}: ok ({plan.strategy}, {len(plan.tasks)} tasks on {plan.backend})")
    return EXIT_OK


def _validate_json(spec: str) -> int:
    """``validate --json``: one JSON object on stdout, valid or not (the error lines in it as well
    as on stderr)."""
    out: dict = {"format": JSON_FORMAT, "file": spec}
    try:
        from launcher.loader.discovery import with_discovered
        from launcher.loader.shadow import warnings

        loaded = with_discovered(load_spec(spec))
        plan = plan_for(loaded.spec)
    except UserError as exc:
        print(json_text({**out, "valid": False, "errors": list(exc.lines)}))
        raise
    notes = warnings(loaded)
    print(json_text({**out, "valid": True, "name": loaded.spec.name, "strategy": plan.strategy,
                     "backend": plan.backend, "tasks": len(plan.tasks), "warnings": notes}))
    for line in notes:
        Console().info(line)
    return EXIT_OK


def plan(args: argparse.Namespace, console: Console) -> int:
    loaded, planned = load(args.spec, console, discover=True, gpus=True)
    if args.json == "compact":  # ("format" is the version here; "shape" says compact)
        compact = {k: v for k, v in planned.to_compact_json(secrets=args.show_secrets).items() if k != "format"}
        print(json_text({"format": JSON_FORMAT, "shape": COMPACT, **compact}))
    elif args.json:
        write_full_json(planned, sys.stdout, secrets=args.show_secrets, head={"format": JSON_FORMAT})
    else:
        print(render_plan(planned, show_secrets=args.show_secrets, spares=spares_of(loaded.spec),
                          standby=standby_line(loaded.spec, planned)))
    return EXIT_OK


def schema(args: argparse.Namespace, console: Console) -> int:
    from launcher.loader.load import json_schema

    print(json_text(json_schema()))
    return EXIT_OK
