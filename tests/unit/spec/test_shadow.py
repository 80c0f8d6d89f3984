"""The reference worker is unambiguous: the ``tfcluster-worker`` script, and a one-line warning from
``validate``/``up`` when ``python -m worker``/``python -m launcher`` would import a file of that name
from the task's working directory instead of tfcluster's own (launcher/loader/shadow.py)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.loader.shadow import module_of
from tests.support.cli import ROOT, tfcluster
from tests.support.specs import local_spec


def _spec(directory: Path, entrypoint: str, workdir: str = ".", backend: str = "local") -> Path:
    return local_spec(directory, entrypoint, extra=f"backend: {backend}\nworkdir: {workdir}\n")


def _warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("tfcluster: warning:")]


@pytest.mark.parametrize("command, module", [
    ("python -m worker --epochs 3", "worker"),
    ("/opt/venv/bin/python3.11 -u -mworker", "worker"),
    ("python3 -X dev -m launcher up", "launcher"),
    ("python train.py -m worker", None),  # a script: its own -m is its argument
    ("python -c 'import worker'", None),
    ("tfcluster-worker --epochs 3", None),
    ("sh -c 'python -m worker'", None),
])
def test_module_of(command, module):
    assert module_of(shlex.split(command)) == module


def test_a_worker_py_beside_the_spec_is_warned_about_in_one_line(tmp_path):
    (tmp_path / "worker.py").write_text("print('not the reference worker')\n")
    path = _spec(tmp_path, "python -m worker --epochs 1")
    res = tfcluster("validate", path)
    assert res.returncode == 0 and res.stdout == f"{path}: ok (multi_worker_mirrored, 2 tasks on local)\n"
    assert _warnings(res) == [
        f"tfcluster: warning: entrypoint: `python -m worker` would run {tmp_path / 'worker.py'} (the task's "
        "directory comes first on sys.path), not tfcluster's worker; use the `tfcluster-worker` command "
        "instead, or rename that file"]
    dry = tfcluster("up", path, "--dry-run")  # up says it too, before anything starts
    assert dry.returncode == 0 and len(_warnings(dry)) == 1 and str(tmp_path / "worker.py") in _warnings(dry)[0]


def test_a_package_or_launcher_py_in_the_workdir_is_warned_about(tmp_path):
    (tmp_path / "src" / "worker").mkdir(parents=True)
    (tmp_path / "src" / "worker" / "__init__.py").write_text("")
    res = tfcluster("validate", _spec(tmp_path, "python3 -m worker", workdir="src"))
    assert [str(tmp_path / "src" / "worker" / "__init__.py") in w for w in _warnings(res)] == [True]
    (tmp_path / "launcher.py").write_text("")
    res = tfcluster("validate", _spec(tmp_path, "python -m launcher --help"))
    assert len(_warnings(res)) == 1 and "`python -m launcher` would run" in res.stderr and "`tfcluster` command" in res.stderr


def test_no_warning_for_the_script_an_empty_dir_or_tfclusters_own_checkout(tmp_path):
    (tmp_path / "worker.py").write_text("")
    assert _warnings(tfcluster("validate", _spec(tmp_path, "tfcluster-worker --epochs 1"))) == []
    (tmp_path / "worker.py").unlink()
    assert _warnings(tfcluster("validate", _spec(tmp_path, "python -m worker"))) == []
    # The repository's own worker/ is the reference worker (examples run from the checkout root).
    assert _warnings(tfcluster("validate", _spec(tmp_path, "python -m worker", workdir=str(ROOT)))) == []
    # docker runs tasks in the image's directory, not this one: nothing to say from here
    (tmp_path / "worker.py").write_text("")
    assert _warnings(tfcluster("validate", _spec(tmp_path, "python -m worker", backend="docker"))) == []


def test_the_console_script_is_declared_and_runs_the_reference_worker():
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+; the rest of the test runs anywhere)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["tfcluster-worker"] == "worker.main:main_entry"
    from worker.main import main_entry  # noqa: F401 (the target exists)

    script = shutil.which("tfcluster-worker", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                                    os.environ.get("PATH", "")]))
    assert script, ("tfcluster-worker is not installed beside this Python: reinstall the project "
                    "(pip install -e .) so its console scripts are created")
    res = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("usage: tfcluster-worker "), res.stdout + res.stderr
    assert "--epochs" in res.stdout
    legacy = subprocess.run([sys.executable, "-m", "worker", "--help"], capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert legacy.returncode == 0 and legacy.stdout.startswith("usage: python -m worker "), legacy.stderr


@pytest.mark.parametrize("argv0, fix", [
    ("tfcluster-worker", "install tfcluster there for /opt/venv/bin/python (pip install 'tfcluster[tf]'), or, with "
                         "the project uploaded by ssh.sync, use `python -m worker`"),
    ("train", "install it there or give its full path"),
])
def test_ssh_preflight_says_how_to_get_the_worker_script_onto_a_host(argv0, fix):
    from types import SimpleNamespace

    from launcher.backends.ssh.probe import _judge

    pool = SimpleNamespace(hosts={"vm1": SimpleNamespace(python="/opt/venv/bin/python")})
    plan = SimpleNamespace(tasks=[SimpleNamespace(command=(argv0, "--epochs", "1"), host="vm1", port=1, key="worker:0")])
    reply = {"python": "3.11.4", "workdir": "/home/me", "argv0_found": False, "deps": {}, "ports": {}}
    assert [(p.kind.name, p.host, p.text) for p in _judge(pool, plan, ["vm1"], {"vm1": reply})] == [
        ("OTHER", "vm1", f"host vm1: entrypoint command '{argv0}' not found on PATH; {fix}")]
