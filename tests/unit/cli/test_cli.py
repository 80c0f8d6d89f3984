"""The CLI contract: exit codes, one-line errors without tracebacks, plan output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from launcher.cli.main import main
from tests.support.cli import ROOT, tfcluster
from tests.support.specs import script_spec, spec_file




GOOD = """\
    name: t
    strategy: multi_worker_mirrored
    entrypoint: python -m worker --epochs 1
    tasks: {chief: 1, worker: 1}
    env: {DB_PASSWORD: hunter2}
"""


def test_validate_ok(tmp_path, capsys):
    assert main(["validate", str(spec_file(tmp_path, GOOD))]) == 0
    assert "ok (multi_worker_mirrored, 2 tasks on local)" in capsys.readouterr().out


def test_validate_bad_spec_exit_2_one_line_no_traceback(tmp_path, capsys):
    path = spec_file(tmp_path, GOOD.replace("chief: 1", "master: 1"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"tfcluster: error: {path}:4: tasks.master: the legacy role 'master' is not supported; use chief\n"


def test_missing_file_exit_2(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_usage_error_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_plan_json_is_the_contract(tmp_path, capsys):
    assert main(["plan", str(spec_file(tmp_path, GOOD)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data["tasks"][0]
    assert {k: first[k] for k in ("type", "index", "host", "address", "port")} == {
        "type": "chief", "index": 0, "host": "localhost", "address": "localhost", "port": 23456}
    assert first["tf_config"] == {"cluster": {"chief": ["localhost:23456"], "worker": ["localhost:23457"]},
                                  "task": {"type": "chief", "index": 0}}
    assert first["command"] == ["python", "-m", "worker", "--epochs", "1"]
    assert first["env"]["DB_PASSWORD"] == "***"


def test_plan_text_shows_tasks_and_tf_config(tmp_path, capsys):
    assert main(["plan", str(spec_file(tmp_path, GOOD))]) == 0
    out = capsys.readouterr().out
    assert "worker:0" in out and "localhost:23457" in out
    # The cluster once, then each task's own part of its TF_CONFIG (a copy per task is O(n²)).
    assert '  CLUSTER: {"chief":["localhost:23456"],"worker":["localhost:23457"]}\n' in out
    assert '  worker:0: TASK {"type":"worker","index":0}\n' in out and out.count("localhost:23457") == 2
    assert "hunter2" not in out and "DB_PASSWORD=***" in out


ARG_SECRET = """\
name: t
strategy: multi_worker_mirrored
entrypoint: python train.py --hub-token hf_AbCdEfGhIjAbCdEfGhIjAbCdEfGhIjkl --db postgres://bob:hunter2@db/app --epochs 3
tasks: {worker: 2}
"""


def test_plan_masks_secret_arguments_and_warns_once_with_the_fix(tmp_path, capsys):
    spec = str(spec_file(tmp_path, ARG_SECRET))
    for argv in (["plan", spec], ["plan", spec, "--json"], ["plan", spec, "--json=compact"], ["validate", spec]):
        assert main(argv) == 0
        said = capsys.readouterr()
        assert "hf_AbCd" not in said.out + said.err and "hunter2" not in said.out + said.err, argv
        (warning,) = [line for line in said.err.splitlines() if "`ps`" in line]
        assert "--hub-token ***" in warning and "postgres://bob:***@db/app" in warning, warning
        assert "fix: pass it in env (env: {HUB_TOKEN: ...}" in warning, warning
    assert main(["plan", spec, "--json"]) == 0
    command = json.loads(capsys.readouterr().out)["tasks"][0]["command"]
    assert command == ["python", "train.py", "--hub-token", "***", "--db", "postgres://bob:***@db/app", "--epochs", "3"]
    assert main(["plan", spec, "--json", "--show-secrets"]) == 0
    assert "hunter2" in capsys.readouterr().out  # (asked for: shown)
    assert main(["plan", str(spec_file(tmp_path, GOOD, "plain.yaml"))]) == 0
    assert "`ps`" not in capsys.readouterr().err  # (no secret argument: no warning)


def test_console_script_runs_without_tensorflow(tmp_path):
    """The launcher must not import TensorFlow: block it and run the CLI in a fresh interpreter."""
    blocker = tmp_path / "block" / "tensorflow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('tensorflow is blocked in this test')\n")
    spec = spec_file(tmp_path, GOOD)
    env = {"PYTHONPATH": f"{blocker.parent}:{ROOT}", "PATH": "/usr/bin:/bin"}
    proc = tfcluster("plan", spec, timeout=60, environ=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import launcher.cli.main, launcher.supervise.loop, launcher.backends.local, sys;"
                           "print('tensorflow' in sys.modules)"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.stdout.strip() == "False", proc.stderr


def test_a_local_install_runs_without_the_ssh_and_docker_extras(tmp_path):
    """fabric/paramiko are the [ssh] extra, docker the [docker] one: with them blocked, a local run
    works, ssh and docker specs still validate and plan, and their `up` fails in one line naming
    the extra, before anything starts."""
    block = tmp_path / "block"
    for module in ("fabric", "paramiko", "docker", "invoke"):
        (block / module).mkdir(parents=True)
        (block / module / "__init__.py").write_text(f"raise ImportError('{module} is blocked in this test')\n")
    env = {**os.environ, "PYTHONPATH": f"{block}:{ROOT}"}
    local = script_spec(tmp_path, "print('local task ran', flush=True)\n", tasks="{worker: 1}", watchdog=None)
    run = tfcluster("up", local, "--plain", environ=env, cwd=tmp_path)
    assert run.returncode == 0 and "[worker:0] local task ran" in run.stdout, run.stdout + run.stderr
    ssh = tmp_path / "ssh.yaml"
    ssh.write_text("name: s\nstrategy: multi_worker_mirrored\nbackend: ssh\nentrypoint: tfcluster-worker\n"
                   "hosts: [{name: vm1, ssh: me@vm1}]\ntasks: {worker: {count: 1, hosts: [vm1]}}\n")
    dk = tmp_path / "dk.yaml"
    dk.write_text("name: d\nstrategy: multi_worker_mirrored\nbackend: docker\nentrypoint: tfcluster-worker\n"
                  "tasks: {worker: 2}\n")
    for spec, extra, package in ((ssh, "ssh", "fabric"), (dk, "docker", "docker")):
        for command in ("validate", "plan"):
            assert tfcluster(command, spec, environ=env, cwd=tmp_path).returncode == 0
        up = tfcluster("up", spec, environ=env, cwd=tmp_path)
        assert up.returncode == 1 and up.stderr == (
            f"tfcluster: error: backend {extra} needs the Python package '{package}' (not installed); "
            f"install it with: pip install 'tfcluster[{extra}]'\n"), up.stderr
    assert not (tmp_path / "runs" / "s").exists() and not (tmp_path / "runs" / "d").exists()
