"""launcher/contract/kerasalias.py in a fresh interpreter, with stand-in ``keras`` (Keras 3) and
``tf_keras`` packages on its path and no site-packages (the real ones are tried by tests/integration/test_keras_scripts.py):
``import keras`` and every ``keras.X`` are tf_keras's own module objects, the one line is said once,
a Keras 3 imported before is dropped, a name tf_keras lacks fails naming it, and without tf_keras
the warning is said and Keras 3 imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from launcher.contract import kerasalias

PROBE = """\
import json, sys
sys.path.insert(0, {root!r})
{before}
exec(open({alias!r}).read())
said = []
install_keras_alias("multi_worker_mirrored", said.append)
install_keras_alias("multi_worker_mirrored", said.append)  # twice: one finder
import keras
import keras.layers
from keras.layers import Dense
import tf_keras, tf_keras.layers
out = {{"keras": keras.__name__, "same": keras is tf_keras and keras.layers is tf_keras.layers,
        "dense": Dense is tf_keras.layers.Dense, "spec": tf_keras.layers.__spec__.name, "said": said,
        "finders": sum(type(f).__name__ == "KerasAlias" for f in sys.meta_path)}}
try:
    import keras.ops
except ModuleNotFoundError as exc:
    out["missing"] = str(exc)
print(json.dumps(out))
"""


def _packages(root: Path, tf_keras: bool = True) -> None:
    for name in (["tf_keras", "tf_keras/layers"] if tf_keras else []) + ["keras", "keras/ops"]:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("Dense = object()\n" if name.endswith("layers") else "")


def _run(root: Path, before: str = "") -> dict:
    code = PROBE.format(root=str(root), before=before, alias=kerasalias.__file__)
    out = subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_import_keras_is_tf_keras_with_one_line(tmp_path):
    _packages(tmp_path)
    got = _run(tmp_path)
    assert got["keras"] == "tf_keras" and got["same"] and got["dense"], got
    assert got["spec"] == "tf_keras.layers"  # its own spec kept, not the alias's
    assert got["finders"] == 1
    assert got["said"] == [kerasalias.KERAS_NOTE.format(why="multi_worker_mirrored: Keras 3 model.fit cannot "
                                                            "train under it")]
    assert got["missing"] == "No module named 'keras.ops' (tf_keras, which is keras here, has no 'tf_keras.ops')"


def test_a_keras3_imported_before_is_dropped(tmp_path):
    _packages(tmp_path)
    got = _run(tmp_path, before="import keras, keras.ops")
    assert got["keras"] == "tf_keras" and got["same"], got


def test_without_tf_keras_keras3_is_imported_with_a_warning(tmp_path):
    _packages(tmp_path, tf_keras=False)
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); exec(open({kerasalias.__file__!r}).read()); "
            "said = []; install_keras_alias('parameter_server', said.append); import keras, keras.ops; "
            "print(keras.__name__); print(said[0])")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    name, line = out.stdout.splitlines()
    assert name == "keras" and line == kerasalias.NO_TF_KERAS.format(strategy="parameter_server")
