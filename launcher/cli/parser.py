"""``tfcluster``'s parser, in one place: every command and flag (``build_parser``, which the
docs' CLI reference and the shell completion are generated from), and the spec each command names
(``resolve_file``). The commands themselves are the other modules of launcher/cli/."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Optional

from launcher import __version__
from launcher.contract import envnames
from launcher.bounded import escape
from launcher.errors import SpecError

DEFAULT_FILE = "cluster.yaml"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise SpecError(f"{message} (see '{self.prog} --help')")


# Examples at the end of each subcommand's --help.
EXAMPLES = {
    "validate": ["tfcluster validate", "tfcluster validate path/to/cluster.yaml --json"],
    "plan": ["tfcluster plan", "tfcluster plan cluster.yaml --json", "tfcluster plan --json=compact big.yaml"],
    "up": ["tfcluster up", "tfcluster up --dry-run", "tfcluster up --detach", "tfcluster -f examples/mirrored.yaml up --plain"],
    "status": ["tfcluster status", "tfcluster status --json", "tfcluster status --run 20250101-120000-ab12"],
    "logs": ["tfcluster logs", "tfcluster logs worker:0 --tail 50", "tfcluster logs --follow",
             "tfcluster logs --file other.yaml worker:1 --attempt 2"],
    "attach": ["tfcluster attach", "tfcluster attach --run 20250101-120000-ab12"],
    "runs": ["tfcluster runs", "tfcluster runs cluster.yaml --json", "tfcluster runs runs/"],
    "stacks": ["tfcluster stacks", "tfcluster stacks worker:1", "tfcluster stacks other.yaml --run 20250101-120000-ab12"],
    "down": ["tfcluster down", "tfcluster down --run 20250101-120000-ab12 --timeout 30"],
    "compose": ["tfcluster compose", "tfcluster compose -o - --image registry.example/me/train:1"],
    "export": ["tfcluster export --to tfjob", "tfcluster export cluster.yaml --to jobset --image REGISTRY/worker:1",
               "tfcluster export cluster.yaml --to vertex -o -"],
    "compare": ["tfcluster compare --strategies default,mirrored,multi_worker_mirrored",
                "tfcluster compare a.yaml b.yaml --repeat 3"],
    "tensorboard": ["tfcluster tensorboard", "tfcluster tensorboard --port 6007"],
    "schema": ["tfcluster schema -o cluster.schema.json", "tfcluster schema > ~/cluster.schema.json"],
    "image": ["tfcluster image build", "tfcluster image build -t registry.example/me/tfcluster-worker:1",
              "tfcluster image print --context tfcluster-image", "tfcluster image print > Dockerfile"],
    "completion": ["tfcluster completion bash > ~/.local/share/bash-completion/completions/tfcluster",
                   "tfcluster completion zsh > ~/.zfunc/_tfcluster"],
}
_FILE_HELP = f"the spec (default: -f/--file, then ${envnames.FILE}, then ./{DEFAULT_FILE})"


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser (also for what is generated from it: the docs' CLI reference, completion)."""
    p = _Parser(prog="tfcluster", description="Launch and supervise multi-worker TensorFlow clusters.",
                epilog=f"FILE defaults to ./{DEFAULT_FILE} (or -f FILE, or ${envnames.FILE}). "
                       "Exit codes: 0 ok, 1 failed, 2 bad spec or usage, 3 supervisor lost, 4 no such run, "
                       "130 interrupted. 'tfcluster COMMAND --help' shows examples.")
    p.add_argument("--version", action="version", version=f"tfcluster {__version__}")
    p.add_argument("-f", "--file", metavar="FILE", default=None, help=_FILE_HELP)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # In this order: the order of `tfcluster --help` and of the generated CLI reference.
    _add_spec_commands(sub)
    _add_run_commands(sub)
    _add_output_commands(sub)
    _add_tool_commands(sub)
    return p


def _command(sub, name: str, help: str, spec: Optional[str] = "?",
             file_flags=("-f", "--file")) -> argparse.ArgumentParser:
    """One subcommand with its --help examples and, unless ``spec`` is None, its FILE argument."""
    c = sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".",
                       epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[name]),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    if spec is not None:
        flags = "/".join(file_flags) + ("" if "-f" in file_flags else " (or -f before the command)")
        c.add_argument("spec", metavar="FILE", nargs=spec, default=None,
                       help=f"the spec (default: {flags}, then ${envnames.FILE}, then ./{DEFAULT_FILE})")
        # SUPPRESS: not given here, the global -f (before COMMAND) is kept.
        c.add_argument(*file_flags, dest="file", metavar="FILE", default=argparse.SUPPRESS,
                       help="the spec, as FILE")
    return c


