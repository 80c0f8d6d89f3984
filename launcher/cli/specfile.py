"""``tfcluster validate``, ``plan`` and ``schema``: the spec itself, nothing started."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Optional

from launcher.app.plannotes import hang_line, spares_of, standby_line, start_note
from launcher.app.stages import plan_for
from launcher.cli.common import JSON_HEAD, load
from launcher.bounded import escape
from launcher.errors import EXIT_OK, LaunchError, SpecError, UserError
from launcher.plan.build import COMPACT, redact_command, write_full_json
from launcher.plan.kerasplan import keras_line
from launcher.loader.load import load_spec, locate
from launcher.ui.console import Console
from launcher.ui.jsontext import json_text


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
    out: dict = {**JSON_HEAD, "file": spec}
    try:
        from launcher.loader.notes import warnings

        from launcher.loader.scriptcheck import check_script

        loaded = load_spec(spec)  # (discovery.command does not run: validating runs nothing of the spec)
        plan = plan_for(loaded.spec)
        check_script(loaded)
    except UserError as exc:
        if isinstance(exc, SpecError):
            exc = locate(exc, spec)
        print(json_text({**out, "valid": False, "errors": list(exc.lines)}))
        raise exc from None
    notes = warnings(loaded)
    print(json_text({**out, "valid": True, "name": loaded.spec.name, "strategy": plan.strategy,
                     "backend": plan.backend, "tasks": len(plan.tasks), "warnings": notes}))
    for line in notes:
        Console().info(line)
    return EXIT_OK


def _launch(loaded, planned) -> Optional[dict]:
    """The backend's own command lines for the plan (``sbatch``, each ``srun``), as JSON, or
    None where the plan's commands are what runs; ``{"error": ...}`` when the backend cannot
    say now (its workload manager unreachable): the plan is still shown."""
    from launcher.backends import backend_class

    try:
        lines = backend_class(loaded.spec.backend).launch_lines(loaded, planned)
    except LaunchError as exc:
        return {"error": exc.lines[0]}
    return None if lines is None else lines.to_json()


def _launch_text(backend: str, launch: dict) -> list[str]:
    if "error" in launch:
        return [f"commands on backend {backend}: not shown: {launch['error']}"]
    out = [f"commands on backend {backend} ({launch['note']}):" if launch["note"] else
           f"commands on backend {backend}:"]
    if launch["allocation"]:
        out.append(f"  allocation: {shlex.join(launch['allocation'])}")
    out.extend(f"  {key}: {shlex.join(argv)}" for key, argv in launch["tasks"].items())
    return out


def plan(args: argparse.Namespace, console: Console) -> int:
    discover = getattr(args, "discover", False)
    loaded, planned = load(args.spec, console, discover=discover, gpus=True, warn=True)
    if loaded.spec.discovery is not None and not discover and not planned.placeholder:
        console.info(f"hosts: only those under hosts: ({len(loaded.spec.hosts)}); more come from discovery.command "
                     "at `up` (run it now: tfcluster plan --discover)")
    launch = _launch(loaded, planned)
    if launch is not None and "error" not in launch and not args.show_secrets:  # (they hold the task's command)
        launch = {**launch, "allocation": redact_command(launch["allocation"]),
                  "tasks": {key: redact_command(argv) for key, argv in launch["tasks"].items()}}
    extra = {} if launch is None else {"launch": launch}
    if args.json == "compact":  # ("format" is the version here; "shape" says compact)
        compact = {k: v for k, v in planned.to_compact_json(secrets=args.show_secrets).items() if k != "format"}
        print(json_text({**JSON_HEAD, "shape": COMPACT, **compact, **extra}))
    elif args.json:
        write_full_json(planned, sys.stdout, secrets=args.show_secrets, head={**JSON_HEAD, **extra})
    else:
        from launcher.ui.plantext import render_plan  # (rich: only for the table, not for validate)

        print(render_plan(planned, show_secrets=args.show_secrets, spares=spares_of(loaded.spec),
                          standby=standby_line(loaded.spec, planned),
                          notes=[start_note(loaded.spec, planned), hang_line(loaded.spec, planned),
                                 keras_line(loaded.spec)]))
        if launch is not None:
            print("\n".join(escape(line) for line in _launch_text(planned.backend, launch)))
    return EXIT_OK


def schema(args: argparse.Namespace, console: Console) -> int:
    from launcher.loader.load import json_schema

    text = json_text(json_schema())
    if args.output and args.output != "-":
        from launcher.safefile import write_whole

        try:  # (a new file renamed into place: a symlink planted at the path is replaced, never followed)
            write_whole(args.output, text + "\n")
        except OSError as exc:
            raise LaunchError(f"-o: cannot write {escape(args.output)}: {exc.strerror or exc}; "
                              "give a path in a folder you can write") from None
        console.info(f"wrote {args.output}; start cluster.yaml with '# yaml-language-server: $schema={args.output}'")
        return EXIT_OK
    print(text)
    return EXIT_OK
