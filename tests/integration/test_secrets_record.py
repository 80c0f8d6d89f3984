"""A run's record holds no secret value: the variables ``is_secret`` picks out by name or by
value reach the task as they are, and nowhere else tfcluster writes or prints (plan text,
``plan --json``, plan.json, events, the detached supervisor's log, status and its report)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import tfcluster
from tests.support.specs import local_spec, script_spec
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = pytest.mark.integration

SECRETS = {
    "DATABASE_URL": "postgres://app:pw0rdZ9q@db.example:5432/app",  # a secret by its value only
    "GITHUB_PAT": "ghp_" + "Zq7" * 12,
    "HF_AUTH": "hf_" + "Vx4" * 11,
    "SETTING": "sk-" + "Kp2" * 10,  # by its value only
}


def secret_spec(tmp_path: Path) -> Path:
    env = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in SECRETS.items())
    return script_spec(tmp_path, f"""\
        import os
        want = {SECRETS!r}
        print("task env intact:", all(os.environ[k] == v for k, v in want.items()), flush=True)
    """, extra="env:\n" + env)


def leaks(root: Path) -> list[str]:
    """Every file under ``root`` that holds a secret's value, with the variable."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {k}" for k, v in SECRETS.items() if v.encode() in data]
    return found


def test_no_secret_value_in_plan_record_or_views(tmp_path):
    path = secret_spec(tmp_path)
    for args in (("plan",), ("plan", "--json"), ("plan", "--json=compact"), ("up", "--dry-run")):
        res = tfcluster(*args[:1], path, *args[1:])
        assert res.returncode == 0, res.stderr
        shown = res.stdout + res.stderr
        assert not [k for k, v in SECRETS.items() if v in shown], (args, shown)
        assert "DATABASE_URL" in shown and "***" in shown
    shown = tfcluster("plan", path, "--json", "--show-secrets").stdout
    assert all(v in shown for v in SECRETS.values())  # asked for: shown

    res = tfcluster("up", path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "task env intact: True" in res.stdout
    res = tfcluster("up", path, "--detach", timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    latest = tmp_path / "runs" / "t" / "latest"
    wait_for(lambda: any(isinstance(e, ev.RunOutcome) for e in read_records(latest)), 60,
             what="the detached run's outcome")
    logs = (latest / "logs" / "worker-0.log").read_text()
    assert "task env intact: True" in logs
    views = [tfcluster("status", path), tfcluster("status", path, "--json"), tfcluster("runs", path)]
    assert all(v.returncode == 0 for v in views), [v.stderr for v in views]
    shown = "".join(v.stdout + v.stderr for v in views)
    assert not [k for k, v in SECRETS.items() if v in shown]
    assert leaks(tmp_path / "runs") == []


# Secrets in the entrypoint's arguments, in each spelling the rule knows, and plain ones beside them.
ARG_SECRETS = {"hub": "hf_" + "Wm3" * 11, "db": "hunter2Xq", "key": "sk-" + "Rt5" * 10, "pw": "Pa55Word7"}
ARGS = ["--hub-token", ARG_SECRETS["hub"], f"--db=postgres://bob:{ARG_SECRETS['db']}@db.example/app",
        f"api_key={ARG_SECRETS['key']}", f"--password={ARG_SECRETS['pw']}",
        "--epochs", "3", "--max-tokens", "512", "--data", "/data/train"]


def test_no_secret_argument_in_plan_record_or_views_and_the_task_has_them(tmp_path):
    """The command's secret arguments are masked wherever tfcluster shows or keeps the command
    (plan text and JSON, plan.json, status, the report, the detached supervisor's log); the plain
    ones beside them are shown; ``validate`` and ``plan`` warn in one line; the task gets them all."""
    path = local_spec(tmp_path, json.dumps([sys.executable, "task.py", *ARGS]), watchdog="{stop_grace: 1}")
    (tmp_path / "task.py").write_text(f"import sys\nprint('task args intact:', sys.argv[1:] == {ARGS!r}, flush=True)\n")
    for args in (("validate",), ("plan",), ("plan", "--json"), ("plan", "--json=compact"), ("up", "--dry-run")):
        res = tfcluster(*args[:1], path, *args[1:])
        assert res.returncode == 0, res.stderr
        shown = res.stdout + res.stderr
        assert not [k for k, v in ARG_SECRETS.items() if v in shown], (args, shown)
        if args[0] in ("validate", "plan"):
            warned = [line for line in res.stderr.splitlines() if "visible" in line or "`ps`" in line]
            assert len(warned) == 1 and "fix: pass it in env" in warned[0], res.stderr
        if args[0] != "validate":
            assert "--epochs" in shown and "/data/train" in shown and "512" in shown and "***" in shown, shown
            assert "postgres://bob:***@db.example/app" in shown, shown
    shown = tfcluster("plan", path, "--json", "--show-secrets").stdout
    assert all(v in shown for v in ARG_SECRETS.values())  # asked for: shown

    res = tfcluster("up", path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("task args intact: True") == 2, res.stdout
    assert not [k for k, v in ARG_SECRETS.items() if v in res.stdout + res.stderr]
    res = tfcluster("up", path, "--detach", timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    latest = tmp_path / "runs" / "t" / "latest"
    wait_for(lambda: any(isinstance(e, ev.RunOutcome) for e in read_records(latest)), 60,
             what="the detached run's outcome")
    views = [tfcluster("status", path), tfcluster("status", path, "--json"), tfcluster("runs", path)]
    assert all(v.returncode == 0 for v in views), [v.stderr for v in views]
    assert not [k for k, v in ARG_SECRETS.items() if v in "".join(v.stdout + v.stderr for v in views)]
    plan = json.loads((latest / "plan.json").read_text())
    assert plan["command"][2:] == ["--hub-token", "***", "--db=postgres://bob:***@db.example/app", "api_key=***",
                                   "--password=***", "--epochs", "3", "--max-tokens", "512", "--data", "/data/train"]
    found = [str(p) for p in (tmp_path / "runs").rglob("*") if p.is_file() and not p.is_symlink()
             and any(v.encode() in p.read_bytes() for v in ARG_SECRETS.values())]
    assert found == []
