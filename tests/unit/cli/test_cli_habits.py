"""What a newcomer expects of a command line: FILE found on its own (./cluster.yaml, -f FILE,
$TFCLUSTER_FILE), bare ``tfcluster`` shows help, NO_COLOR, shell completion from the parser,
examples in every subcommand's help, exit 4 for "no such run", ``--json`` with a format version."""

from __future__ import annotations

import json
import os
import pty
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.cli.parser import EXAMPLES, build_parser
from launcher import __version__
from launcher.errors import EXIT_NO_RUN
from tests.support.cli import tfcluster, tfcluster_argv
from tests.support.specs import script_spec, spec_file

COMMANDS = ["validate", "plan", "up", "status", "logs", "attach", "runs", "stacks", "down", "compose", "export", "compare",
            "tensorboard", "schema", "completion", "image"]
SPEC = """\
    name: t
    strategy: multi_worker_mirrored
    entrypoint: [python, x.py]
    tasks: {worker: 2}
"""


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TFCLUSTER_FILE", "NO_COLOR")}
    return {**env, **extra}


def _write(directory: Path, name: str = "cluster.yaml", spec_name: str = "t") -> Path:
    return spec_file(directory, textwrap.dedent(SPEC).replace("name: t", f"name: {spec_name}"), name)


# ------------------------------------------------------------------ FILE


def test_file_defaults_to_cluster_yaml_then_env_then_flag(tmp_path):
    here = _write(tmp_path)
    _write(tmp_path, "other.yaml", "other")
    ok = tfcluster("validate", cwd=tmp_path, environ=_env())
    assert (ok.returncode, ok.stdout) == (0, "cluster.yaml: ok (multi_worker_mirrored, 2 tasks on local)\n"), ok.stderr
    by_env = tfcluster("plan", "--json", cwd=tmp_path, environ=_env(TFCLUSTER_FILE="other.yaml"))
    assert by_env.returncode == 0 and json.loads(by_env.stdout)["name"] == "other", by_env.stderr
    for argv in (["-f", "other.yaml", "plan", "--json"], ["plan", "--file", "other.yaml", "--json"],
                 ["plan", "-f", "other.yaml", "--json"], ["plan", "other.yaml", "--json"]):
        res = tfcluster(*argv, cwd=tmp_path, environ=_env(TFCLUSTER_FILE=str(here)))  # FILE/-f beat the env
        assert res.returncode == 0 and json.loads(res.stdout)["name"] == "other", (argv, res.stderr)
    both = tfcluster("validate", "cluster.yaml", "--file", "other.yaml", cwd=tmp_path, environ=_env())
    assert both.returncode == 2 and both.stderr == (
        "tfcluster: error: two specs given: FILE cluster.yaml and --file other.yaml; give one\n")


def test_a_bad_tfcluster_file_names_the_variable(tmp_path):
    res = tfcluster("validate", cwd=tmp_path, environ=_env(TFCLUSTER_FILE="nope.yaml"))
    assert res.returncode == 2
    assert res.stderr == ("tfcluster: error: $TFCLUSTER_FILE is 'nope.yaml', which does not exist; fix or unset "
                          "TFCLUSTER_FILE, or give FILE (tfcluster validate path/to/cluster.yaml)\n")


def test_the_file_help_of_logs_does_not_offer_f_which_is_follow_there():
    logs = tfcluster("logs", "--help").stdout
    assert "-f, --follow" in logs and "-f/--file" not in logs
    assert "default: --file (or -f before the command)" in " ".join(logs.split())
    assert "default: -f/--file" in " ".join(tfcluster("status", "--help").stdout.split())


def test_no_file_anywhere_is_one_line_exit_2(tmp_path):
    res = tfcluster("up", cwd=tmp_path, environ=_env())
    assert res.returncode == 2
    assert res.stderr == (f"tfcluster: error: no FILE given and no ./cluster.yaml in {tmp_path}; give FILE "
                          "(tfcluster up path/to/cluster.yaml), -f FILE, or set TFCLUSTER_FILE\n")


def test_logs_takes_a_task_alone_and_keeps_f_for_follow(tmp_path):
    _write(tmp_path)
    args = build_parser().parse_args(["logs", "worker:1", "-f"])
    assert (args.spec, args.task, args.follow) == ("worker:1", None, True)  # (resolved below)
    res = tfcluster("logs", "worker:1", cwd=tmp_path, environ=_env())
    # ./cluster.yaml was read (its run dir named) and worker:1 taken as the TASK, not as FILE
    assert res.returncode == EXIT_NO_RUN and f"no run of this spec under {tmp_path / 'runs' / 't'}" in res.stderr


