"""``tfcluster validate``, ``plan`` and ``schema``: the spec itself, nothing started."""

from __future__ import annotations

import argparse
import json
import sys

from launcher.app.up import EXIT_OK, plan_for, spares_of, standby_line
from launcher.cli.common import JSON_HEAD, load
from launcher.errors import SpecError, UserError
from launcher.plan.build import COMPACT, write_full_json
from launcher.loader.load import load_spec, locate
from launcher.ui.console import Console
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
    out: dict = {**JSON_HEAD, "file": spec}
    try:
        from launcher.loader.discovery import with_discovered
        from launcher.loader.shadow import warnings

        loaded = with_discovered(load_spec(spec))
        plan = plan_for(loaded.spec)
    except UserError as exc:
        if isinstance(exc, SpecError):
            exc = locate(exc, spec)
        print(json.dumps({**out, "valid": False, "errors": list(exc.lines)}, indent=2))
        raise exc from None
    notes = warnings(loaded)
    print(json.dumps({**out, "valid": True, "name": loaded.spec.name, "strategy": plan.strategy,
                      "backend": plan.backend, "tasks": len(plan.tasks), "warnings": notes}, indent=2))
    for line in notes:
        Console().info(line)
    return EXIT_OK


def plan(args: argparse.Namespace, console: Console) -> int:
    loaded, planned = load(args.spec, console, discover=True, gpus=True)
    if args.json == "compact":  # ("format" is the version here; "shape" says compact)
        compact = {k: v for k, v in planned.to_compact_json(secrets=args.show_secrets).items() if k != "format"}
        print(json.dumps({**JSON_HEAD, "shape": COMPACT, **compact}, indent=2))
    elif args.json:
        write_full_json(planned, sys.stdout, secrets=args.show_secrets, head=JSON_HEAD)
    else:
        print(render_plan(planned, show_secrets=args.show_secrets, spares=spares_of(loaded.spec),
                          standby=standby_line(loaded.spec, planned)))
    return EXIT_OK


def schema(args: argparse.Namespace, console: Console) -> int:
    from launcher.loader.load import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output and args.output != "-":
        from pathlib import Path

        Path(args.output).write_text(text + "\n", encoding="utf-8")
        console.info(f"wrote {args.output}; start cluster.yaml with '# yaml-language-server: $schema={args.output}'")
        return EXIT_OK
    print(text)
    return EXIT_OK
