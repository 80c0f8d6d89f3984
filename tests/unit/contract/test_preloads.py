"""Which of a script's imports its host's zygote imports ahead (launcher/contract/preloads.py):
only TensorFlow's family, only where nothing before the import could change what it imports."""

from __future__ import annotations

import pytest

from launcher.contract.preloads import script_preloads

PLAIN = '''"""A user's script."""
import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow_datasets import load
'''


def write(tmp_path, text: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


def test_the_family_imported_first_thing_is_imported_ahead_in_the_scripts_order(tmp_path):
    # (bench/plain_keras.py's shape: another library's variable set before it changes nothing)
    assert script_preloads(write(tmp_path, PLAIN)) == ("tf_keras", "tensorflow_datasets")
    assert script_preloads(write(tmp_path, "import keras, tf_keras.layers\nimport keras\n")) == ("keras", "tf_keras")


@pytest.mark.parametrize("before", [
    'os.environ["KERAS_HOME"] = "/data/keras"\n',           # its own variable: the script's own import
    'os.environ.setdefault("KERAS_BACKEND", "jax")\n',
    'os.putenv("KERAS_HOME", "/x")\n',
    'os.environ.update(dotenv)\n',                          # names not known
    'os.environ[name] = "1"\n',
    'load_dotenv()\n',                                      # anything else that ran
    'if True:\n    pass\n',
    'try:\n    import foo\nexcept ImportError:\n    pass\n',
])
def test_nothing_after_what_could_change_its_import(tmp_path, before):
    text = f"import os\n{before}import tf_keras\nimport tensorflow_datasets\n"
    assert script_preloads(write(tmp_path, text)) == ()


def test_nothing_after_a_module_of_the_scripts_own_whose_code_runs_on_import(tmp_path):
    (tmp_path / "settings.py").write_text("import os\nos.environ['KERAS_HOME'] = '/k'\n")
    assert script_preloads(write(tmp_path, "import settings\nimport tf_keras\n")) == ()
    assert script_preloads(write(tmp_path, "from . import helpers\nimport tf_keras\n")) == ()


def test_a_variable_of_one_library_keeps_only_that_one_and_what_follows_it(tmp_path):
    text = "import os\nimport tf_keras\nos.environ['TFDS_DATA_DIR'] = '/d'\nimport tensorflow_datasets\n"
    assert script_preloads(write(tmp_path, text)) == ("tf_keras",)


def test_other_libraries_and_unreadable_scripts_import_nothing_ahead(tmp_path):
    assert script_preloads(write(tmp_path, "import torch\nimport pandas\nfrom . import keras\n")) == ()
    assert script_preloads(write(tmp_path, "import tf_keras\ndef broken(:\n")) == ()
    assert script_preloads(str(tmp_path / "missing.py")) == ()
    assert script_preloads(write(tmp_path, "import tf_keras\n" + "#" * 2**20)) == ()  # past the bound: not read
