"""The worker image without a checkout: tfcluster installed from its wheel (nothing of the checkout
on the path, the spec in an empty directory) builds its worker image from the Dockerfile the wheel
ships (``backend: docker`` with a ``docker.build`` that names no context) and runs a two-worker
cluster in it; ``tfcluster image print`` writes the same build context for docker compose users."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.labs import docker as eng
from tests.support.cli import tfcluster
from tests.support.docker_helpers import leftovers
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1800)]

REPO = eng.REPO
PY = sys.executable
TAG = "tfcluster-test-worker:from-wheel"
CLI_TAG = "tfcluster-test-worker:from-wheel-cli"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """tfcluster's wheel, built from the checkout and installed (--target) in a directory of its own:
    the environment that runs it from there, with nothing of the checkout on the path."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist, site = tmp / "dist", tmp / "site"
    subprocess.run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)],
                   check=True, timeout=600, capture_output=True)
    (wheel,) = dist.glob("tfcluster-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "launcher/image/Dockerfile" in names and "launcher/image/__init__.py" in names, names
    subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                   check=True, timeout=600, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # (before the test venv's editable install of the checkout)
    return env


def _tfcluster(env: dict[str, str], cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return tfcluster(*args, cwd=cwd, environ=env, timeout=timeout)


def test_the_installed_wheel_is_what_runs(installed, tmp_path):
    out = subprocess.run([PY, "-c", "import launcher, worker; print(launcher.__file__); print(worker.__file__)"],
                         cwd=tmp_path, env=installed, capture_output=True, text=True, check=True).stdout
    assert all(line.startswith(installed["PYTHONPATH"]) for line in out.split()), out
    assert str(REPO) not in out


def test_image_print_writes_the_build_context(installed, tmp_path):
    result = _tfcluster(installed, tmp_path, "image", "print")
    assert result.returncode == 0, result.stderr
    assert "COPY src /src" in result.stdout and "FROM ${BASE_IMAGE}" in result.stdout
    result = _tfcluster(installed, tmp_path, "image", "print", "--context", "ctx")
    assert result.returncode == 0, result.stderr
    ctx = tmp_path / "ctx"
    assert (ctx / "Dockerfile").read_text() == _tfcluster(installed, tmp_path, "image", "print").stdout
    assert "tensorflow" in (ctx / "requirements.txt").read_text()
    assert (ctx / "src" / "launcher" / "image" / "Dockerfile").is_file()
    assert (ctx / "src" / "worker" / "main.py").is_file()
    assert not list(ctx.rglob("__pycache__"))


def test_a_wheel_install_builds_the_worker_image_and_runs_two_workers(installed, tmp_path, docker_engine, base_image,
                                                                       wheelhouse_url):
    args = eng.build_args(wheelhouse_url)
    user = tmp_path / "project"
    user.mkdir()
    spec = user / "cluster.yaml"
    spec.write_text(
        "name: wheel\n"
        "strategy: multi_worker_mirrored\n"
        "backend: docker\n"
        "entrypoint: tfcluster-worker --epochs 1 --steps-per-epoch 10 --batch-size 16 --progress-every 5\n"
        "tasks: {worker: 2}\n"
        "env: {TF_CPP_MIN_LOG_LEVEL: '2'}\n"
        "watchdog: {startup_timeout: 240, stop_grace: 3}\n"
        f"docker:\n  image: {TAG}\n  engine: {docker_engine.url}\n"
        f"  build:\n    network: host\n    base_image: {args['BASE_IMAGE']}\n"
        f"    args: {{PIP_NO_INDEX: '1', PIP_FIND_LINKS: '{args['PIP_FIND_LINKS']}'}}\n")
    client = docker_engine.client()
    try:
        result = _tfcluster(installed, user, "up", "cluster.yaml", "--verbose", timeout=1500)  # (verbose: the results)
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-6000:]
        assert f"built image {TAG}" in out and "worker Dockerfile (the installed package)" in out, out[-3000:]
        # Its dependency layer (TensorFlow: 140 s to install here) came from the cache: the session's
        # worker image, built from the checkout, has the same requirements.txt, whichever setuptools
        # wrote each install's metadata (launcher/image/'s canonical). (The Dockerfile's promise: a
        # tfcluster of the same requirements does not reinstall TensorFlow.)
        assert not re.search(r"build: Successfully installed .*\btensorflow-\d", out), out[-3000:]
        assert "run succeeded after 1 attempt(s)" in out
        results = re.findall(r"tfcluster-result task=(worker:\d) epochs=1 ", out)
        assert set(results) == {"worker:0", "worker:1"}, out[-4000:]
        image = client.images.get(TAG).attrs["Config"]
        assert image["User"] and not image["User"].startswith("0")  # non-root: the Dockerfile's USER
        assert (image.get("Labels") or {}).get("tfcluster.lifeline")
        assert leftovers(docker_engine, "wheel") == ([], [])
        events = read_records(next((user / "runs" / "wheel").glob("*/events.jsonl")).parent)
        assert {e["task"] for e in events if isinstance(e, ev.Ready)} == {"worker:0", "worker:1"}
        assert sorted(p.name for p in user.iterdir()) == ["cluster.yaml", "runs"]  # nothing of a checkout made
        # `tfcluster image build` (compose users: the docker CLI) builds the same image (its layers cached)
        classic = {**installed, "DOCKER_BUILDKIT": "0"}  # (the engine API's builder: its layer cache is shared)
        built = _tfcluster(classic, user, "image", "build", "-t", CLI_TAG, "--engine", docker_engine.url,
                           "--base-image", args["BASE_IMAGE"], "--network", "host", "--build-arg", "PIP_NO_INDEX=1",
                           "--build-arg", f"PIP_FIND_LINKS={args['PIP_FIND_LINKS']}", timeout=1500)
        assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
        assert f"built {CLI_TAG}" in built.stderr
        config = client.images.get(CLI_TAG).attrs["Config"]
        assert (config["User"], config["Labels"], config["Cmd"]) == (image["User"], image["Labels"], image["Cmd"])
    finally:
        for tag in (TAG, CLI_TAG):
            try:
                client.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001 - not built: nothing to remove
                pass
        client.close()
