"""A Keras 3 script, written as keras.io writes them (``import keras``, ``keras.Input``,
``keras.layers``, ``keras.callbacks``), trains unchanged under MultiWorkerMirroredStrategy on 2 local
workers through ``tfcluster up``: each task's ``import keras`` is tf_keras (forked from the run's
zygote, the local default), said in the task's first lines, and the workers train in step (the same
history on both). Keras 3 itself fails there (``ValueError: Attempt to convert a value
(PerReplica:{...})``); what only Keras 3 has is refused before any task starts
(tests/unit/spec/test_scriptcheck.py)."""

from __future__ import annotations

import sys

import pytest

from tests.support.keras_scripts import KERAS3, check_keras3_run
from tests.support.tfrun import up, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.tf]


def test_a_keras3_script_trains_unchanged_under_mwms_with_tf_keras(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(KERAS3)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py")
    result = up(spec)
    check_keras3_run(result.returncode, result.stdout + result.stderr)
