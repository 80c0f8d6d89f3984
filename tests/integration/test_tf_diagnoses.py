"""TensorFlow failures diagnosed in tfcluster's own failure line, with real TensorFlow runs on 2 local
workers (1 for the abort; the lines each diagnosis reads are in tests/unit/supervise/test_tf_diagnoses.py):

* a strategy created after another TensorFlow call: the line names the script's first such call;
* a collective that times out waiting for a worker that stopped stepping: that worker is blamed,
  the one whose collective timed out is its consequence;
* a worker still in a collective after worker 0, which runs TensorFlow's coordination service,
  ended normally: the tasks did not end together;
* workers that meet at a collective with different tensors: they run different programs;
* TensorFlow's abort on dropping a started server ("Clean shutdown is not currently implemented"):
  the line names the error before it. No Python API of TensorFlow 2.21 drops a started server
  (``tf.distribute.Server`` has no ``stop()`` and leaks its server when collected; the eager
  context releases its old one and starts a new one only once its set-up succeeded), so the task drops
  one through TensorFlow's C API (``TF_DeleteServer``: the server's destructor, which aborts), as
  TensorFlow's C++ did after a failed cluster set-up in earlier releases.
"""

from __future__ import annotations

import re
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
# steps more than worker 0, which ends (exit 0) after its own; ``--double 0``: worker 1 reduces a
# float64 where worker 0 reduces a float32 (a program that differs between the workers).
STEPS = """\
import json, sys, time
import tensorflow as tf

mode, n = sys.argv[1], int(sys.argv[2])
options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=8 if mode == "--stop" else None)
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
me = json.loads(__import__("os").environ["TF_CONFIG"])["task"]["index"]
dtype = tf.float64 if mode == "--double" and me == 1 else tf.float32
step = tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0, dtype)), axis=None))
for i in range(3 + (n if mode == "--more" and me == 1 else 0)):
    if mode == "--stop" and me == 1 and i == n:
        print("worker 1 stops stepping", flush=True)
        time.sleep(300)
    print("step", i, float(step()), flush=True)
"""


# ``TF_NewServer``/``TF_ServerStart`` for this task's address, a real TensorFlow error (printed, as a
# script that catches it does), then ``TF_DeleteServer``: TensorFlow aborts (SIGABRT) in ~GrpcServer.
DROPPED = """\
import ctypes, json, os, traceback
import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
server_def = tf.train.ServerDef(cluster=tf.train.ClusterSpec(config["cluster"]).as_cluster_def(), protocol="grpc",
                                job_name=config["task"]["type"], task_index=config["task"]["index"]).SerializeToString()
lib = os.path.dirname(tf.__file__)
framework = ctypes.CDLL(lib + "/libtensorflow_framework.so.2", mode=ctypes.RTLD_GLOBAL)
capi = ctypes.CDLL(lib + "/libtensorflow_cc.so.2", mode=ctypes.RTLD_GLOBAL)
framework.TF_NewStatus.restype = capi.TF_NewServer.restype = ctypes.c_void_p
capi.TF_NewServer.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
capi.TF_ServerStart.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
capi.TF_DeleteServer.argtypes = [ctypes.c_void_p]
status = framework.TF_NewStatus()
server = capi.TF_NewServer(server_def, len(server_def), status)
capi.TF_ServerStart(server, status)
try:
    tf.constant([1.0, 2.0]) + tf.constant([1.0, 2.0, 3.0])
except tf.errors.InvalidArgumentError:
    traceback.print_exc()
capi.TF_DeleteServer(server)
print("not reached", flush=True)
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


def test_the_abort_on_dropping_a_started_server_names_the_error_before_it(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(DROPPED)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py", tasks="{worker: 1}")
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    failure = _failure(spec)
    # TensorFlow's own words (2.21: "Check failed: (..., Stop()) is OK (UNIMPLEMENTED: Clean shutdown ...)")
    # are in the task's log; tfcluster's line says what they mean and where the cause is.
    assert failure.task == "worker:0" and failure.reason.startswith(
        'TensorFlow aborted stopping its server ("Clean shutdown is not currently implemented"): a consequence, not '
        "the cause; the error before it: InvalidArgumentError: "), failure
    assert "Incompatible shapes: [2] vs. [3]" in failure.reason, failure
    assert failure.reason.endswith("(killed by SIGABRT (exit 134))"), failure
    assert f"failed: {failure.reason} (attempt 1 of 1)" in result.stderr, result.stderr[-3000:]


def test_workers_reducing_different_dtypes_are_told_they_run_different_programs(tmp_path, tfds_dir):
    (tmp_path / "train.py").write_text(STEPS)
    spec = write_spec(tmp_path, tfds_dir, f"{sys.executable} train.py --double 0")
    result = up(spec)
    assert result.returncode == 1, result.stderr[-3000:]
    failure = _failure(spec)
    # (TensorFlow's words: "Collective instance N expected type 0 and data_type 1 but got type 0 and data_type 2",
    # float32 against float64, from whichever worker's CompleteInstance came second)
    assert re.match(r"the workers met at a collective with different tensors \(Collective instance \d+ expected type "
                    r"\d+ and data_type (1|2) but got type \d+ and data_type (1|2)\): they run different steps; every "
                    r"worker must build the same model", failure.reason), failure
    assert f"failed: {failure.reason} (attempt 1 of 1)" in result.stderr, result.stderr[-3000:]
