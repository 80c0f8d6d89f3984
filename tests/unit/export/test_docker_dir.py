"""The top-level docker/ folder: the worker image's one Dockerfile (the package carries it as
launcher/image/Dockerfile, a link to it: the wheel holds the file) and the demo as a compose file,
which ``tfcluster compose`` regenerates from the top-level cluster.yaml byte for byte (on a machine
whose nvidia-smi lists no GPU, as the file says it was made)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from launcher import image
from launcher.cli.main import main
from tests.support.gpus import fake_gpus

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "docker"


def test_the_package_carries_the_one_dockerfile_of_docker():
    packaged = ROOT / "launcher" / "image" / "Dockerfile"
    assert packaged.is_symlink() and packaged.resolve() == (DOCKER / "Dockerfile").resolve()
    assert image.dockerfile_text() == (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    found = [p for top in ("docker", "launcher", "worker") for p in (ROOT / top).rglob("Dockerfile*") if not p.is_symlink()]
    assert found == [DOCKER / "Dockerfile"], found


def test_the_compose_example_is_what_tfcluster_compose_makes_of_the_demo(tmp_path, monkeypatch):
    fake_gpus(monkeypatch, tmp_path, 0)
    work = tmp_path / "checkout"
    (work / "docker").mkdir(parents=True)
    shutil.copy2(ROOT / "cluster.yaml", work / "cluster.yaml")
    monkeypatch.chdir(work)
    assert main(["compose", "cluster.yaml", "-o", os.path.join("docker", "docker-compose.yml")]) == 0
    made = (work / "docker" / "docker-compose.yml").read_text(encoding="utf-8")
    kept = (DOCKER / "docker-compose.yml").read_text(encoding="utf-8")
    assert made == kept, ("docker/docker-compose.yml is not what `tfcluster compose cluster.yaml -o "
                          "docker/docker-compose.yml` makes now (on a machine without GPUs); regenerate it")
    assert "from cluster.yaml" in kept and "worker-1:" in kept  # (the demo's, from the top)


def test_a_stale_compose_example_is_seen(tmp_path, monkeypatch):
    """The comparison can fail: the demo with a third worker makes another file."""
    fake_gpus(monkeypatch, tmp_path, 0)
    (tmp_path / "cluster.yaml").write_text((ROOT / "cluster.yaml").read_text().replace("worker: 2", "worker: 3"))
    monkeypatch.chdir(tmp_path)
    assert main(["compose", "cluster.yaml", "-o", "made.yml"]) == 0
    assert (tmp_path / "made.yml").read_text() != (DOCKER / "docker-compose.yml").read_text()
