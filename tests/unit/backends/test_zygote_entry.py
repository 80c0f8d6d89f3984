"""Which commands the local backend's zygote serves (launcher/backends/zygotes.py), read from the
command and the files it names: a console script pip wrote (``#!PYTHON`` and nothing else) is
asked for as exec runs it, ``[PYTHON, its path, ARGS...]``, so the demo's ``tfcluster-worker`` is
forked from the run's import like ``python -m worker``; other scripts and interpreters are left
as they are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from launcher.backends.zygotes import WORKER_IMPORTS, as_exec, entry


def script(bindir: Path, name: str, first: str) -> Path:
    path = bindir / name
    path.write_text(first + "\nimport sys\nfrom worker.main import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


def test_a_console_script_is_asked_for_as_exec_runs_it(tmp_path):
    worker = script(tmp_path, "tfcluster-worker", f"#!{sys.executable}")
    env = {"PATH": f"{tmp_path}{os.pathsep}/usr/bin"}
    command = as_exec(["tfcluster-worker", "--epochs", "3"], env)
    assert command == [sys.executable, str(worker), "--epochs", "3"]
    assert entry(command, tmp_path) == ([sys.executable], WORKER_IMPORTS)
    assert as_exec([str(worker), "-x"], {}) == [sys.executable, str(worker), "-x"]  # a path: no PATH lookup


def test_what_exec_would_not_run_so_is_left_as_it_is(tmp_path):
    env = {"PATH": str(tmp_path)}
    script(tmp_path, "with-option", f"#!{sys.executable} -u")  # an option: its interpreter's argv differs
    script(tmp_path, "via-env", "#!/usr/bin/env python3")
    script(tmp_path, "shell", "#!/bin/sh")
    (tmp_path / "binary").write_bytes(b"\x7fELF\x02\x01")
    for name in ("with-option", "via-env", "shell", "binary", "missing"):
        assert as_exec([name, "a"], env) == [name, "a"], name
    assert as_exec([sys.executable, "-m", "worker"], env) == [sys.executable, "-m", "worker"]
    assert entry([sys.executable, "-m", "worker"], tmp_path) == ([sys.executable], WORKER_IMPORTS)
    # A console script of one's own is a script like any other: served only where it names TensorFlow.
    own = script(tmp_path, "my-train", f"#!{sys.executable}")
    assert entry(as_exec(["my-train"], env), tmp_path) is None and as_exec(["my-train"], env)[1] == str(own)


def test_a_scripts_own_tensorflow_family_imports_are_the_zygotes_too(tmp_path):
    (tmp_path / "train.py").write_text("import tensorflow as tf\nimport tf_keras\n")
    (tmp_path / "late.py").write_text("import os\nimport tensorflow as tf\nos.environ['KERAS_HOME'] = '/k'\nimport tf_keras\n")
    stub = [sys.executable, "-c", "STUB"]
    assert entry([*stub, "train.py", "--epochs", "3"], tmp_path) == ([sys.executable], ("tensorflow", "tf_keras"))
    assert entry([*stub, "late.py"], tmp_path) == ([sys.executable], ("tensorflow",))
