"""The entrypoint's script read before any task starts (launcher/loader/scriptread.py, scriptcheck.py):
what only Keras 3 has, another Keras backend and a TF_CONFIG of its own are refused in one line
naming the file and line with the fix; what maps to tf_keras, a guarded TF_CONFIG and an edit of the
given one pass; ``keras: 3`` and the single-host strategies change what is judged. Real specs through
the real loader and the CLI (``validate``, ``plan``, ``validate --json``)."""

from __future__ import annotations

import json
import textwrap

import pytest

from launcher.loader.load import load_spec
from launcher.loader.scriptcheck import problems, script_word
from launcher.loader.scriptread import first_tf_call, read_source
from tests.support.cli import tfcluster
from tests.support.specs import local_spec

MAPPED = """\
import os
import keras
from keras import layers
import tensorflow as tf
from tensorflow import keras as tk

if "TF_CONFIG" not in os.environ:  # a tutorial's own cluster, only where no launcher gave one
    os.environ["TF_CONFIG"] = '{"cluster": {"worker": ["localhost:12345"]}}'
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.MeanSquaredError(),
                  metrics=[keras.metrics.MeanAbsoluteError()])
callbacks = [keras.callbacks.ModelCheckpoint("ckpt"), tk.callbacks.TensorBoard("logs")]
keras.utils.set_random_seed(1)
"""

KERAS3 = """\
import os
import keras
from keras import ops
import tensorflow as tf

class Block(keras.Layer):
    def call(self, x):
        return ops.mean(keras.random.normal((2,)) + x)

y = tf.keras.ops.sum(1.0)
"""


def _spec(tmp_path, script: str, *, strategy: str = "multi_worker_mirrored", extra: str = "", env=None,
          name: str = "train.py"):
    (tmp_path / name).write_text(textwrap.dedent(script))
    tasks = "{worker: 2}" if strategy in ("multi_worker_mirrored",) else "{worker: 1}"
    if strategy == "parameter_server":
        tasks = "{chief: 1, worker: 1, ps: 1}"
    return local_spec(tmp_path, f"python {name} --epochs 1", strategy=strategy, tasks=tasks, extra=extra, env=env)


def _messages(path) -> list[str]:
    return [m for _, m in problems(load_spec(path))]


def test_what_maps_to_tf_keras_passes_and_a_guarded_tf_config_is_left_alone(tmp_path):
    assert _messages(_spec(tmp_path, MAPPED)) == []


def test_each_keras3_use_is_named_with_its_line_and_fix(tmp_path):
    found = _messages(_spec(tmp_path, KERAS3))
    assert [m.split(" uses ", 1)[0] for m in found] == ["train.py:3", "train.py:6", "train.py:8", "train.py:8",
                                                        "train.py:10"]
    assert [m.split(" uses ", 1)[1].split(",", 1)[0] for m in found] == [
        "keras.ops", "keras.Layer", "keras.random", "ops", "tf.keras.ops"]
    assert "use keras.layers.Layer" in found[1] and "tf.random" in found[2] and "tf.reduce_mean" in found[3]
    assert all("only Keras 3 has" in m and "`keras: 3`" in m and "tf_keras" in m for m in found)


def test_keras3_is_judged_only_where_import_keras_is_tf_keras(tmp_path):
    assert _messages(_spec(tmp_path, KERAS3, extra="keras: 3\n")) == []  # kept: the user's choice
    assert _messages(_spec(tmp_path, KERAS3, strategy="mirrored")) == []  # Keras 3 runs under it
    assert len(_messages(_spec(tmp_path, KERAS3, strategy="mirrored", extra="keras: 2\n"))) == 5
    assert len(_messages(_spec(tmp_path, KERAS3, strategy="parameter_server"))) == 5
    # The spec's env asking for Keras 3 keeps it, as keras: 3 does.
    assert _messages(_spec(tmp_path, KERAS3, env={"TF_USE_LEGACY_KERAS": '"0"'})) == []


def test_another_keras_backend_is_refused_in_the_script_and_in_the_spec(tmp_path):
    script = 'import os\nos.environ["KERAS_BACKEND"] = "jax"\nos.environ.setdefault("KERAS_BACKEND", "tensorflow")\n'
    found = _messages(_spec(tmp_path, script))
    assert len(found) == 1 and found[0].startswith("train.py:2 sets KERAS_BACKEND=jax:"), found
    spec_env = problems(load_spec(_spec(tmp_path, "print(1)\n", env={"KERAS_BACKEND": "torch"})))
    assert spec_env[0][0] == ("env", "KERAS_BACKEND") and spec_env[0][1].startswith("torch: "), spec_env


def test_packages_built_on_keras3_alone_are_named(tmp_path):
    found = _messages(_spec(tmp_path, "import keras_hub\nfrom keras_nlp.models import Bert\n"))
    assert [m.split(" uses ")[0:2] for m in found] == [["train.py:1", "import keras_hub, which only Keras 3 has: "
                                                         + found[0].split(" has: ", 1)[1]],
                                                        ["train.py:2", found[1].split(" uses ", 1)[1]]]


def test_a_module_beside_the_script_is_read_too(tmp_path):
    (tmp_path / "model.py").write_text("import keras\n\ndef build():\n    return keras.ops.ones((1,))\n")
    found = _messages(_spec(tmp_path, "import model\nmodel.build()\n"))
    assert len(found) == 1 and found[0].startswith("model.py:4 uses keras.ops"), found


