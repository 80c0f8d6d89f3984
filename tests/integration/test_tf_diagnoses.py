"""TensorFlow failures diagnosed in tfcluster's own failure line, with real TensorFlow runs on 2 local
workers (the lines each diagnosis reads are in tests/unit/supervise/test_tf_diagnoses.py):

* a strategy created after another TensorFlow call: the line names the script's first such call;
* a collective that times out waiting for a worker that stopped stepping: that worker is blamed,
  the one whose collective timed out is its consequence;
* a worker still in a collective after worker 0, which runs TensorFlow's coordination service,
  ended normally: the tasks did not end together.
"""

from __future__ import annotations

import sys

import pytest

import launcher.record.events as ev
from tests.support.records import of
from tests.support.specs import local_spec
from tests.support.tfrun import events, up, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.tf]

LATE = """\
import tensorflow as tf
print(tf.config.list_logical_devices())
strategy = tf.distribute.MultiWorkerMirroredStrategy()
"""

# ``--stop N``: worker 1 stops stepping before step N (it sleeps); ``--more N``: worker 1 runs N
# steps more than worker 0, which ends (exit 0) after its own.
STEPS = """\
import json, sys, time
import tensorflow as tf

mode, n = sys.argv[1], int(sys.argv[2])
options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=8 if mode == "--stop" else None)
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
me = json.loads(__import__("os").environ["TF_CONFIG"])["task"]["index"]
step = tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))
for i in range(3 + (n if mode == "--more" and me == 1 else 0)):
    if mode == "--stop" and me == 1 and i == n:
        print("worker 1 stops stepping", flush=True)
        time.sleep(300)
    print("step", i, float(step()), flush=True)
"""


def _failure(spec) -> ev.Failure:
    found = of(events(spec), ev.Failure)
    assert len(found) == 1, found
    return found[0]


def test_a_strategy_created_late_names_the_scripts_first_tensorflow_call(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(LATE)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py")
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    said = ("the strategy was created after TensorFlow had started: create the strategy before any other TensorFlow "
            "call: train.py:2 calls tf.config.list_logical_devices first (train.py:3 creates the strategy) "
            "(exit code 1)")
    assert f"failed: {said} (attempt 1 of 1)" in result.stderr, result.stderr[-3000:]
    assert _failure(spec).reason == said


def test_a_collective_timeout_blames_the_worker_that_stopped_stepping(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(STEPS)
    # (the hang watchdog off: the collective's own timeout is what ends it)
    spec = local_spec(tmp_path, f"{sys.executable} train.py --stop 2", name="demo", env={"TF_CPP_MIN_LOG_LEVEL": '"2"'},
                      watchdog="{startup_timeout: 120, stop_grace: 2, hang_timeout: 0}")
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    failure = _failure(spec)
    assert failure.task == "worker:1", failure
    assert failure.reason.startswith("a collective of worker:0 timed out waiting for it (collective.timeout)"), failure
    assert failure.consequences == {"worker:0": 1}, failure


def test_a_worker_left_in_a_collective_after_the_coordination_leader_ended(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(STEPS)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py --more 1")
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    failure = _failure(spec)
    assert failure.task == "worker:1", failure
    # (TensorFlow 2.21 words it as the collective's abort by worker:0's reset connection, or where the
    # heartbeat fails first, as the lost coordination service)
    assert failure.reason.startswith(("its collective lost worker:0, which had ended (exit 0) before this task did",
                                         "lost TensorFlow's coordination service when worker:0")), failure
