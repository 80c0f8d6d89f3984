"""The package as a user installs it: the wheel built from this checkout, installed into a fresh
virtualenv, runs the demo from a directory that has its own ``worker.py`` (and ``launcher.py``),
and the reference worker runs, not the user's file."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.cli import ROOT
from tests.support.ports import free_base

pytestmark = [pytest.mark.integration, pytest.mark.tf]

USER_WORKER = "print('USER-WORKER-PY-RAN', flush=True)\n"
USER_LAUNCHER = "print('USER-LAUNCHER-PY-RAN', flush=True)\n"


def _run(argv: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_in_a_fresh_virtualenv_runs_the_demo_beside_a_users_worker_py(tmp_path, tfds_dir):
    # 1) The wheel, built from a copy of the sources (a build writes build/ and *.egg-info beside them).
    src = tmp_path / "src"
    for name in ("launcher", "worker"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", wheels, src], tmp_path, os.environ)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = wheels.glob("tfcluster-*.whl")
    import launcher

    assert wheel.name.startswith(f"tfcluster-{launcher.__version__}-")  # (the version written once)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = zf.read(metadata).decode()
        entry_points = zf.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert "License: Apache-2.0" in meta and "Classifier: License :: OSI Approved :: Apache Software License" in meta
    assert any(n.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in n for n in names), names
    assert "tfcluster-worker = worker.main:main_entry" in entry_points, entry_points

    # 2) A fresh virtualenv that sees this interpreter's packages (TensorFlow is not reinstalled):
    # --system-site-packages, plus this interpreter's own site-packages when it is itself a virtualenv.
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", venv], tmp_path, os.environ)
    assert made.returncode == 0, made.stderr
    python, bindir = venv / "bin" / "python", venv / "bin"
    [venv_site] = (venv / "lib").glob("python3*/site-packages")
    (venv_site / "zz_test_host_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TFCLUSTER_FILE", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    installed = _run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel], tmp_path, env)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    where = _run([python, "-c", "import launcher, worker; print(launcher.__file__); print(worker.__file__)"],
                 tmp_path, env)
    assert where.returncode == 0, where.stderr
    assert [Path(p).parent.parent for p in where.stdout.split()] == [venv_site, venv_site], where.stdout
    assert (bindir / "tfcluster").is_file() and (bindir / "tfcluster-worker").is_file()

    # 3) A user's project with its own worker.py and launcher.py, and the demo, short, on free ports.
    user = tmp_path / "project"
    user.mkdir()
    (user / "worker.py").write_text(USER_WORKER)
    (user / "launcher.py").write_text(USER_LAUNCHER)
    demo = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert demo["entrypoint"].split()[0] == "tfcluster-worker"
    demo["entrypoint"] = "tfcluster-worker --epochs 1 --steps-per-epoch 5"
    demo["ports"] = {"base": free_base()}
    demo["env"] = {**demo.get("env", {}), "TFDS_DATA_DIR": str(tfds_dir)}
    (user / "cluster.yaml").write_text(yaml.safe_dump(demo))

    plan = _run([bindir / "tfcluster", "plan", "--json"], user, env)
    assert plan.returncode == 0, plan.stderr
    assert [t["command"][0] for t in json.loads(plan.stdout)["tasks"]] == ["tfcluster-worker"] * 2
    assert "warning" not in plan.stderr

    up = _run([bindir / "tfcluster", "up", "--plain", "--verbose"], user, env, timeout=600)  # (verbose: the results)
    out = up.stdout + up.stderr
    assert up.returncode == 0, out[-4000:]
    assert "USER-WORKER-PY-RAN" not in out and "USER-LAUNCHER-PY-RAN" not in out
    for key in ("worker:0", "worker:1"):  # the reference worker's own lines, from each task
        assert f"[{key}] worker: {key} strategy=multi_worker_mirrored" in up.stdout, up.stdout[-3000:]
        assert f"[{key}] tfcluster-result task={key} " in up.stdout
    # The console script forked from the run's zygote (launcher/backends/zygotes.py as_exec), its
    # worker the wheel's: the user's worker.py beside the spec never ran (above).
    (log,) = {p.resolve() for p in (user / "runs" / "demo").glob("*/zygote.log")}  # (the run's dir and `latest`)
    assert "tfcluster-zygote ready" in log.read_text() and "started without the zygote" not in out, out[-3000:]

    # The same file under `python -m worker` would have been the user's: validate says so.
    demo["entrypoint"] = "python -m worker --epochs 1"
    (user / "cluster.yaml").write_text(yaml.safe_dump(demo))
    check = _run([bindir / "tfcluster", "validate"], user, env)
    assert check.returncode == 0 and textwrap.shorten(check.stderr, 200).startswith(
        f"tfcluster: warning: entrypoint: `python -m worker` would run {user / 'worker.py'}"), check.stderr
