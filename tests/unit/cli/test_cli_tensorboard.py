"""``tfcluster tensorboard FILE``: its one-line errors (no run yet, no logs yet, tensorboard not
installed, port taken or invalid); serving real logs is tested in
tests/integration/test_tensorboard.py."""

from __future__ import annotations

import socket
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.cli.main import main
from launcher.app.up import plan_for
from launcher.record.writer import RunRecord
from launcher.loader.load import load_spec
from tests.support.errors import one_cli_error

SPEC = """\
    name: t
    strategy: multi_worker_mirrored
    entrypoint: python -m worker --epochs 1
    tasks: {worker: 2}
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(SPEC))
    return path


def record_run(spec: Path) -> RunRecord:
    """A real run record (what `tfcluster up` creates before it starts any task)."""
    loaded = load_spec(str(spec))
    record = RunRecord(spec.parent / "runs", plan_for(loaded.spec)).create()
    record.close()
    return record


def test_no_run_yet(spec, capsys):
    assert main(["tensorboard", str(spec)]) == 4  # EXIT_NO_RUN
    line = one_cli_error(capsys.readouterr().err)
    assert "no run of 't' yet" in line and f"tfcluster up {spec}" in line, line


def test_a_run_without_logs_names_the_logdir(spec, capsys):
    record = record_run(spec)
    assert main(["tensorboard", str(spec)]) == 1
    line = one_cli_error(capsys.readouterr().err)
    assert f"no TensorBoard logs in {record.state_dir / 'tensorboard'} yet" in line, line


def test_tensorboard_not_installed(spec, capsys, monkeypatch, tmp_path):
    record = record_run(spec)
    (record.state_dir / "tensorboard" / "train").mkdir(parents=True)
    # An environment without a tensorboard script: none beside this Python, none on PATH.
    bare = tmp_path / "venv" / "bin"
    bare.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bare / "python"))
    monkeypatch.setenv("PATH", str(bare))
    assert main(["tensorboard", str(spec)]) == 1
    line = one_cli_error(capsys.readouterr().err)
    assert "tensorboard is not installed" in line and "pip install tensorboard" in line, line


def test_port_in_use(spec, capsys):
    record = record_run(spec)
    (record.state_dir / "tensorboard" / "train").mkdir(parents=True)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["tensorboard", str(spec), "--port", str(port)]) == 1
    line = one_cli_error(capsys.readouterr().err)
    assert f"--port {port}: the port is in use" in line, line


@pytest.mark.parametrize("port", ["0", "70000", "x"])
def test_bad_port_is_a_usage_error(spec, capsys, port):
    assert main(["tensorboard", str(spec), "--port", port]) == 2
    assert "--port" in one_cli_error(capsys.readouterr().err)


def test_the_tf_extra_and_the_worker_image_install_tensorboard():
    """TF 2.21 does not pull in tensorboard; tf.keras.callbacks.TensorBoard needs it."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tf"]
    assert any(req.split(">")[0].split("=")[0].strip() == "tensorboard" for req in extra), extra
    # The image installs the [tf] extra (requirements.txt, the dependency layer), so it gets tensorboard too.
    from launcher.image import dockerfile_text, requirements

    dockerfile = dockerfile_text()
    assert "pip install -r /tmp/tfcluster-requirements.txt" in dockerfile
    assert "import launcher, worker, tensorboard" in dockerfile
    assert any(req.split(">")[0].split("=")[0].strip() == "tensorboard" for req in requirements()), requirements()
