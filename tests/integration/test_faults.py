"""Faults found by fault injection: a stopped worker is named by its wrapper and the run is
retried; the report shows the task's exception line and a hint where the TF tutorial's own code
pattern runs under Keras 3 (under tf_keras, the default, it trains unmodified:
test_tensorboard.py's tutorial run)."""

from __future__ import annotations

import re
import signal

import pytest

from tests.support.tfrun import assert_no_processes, events, kill_task, progress, run_and_act, up, write_spec
import launcher.record.events as ev

pytestmark = [pytest.mark.integration, pytest.mark.tf]
# The code pattern of TensorFlow's "Multi-worker training with Keras" tutorial (main.py +
# mnist_setup.py): plain tf.keras, never naming tf_keras; synthetic MNIST-shaped data (no download).
TUTORIAL = '''\
# The pattern of TensorFlow's "Multi-worker training with Keras" tutorial (main.py + mnist_setup.py),
# with synthetic MNIST-shaped data instead of a download.
import json
import os

import numpy as np
import tensorflow as tf


def mnist_dataset(batch_size):
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 255, size=(2048, 28, 28)).astype(np.float32) / np.float32(255)
    y_train = rng.integers(0, 10, size=(2048,)).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


per_worker_batch_size = 32
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)
with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
history = multi_worker_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=10)
print("tutorial done, final loss", history.history["loss"][-1], flush=True)
'''
TRAIN = "python -m worker --epochs 2 --steps-per-epoch 30 --step-delay 0.05 --progress-every 5 --save-freq 5"


def test_sigstopped_peer_is_named_by_its_wrapper_and_the_group_restarts(tmp_path, tfds_dir):
    # worker:1 stopped: its wrapper says so within a second, and watchdog.stopped_timeout (the
    # default, 2 s) later the group fails on it, before TF's coordination service would abort
    # worker:0 for it (about 8 s in: "as a consequence of worker:1", with watchdog.stopped_timeout
    # 0) and long before the hang watchdog (20 s). The run is retryable and resumes past step 0.
    # One restart allowed, the one it takes: with more, the restarted attempt's warm standbys would
    # import TensorFlow for a restart that never comes (a whole import of CPU each, for nothing).
    spec = write_spec(tmp_path, tfds_dir, TRAIN, extra="restart: {max_restarts: 1}\n")
    spec.write_text(spec.read_text().replace("stop_grace: 3}", "stop_grace: 3, hang_timeout: 20}"))
    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step epoch=0 step=15 ",
                                    lambda proc: kill_task(spec, "worker:1", signal.SIGSTOP))])
    assert code == 0, out[-4000:]
    assert re.search(r"worker:1 failed: process is stopped \(SIGSTOP\?\) for \d+ s \(watchdog.stopped_timeout 2 s\) "
                     r"\(attempt 1 of 2\)", out), out[-4000:]
    assert "as a consequence of worker:1" not in out, out[-4000:]
    assert "restarting the whole group (restart 1 of 1)" in out
    starts = progress(out, "start")
    assert len(starts) == 2 and int(starts[1]["global_step"]) > 0, starts
    said = [e for e in events(spec) if isinstance(e, ev.ProcessStopped)]
    assert [(e["task"], e["killed"]) for e in said] == [("worker:1", False)], said
    failure = [e for e in events(spec) if isinstance(e, ev.Failure)][0]
    assert failure["task"] == "worker:1" and failure["consequences"] == {}, failure
    assert events(spec)[-1]["outcome"] == "succeeded"
    assert_no_processes(spec)


def _tutorial_spec(tmp_path, tfds_dir, extra=""):
    (tmp_path / "tutorial.py").write_text(TUTORIAL)
    return write_spec(tmp_path, tfds_dir, "python tutorial.py", extra=extra)


def test_keras3_failure_report_shows_the_exception_line_and_a_hint(tmp_path, tfds_dir):
    # env overrides the TF_USE_LEGACY_KERAS=1 default: Keras 3 fails as the tutorial did before.
    spec = _tutorial_spec(tmp_path, tfds_dir)
    spec.write_text(spec.read_text().replace('TF_CPP_MIN_LOG_LEVEL: "2"',
                                             'TF_CPP_MIN_LOG_LEVEL: "2"\n  TF_USE_LEGACY_KERAS: "0"'))
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    err = result.stderr
    assert re.search(r"^  worker:\d: ValueError: Attempt to convert a value \(PerReplica:\{ .* with an unsupported "
                     r"type \(<class 'tensorflow.python.distribute.values.PerReplica'>\) to a Tensor\.$", err, re.M), err
    assert ("  hint: Keras 3 `model.fit` does not support MultiWorkerMirroredStrategy/ParameterServerStrategy in "
            "TF 2.21; use tf_keras: keras: auto (the default) and no TF_USE_LEGACY_KERAS in env, with the tf-keras package") in err
    failure = [e for e in events(spec) if isinstance(e, ev.Failure)][0]
    assert failure["errors"][0].startswith("ValueError: Attempt to convert a value (PerReplica:{")
    assert_no_processes(spec)