def test_bare_tfcluster_prints_help_and_exits_0(tmp_path):
    res = tfcluster(cwd=tmp_path, environ=_env())
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("usage: tfcluster ")
    assert all(f"\n    {c} " in res.stdout for c in COMMANDS), res.stdout


def test_version_is_the_package_version():
    import launcher

    res = tfcluster("--version")
    assert (res.returncode, res.stdout) == (0, f"tfcluster {launcher.__version__}\n")


# ------------------------------------------------------------------ help, completion


def test_every_command_of_the_parser_has_its_function_and_no_other_is_listed():
    from launcher.cli import main as cli_main

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(cli_main.COMMANDS) == sorted(sub.choices) == sorted(COMMANDS)


def test_every_subcommand_help_shows_examples_that_parse():
    parser = build_parser()
    assert sorted(EXAMPLES) == sorted(COMMANDS)
    for command, examples in EXAMPLES.items():
        assert examples, command
        for example in examples:
            words = shlex.split(example.split(">")[0])
            assert words[0] == "tfcluster" and command in words[1:4], example
            args = parser.parse_args(words[1:])  # (a usage error raises SpecError)
            assert args.command == command, example
    res = tfcluster("status", "--help")
    assert res.returncode == 0 and "\nexamples:\n  tfcluster status\n  tfcluster status --json\n" in res.stdout


def test_bash_completion_is_valid_bash_and_completes_commands_flags_and_choices(tmp_path):
    res = tfcluster("completion", "bash")
    assert res.returncode == 0
    script = tmp_path / "tfcluster.bash"
    script.write_text(res.stdout)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0

    def complete(*words: str) -> list[str]:
        line = " ".join(shlex.quote(w) for w in words)
        probe = (f"source {shlex.quote(str(script))}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
                 '_tfcluster; printf "%s\\n" "${COMPREPLY[@]}"')
        out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert set(COMMANDS) <= set(complete("tfcluster", ""))
    assert complete("tfcluster", "sta") == ["status", "stacks"]
    assert complete("tfcluster", "export", "--to", "") == ["tfjob", "jobset", "vertex"]
    assert set(complete("tfcluster", "-f", "x.yaml", "up", "--d")) == {"--dry-run", "--detach"}
    assert complete("tfcluster", "completion", "") == ["bash", "zsh"]
    # --run: the run ids of ./runs (runs/<name>/<run id>), not file names
    for run in ("20261123-093836-0ded", "20261124-101010-ab12"):
        (tmp_path / "runs" / "demo" / run).mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "state").mkdir()
    for command in ("logs", "status", "attach", "down"):
        assert complete("tfcluster", command, "--run", "") == ["20261123-093836-0ded", "20261124-101010-ab12"]
    assert complete("tfcluster", "logs", "--run", "20261124") == ["20261124-101010-ab12"]


def test_zsh_completion_names_every_command():
    res = tfcluster("completion", "zsh")
    assert res.returncode == 0 and res.stdout.startswith("#compdef tfcluster\n")
    assert all(f"        '{c}:" in res.stdout and f"        {c}) _arguments" in res.stdout for c in COMMANDS)
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n"], input=res.stdout, text=True).returncode == 0


# ------------------------------------------------------------------ exit codes, --json