@pytest.mark.parametrize("line, shown", [
    ('os.environ["TF_CONFIG"] = json.dumps(tf_config)', 'os.environ["TF_CONFIG"] = ...'),
    ('os.environ.update({"TF_CONFIG": "{}"})', "os.environ.update(...)"),
    ('os.environ.update(TF_CONFIG="{}")', "os.environ.update(...)"),
    ('del os.environ["TF_CONFIG"]', 'del os.environ["TF_CONFIG"]'),
    ('environ.pop("TF_CONFIG")', "os.environ.pop(...)"),
])
def test_a_script_that_writes_tf_config_itself_is_refused_with_its_line(tmp_path, line, shown):
    script = f"import json, os\nfrom os import environ\ntf_config = {{}}\n{line}\nimport tensorflow as tf\n"
    found = _messages(_spec(tmp_path, script))
    assert len(found) == 1, found
    assert found[0].startswith(f"train.py:4 sets TF_CONFIG itself ({shown}) over the one tfcluster gives each task")
    assert 'guard it with `if "TF_CONFIG" not in os.environ:`' in found[0]
    # A single-host strategy has no cluster for it to replace.
    assert _messages(_spec(tmp_path, script, strategy="mirrored")) == []


def test_an_edit_of_the_given_tf_config_is_left_alone(tmp_path):
    script = ('import json, os\nconfig = json.loads(os.environ["TF_CONFIG"])\nconfig["task"]["index"] += 0\n'
              'os.environ["TF_CONFIG"] = json.dumps(config)\n')
    assert _messages(_spec(tmp_path, script)) == []


def test_the_cli_refuses_in_validate_plan_and_json_with_the_spec_line(tmp_path):
    spec = _spec(tmp_path, 'import os\nos.environ["TF_CONFIG"] = "{}"\n')
    for args in (("validate", spec), ("plan", spec)):
        result = tfcluster(*args)
        assert result.returncode == 2, result.stderr
        line = [x for x in result.stderr.splitlines() if "TF_CONFIG itself" in x]
        assert len(line) == 1 and line[0].startswith(f"tfcluster: error: {spec}:3: train.py:2 sets TF_CONFIG"), \
            result.stderr
    out = tfcluster("validate", "--json", spec)
    doc = json.loads(out.stdout)
    assert out.returncode == 2 and doc["valid"] is False and "train.py:2 sets TF_CONFIG" in doc["errors"][0]


def test_plan_says_what_import_keras_is(tmp_path):
    out = tfcluster("plan", _spec(tmp_path, MAPPED)).stdout
    assert [x for x in out.splitlines() if x.startswith("keras: ")] == [
        "keras: `import keras` and tf.keras are tf_keras in a Python script's tasks (multi_worker_mirrored: "
        "Keras 3 model.fit cannot train under it); a script that uses what only Keras 3 has is refused; "
        "`keras: 3` keeps Keras 3"]
    assert "TFCLUSTER_KERAS=tf_keras" in out and "TF_USE_LEGACY_KERAS=1" in out
    kept = tfcluster("plan", _spec(tmp_path, MAPPED, extra="keras: 3\n")).stdout
    assert "TFCLUSTER_KERAS" not in kept and "TF_USE_LEGACY_KERAS=" not in kept
    assert "keras: Keras 3 kept" in kept


@pytest.mark.parametrize("argv, script", [
    (["python", "train.py"], "train.py"), (["python3", "-u", "-X", "dev", "t.py", "-m"], "t.py"),
    (["python", "-m", "pkg"], None), (["python", "-c", "x"], None), (["python", "-m", "worker"], None),
    (["bash", "run.sh"], None),
])
def test_script_word(argv, script):
    assert script_word(argv) == script


def test_first_tf_call_before_the_strategy():
    text = ("import tensorflow as tf\n"
            "tf.config.experimental.set_memory_growth(None, True)\n"  # does not start the runtime: passed over
            "def helper():\n    return tf.constant(1)\n"  # another function's call
            "print(tf.config.list_logical_devices())\n"
            "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n")
    assert first_tf_call(text, 6) == (5, "tf.config.list_logical_devices")
    assert first_tf_call(text, 5) is None
    inside = "import tensorflow\ndef main():\n    x = tensorflow.zeros(3)\n    s = tensorflow.distribute.MultiWorkerMirroredStrategy()\n"
    assert first_tf_call(inside, 4) == (3, "tensorflow.zeros")
    assert first_tf_call("not python (", 3) is None


def test_a_script_that_does_not_parse_says_nothing():
    facts = read_source("import keras\nkeras.ops.mean(\n")
    assert facts.keras3 == [] and facts.tf_config == []


def test_a_fifo_planted_as_the_script_or_a_module_beside_it_is_never_waited_on(tmp_path):
    import os

    from launcher.loader.scriptcheck import _read, entry_source

    spec = _spec(tmp_path, "import model\n")
    os.mkfifo(tmp_path / "model.py")
    assert _messages(spec) == []  # (a read of it would block: nothing is read)
    os.mkfifo(tmp_path / "other.py")
    assert _read(tmp_path / "other.py") is None
    assert entry_source(["python", "other.py"], str(tmp_path / "other.py")) is None
    # A traceback's path is read only where it is the entrypoint's script (same name, a regular file).
    assert entry_source(["python", "train.py"], str(tmp_path / "model.py")) is None
    assert entry_source(["python", "train.py"], str(tmp_path / "train.py")) == "import model\n"