def _add_spec_commands(sub) -> None:
    """validate, plan, up: the commands that read a spec and act on it."""
    v = _command(sub, "validate", "check cluster.yaml; exit 0 if valid, 2 if not")
    v.add_argument("--json", action="store_true", help="machine-readable result (also for an invalid spec)")

    pl = _command(sub, "plan", "print the plan: every task's host, port, TF_CONFIG, command and env")
    pl.add_argument("--json", nargs="?", const="full", metavar="FORM",
                    help="machine-readable plan: --json (full: every task with its whole TF_CONFIG and env) or "
                         "--json=compact (the cluster and the shared env once, each task's own part: for big specs)")
    pl.add_argument("--show-secrets", action="store_true", help="do not mask secrets (values of KEY/TOKEN/SECRET/PASSWORD/AUTH/PAT... variables and options, URLs with a password, known token shapes; in env and in the command)")
    pl.add_argument("--discover", action="store_true",
                    help="run the spec's discovery.command now and plan with the hosts it prints (without it, "
                         "no command of the spec runs before `up`)")

    up = _command(sub, "up", "start the cluster and supervise it until it succeeds or fails")
    up.add_argument("--dry-run", action="store_true", help="plan and preflight only; start nothing")
    up.add_argument("--quiet", action="store_true",
                    help="show only launcher messages and the final report (log files still get task output)")
    up.add_argument("--plain", action="store_true",
                    help="prefixed task lines instead of the live panel, also on a terminal")
    up.add_argument("--verbose", action="store_true",
                    help="also show TensorFlow's known harmless start-up lines (log files always have them) and, in "
                         "plain lines, the tasks' progress records as they sent them (tfcluster-step ...)")
    up.add_argument("--detach", action="store_true",
                    help="once every task is ready, leave the run to a background supervisor and exit 0")
    up.add_argument("--force", action="store_true", help="start even if a run of this spec is still running")
    up.add_argument("--supervise", metavar="RUN_ID", help=argparse.SUPPRESS)  # the detached supervisor itself


def _add_run_commands(sub) -> None:
    """status, logs, attach, runs, stacks, down: the commands about a run (the latest, or --run)."""
    st = _command(sub, "status", "state of the latest (or given) run: attempt, elapsed, a row per task")
    st.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    st.add_argument("--json", action="store_true", help="machine-readable status")

    # (-f is --follow here, as in `tail -f`: the spec is FILE, --file FILE or the global -f before `logs`)
    lg = _command(sub, "logs", "a task's log, or every task's output interleaved", file_flags=("--file",))
    lg.add_argument("task", metavar="TASK", nargs="?", help="e.g. worker:0 (default: every task, prefixed); "
                    "`tfcluster logs worker:0` alone takes the default FILE")
    lg.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the run ends")
    lg.add_argument("--attempt", type=int, metavar="N", help="only attempt N (1 = the first)")
    lg.add_argument("--tail", type=int, metavar="N", help="start with the last N lines")

    at = _command(sub, "attach", "watch a (detached) run live; Ctrl-C detaches, the run goes on")
    at.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")

    rs = _command(sub, "runs", "the runs of a spec (or under a run dir): id, start, duration, outcome", spec=None)
    rs.add_argument("spec", metavar="FILE", nargs="?", default=None,
                    help="a cluster.yaml, or a run dir such as runs/ or runs/NAME (default: -f/--file or "
                         f"${envnames.FILE}, else ./runs)")
    rs.add_argument("-f", "--file", dest="file", metavar="FILE", default=argparse.SUPPRESS, help="the spec, as FILE")
    rs.add_argument("--json", action="store_true", help="machine-readable list of runs")

    sk = _command(sub, "stacks", "every live task's current stacks (all threads) of the latest (or given) run")
    sk.add_argument("task", metavar="TASK", nargs="?", help="e.g. worker:1 (default: every live task); "
                    "`tfcluster stacks worker:1` alone takes the default FILE")
    sk.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    sk.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the stacks")

    down = _command(sub, "down", "stop the latest (or given) run of this spec")
    down.add_argument("--run", metavar="RUN_ID", help="a run id under runs/<name>/ (default: latest)")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the run to stop")


def _add_output_commands(sub) -> None:
    """compose, export, compare: the commands that write files from a spec."""
    co = _command(sub, "compose", "write the plan as a standalone docker-compose.yml")
    co.add_argument("-o", "--output", metavar="PATH",
                    help="where to write (default: docker-compose.yml beside FILE; '-' for stdout)")
    co.add_argument("--image", metavar="IMAGE", help="image for every service (default: docker.image of the spec)")

    ex = _command(sub, "export", "write the spec as a Kubeflow TFJob, a Kubernetes JobSet or a Vertex AI CustomJob, "
                  "validated offline")
    ex.add_argument("--to", required=True, choices=("tfjob", "jobset", "vertex"), help="the engine that runs the job")
    ex.add_argument("-o", "--output", metavar="PATH",
                    help="where to write (default: NAME.tfjob.yaml / NAME.jobset.yaml / NAME.vertex.yaml beside FILE; "
                         "vertex also writes the CustomJob .json beside the .yaml, tfjob and jobset the Secret of "
                         "the env's secret values, mode 0600, as PATH's .secret.yaml; '-' for the YAML on stdout)")
    ex.add_argument("--image", metavar="IMAGE", help="image for every replica (default: docker.image of the spec)")
    ex.add_argument("--strict", action="store_true",
                    help="fail (exit 2) when a check cannot run here (--to vertex without the [export] extra: "
                         "the Vertex API types) instead of writing the file with the check marked as skipped")

    cmp = _command(sub, "compare", "run the same training under several strategies or specs, one after "
                  "another, and write a table, a report and plots", spec="*")
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