def test_no_run_is_exit_4_apart_from_a_failed_run(tmp_path):
    path = _write(tmp_path)
    for argv in (["status", path], ["logs", path], ["down", path], ["attach", path], ["runs", path],
                 ["tensorboard", path], ["status", path, "--run", "nope"], ["runs", tmp_path / "runs"]):
        res = tfcluster(*argv, environ=_env())
        assert res.returncode == EXIT_NO_RUN == 4, (argv, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr


def test_runs_status_and_validate_json_carry_format_1(tmp_path):
    path = script_spec(tmp_path, "print('hello', flush=True)\n", tasks="{worker: 1}")
    up = tfcluster("up", path, "--plain", environ=_env())
    assert up.returncode == 0, up.stdout + up.stderr
    runs = json.loads(tfcluster("runs", path, "--json").stdout)
    [run] = runs["runs"]
    assert runs["format"] == 1 and (run["name"], run["outcome"], run["attempts"]) == ("t", "succeeded", 1)
    assert runs["tfcluster"] == __version__  # every --json output names the tfcluster that wrote it
    assert run["run"] == (tmp_path / "runs" / "t" / "latest").resolve().name and run["duration"] >= 0
    assert json.loads(tfcluster("runs", tmp_path / "runs", "--json").stdout) == runs  # (the run dir form)
    status = tfcluster("status", path, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["format"] == 1
    assert json.loads(status.stdout)["tfcluster"] == __version__
    planned = json.loads(tfcluster("plan", path, "--json").stdout)
    assert (planned["format"], planned["tfcluster"]) == (1, __version__)
    compact = json.loads(tfcluster("plan", path, "--json=compact").stdout)
    assert (compact["format"], compact["tfcluster"]) == (1, __version__)
    valid = tfcluster("validate", path, "--json")
    assert valid.returncode == 0 and json.loads(valid.stdout) == {
        "format": 1, "tfcluster": __version__, "file": str(path), "valid": True, "name": "t", "strategy": "multi_worker_mirrored",
        "backend": "local", "tasks": 1, "warnings": []}
    path.write_text(path.read_text().replace("strategy: multi_worker_mirrored", "strategy: mirorred"))
    invalid = tfcluster("validate", path, "--json")
    data = json.loads(invalid.stdout)
    assert invalid.returncode == 2 and (data["format"], data["valid"]) == (1, False)
    assert data["errors"] == [invalid.stderr.strip().removeprefix("tfcluster: error: ")]
    assert data["errors"][0].startswith(f"{path}:2: strategy:")


def test_every_exit_code_is_defined_once():
    """launcher/errors.py defines the EXIT_* codes; nowhere else assigns one."""
    root = Path(__file__).resolve().parents[3]
    found = []
    for p in sorted((root / "launcher").rglob("*.py")):
        for line in p.read_text().splitlines():
            if line.startswith("EXIT_") and "=" in line and p.name != "errors.py" \
                    and not line.startswith("EXIT_CONNECTION_LOST"):  # (ssh(1)'s own code, not ours)
                found.append(f"{p.relative_to(root)}: {line}")
    assert found == []
    from launcher import errors

    assert (errors.EXIT_NO_RUN, errors.NoRun.exit_code) == (4, 4)


# ------------------------------------------------------------------ NO_COLOR


def _on_a_terminal(argv: list, env: dict, cwd: Path) -> str:
    """``tfcluster ARGV`` with stdout and stderr on a pseudo-terminal; everything it wrote."""
    main_fd, tty_fd = pty.openpty()
    proc = subprocess.Popen(tfcluster_argv(*argv), stdout=tty_fd, stderr=tty_fd, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=env)
    os.close(tty_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # EIO: the terminal's other side is closed (the process ended)
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(main_fd)
    return b"".join(chunks).decode("utf-8", "replace")


def test_no_color_removes_colour_codes_on_a_terminal(tmp_path):
    path = script_spec(tmp_path, "print('hello', flush=True)\n", tasks="{worker: 1}")
    coloured = _on_a_terminal(["up", path, "--plain"], _env(TERM="xterm"), tmp_path)
    assert "\x1b[36m[worker:0]\x1b[0m hello" in coloured, coloured
    plain = _on_a_terminal(["up", path, "--plain"], _env(TERM="xterm", NO_COLOR="1"), tmp_path)
    assert "[worker:0] hello" in plain and "\x1b[" not in plain, plain


def test_no_color_reaches_the_live_panel(monkeypatch):
    import io

    from launcher.ui.console import Console
    from launcher.ui.panel import LivePanel
    from launcher.record.view import RunModel

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Console(out=Tty()).color and not LivePanel(RunModel(), Tty()).console.no_color
    monkeypatch.setenv("NO_COLOR", "1")
    assert not Console(out=Tty()).color and LivePanel(RunModel(), Tty()).console.no_color
    monkeypatch.setenv("NO_COLOR", "")  # (set but empty: colour, as no-color.org says)
    assert Console(out=Tty()).color


def test_main_returns_0_for_bare_tfcluster(capsys):
    assert main([]) == 0
    assert "COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize("shell", ["fish", ""])
def test_completion_of_an_unknown_shell_is_a_usage_error(shell, capsys):
    assert main(["completion", shell]) == 2
    assert "invalid choice" in capsys.readouterr().err