def _add_tool_commands(sub) -> None:
    """tensorboard, schema, image, completion: tools around the runs and the spec."""
    tb = _command(sub, "tensorboard", "run TensorBoard on the logs of the latest run of this spec")
    tb.add_argument("--port", type=int, default=6006, help="the port TensorBoard serves on (default: 6006)")

    sc = _command(sub, "schema", "print the JSON Schema of cluster.yaml, for editors: save it and start cluster.yaml with "
                 "'# yaml-language-server: $schema=cluster.schema.json'", spec=None)
    sc.add_argument("-o", "--output", metavar="PATH", help="write it to PATH instead of stdout")

    im = _command(sub, "image", "build tfcluster's worker image from the installed tfcluster (no checkout needed: its "
                 "Dockerfile ships in the package), or print that Dockerfile or write its build context", spec=None)
    im.add_argument("action", choices=("build", "print"),
                    help="build: build the image on the Docker engine ($DOCKER_HOST or --engine); print: the "
                         "Dockerfile on stdout, or with --context DIR the whole build context (for docker compose)")
    im.add_argument("-t", "--tag", default="tfcluster-worker:latest", metavar="IMAGE",
                    help="build: the image's name (default: tfcluster-worker:latest, docker.image's default)")
    im.add_argument("--base-image", metavar="IMAGE",
                    help="build: the BASE_IMAGE build arg (Debian-like with python3 >= 3.10 and venv)")
    im.add_argument("--build-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="build: a build arg, e.g. PIP_INDEX_URL=... (repeatable)")
    im.add_argument("--network", metavar="NET", help="build: the network of RUN steps, e.g. host")
    im.add_argument("--engine", metavar="URL", help="build: the engine's URL (default: $DOCKER_HOST)")
    im.add_argument("--context", metavar="DIR",
                    help="print: write the build context (Dockerfile, requirements.txt, src/) into DIR, new or "
                         "empty; then docker build DIR, or compose's build: {context: DIR}")

    cpl = _command(sub, "completion", "print a shell completion script (generated from this parser)", spec=None)
    cpl.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")


_TASK_KEY = re.compile(r"^(chief|worker|ps|evaluator):\d+$")


def resolve_file(args: argparse.Namespace, argv: list[str]) -> None:
    """``args.spec``: FILE, else -f/--file, else $TFCLUSTER_FILE, else ./cluster.yaml (``runs``: else
    ./runs). ``args.argv`` is the command line from COMMAND on, naming the spec as FILE (what
    ``compare`` records as the command that made its report)."""
    if args.command == "plan":
        _plan_json(args)
    if args.command in ("logs", "stacks") and args.task is None and args.spec is not None and _TASK_KEY.fullmatch(args.spec) \
            and not Path(args.spec).exists():
        args.task, args.spec = args.spec, None  # `tfcluster logs worker:0`
    given = args.spec if args.command != "compare" else (args.spec[0] if args.spec else None)
    if given is not None and args.file is not None and given != args.file:
        raise SpecError(f"two specs given: FILE {given} and --file {args.file}; give one")
    chosen = given or args.file or os.environ.get(envnames.FILE) or None
    if chosen is not None and given is None and args.file is None and not Path(chosen).exists():
        raise SpecError(f"${envnames.FILE} is {escape(repr(chosen))}, which does not exist; fix or unset "
                        f"{envnames.FILE}, or give FILE (tfcluster {args.command} path/to/cluster.yaml)")
    positional = given is not None
    if chosen is None and args.command != "runs":
        if not Path(DEFAULT_FILE).is_file():
            raise SpecError(f"no FILE given and no ./{DEFAULT_FILE} in {Path.cwd()}; give FILE "
                            f"(tfcluster {args.command} path/to/cluster.yaml), -f FILE, or set {envnames.FILE}")
        chosen = DEFAULT_FILE
    if args.command == "compare":
        args.spec = args.spec or [chosen]
    else:
        args.spec = chosen
    rest = argv[argv.index(args.command) + 1:] if args.command in argv else []
    if not positional and chosen is not None:
        rest = [chosen] + _without_file_flags(rest, args.command)
    args.argv = [args.command] + rest


def _without_file_flags(words: list[str], command: str) -> list[str]:
    flags = ("--file",) if command == "logs" else ("-f", "--file")
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in flags:
            skip = True
        elif not any(w.startswith(f + "=") for f in flags):
            out.append(w)
    return out


def _plan_json(args: argparse.Namespace) -> None:
    """``plan``'s FILE and --json's optional form: ``plan --json FILE`` gives --json the file,
    which is FILE then."""
    if args.json not in (None, "full", "compact"):
        if args.spec is not None:
            raise SpecError(f"argument --json: invalid choice: {args.json!r} (choose from 'full', 'compact') "
                            "(see 'tfcluster plan --help')")
        args.spec, args.json = args.json, "full"
