"""Failure analysis on real task output: exception lines, hints, root cause, retry decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.diagnose import exception_lines, hint, named_peer, peer_abort, root_cause, shorten
from launcher.policy import Failure, retry_decision

PERMANENT = tuple(range(1, 128))
# worker:0's last lines when worker:1 was SIGSTOPped (TF 2.21, tf_keras model.fit), verbatim.
ABORTED = """\
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53, in quick_execute
    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,
  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main

  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/tf_keras/src/optimizers/utils.py", line 172, in _all_reduce_sum_fn

Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.
The error could be from a previous operation. Restart your program to reset.
	 [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_1696]""".splitlines()
# The TF tutorial's tf.keras (Keras 3) model.fit under MultiWorkerMirroredStrategy, TF 2.21, verbatim.
KERAS3 = (Path(__file__).parent / "data" / "keras3_mwms_fit.log").read_text().splitlines()
GENUINE = """\
Traceback (most recent call last):
  File "/work/train.py", line 12, in <module>
    main()
  File "/work/train.py", line 9, in main
    raise KeyError("learning_rate")
KeyError: 'learning_rate'""".splitlines()
PORT = ["E1123 03:10:00.1 grpc_server_lib.cc] UNKNOWN: Could not start gRPC server",
        "RuntimeError: Address already in use (/job:worker/replica:0/task:0 on localhost:23456)"]
TFDS = ["Traceback (most recent call last):",
        "  File \"/work/train.py\", line 3, in <module>",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='storage.googleapis.com', port=443): "
        "Max retries exceeded with url: /tfds-data/datasets/mnist (Caused by NameResolutionError: "
        "Failed to resolve 'storage.googleapis.com' ([Errno -3] Temporary failure in name resolution))",
        "Failed to construct dataset mnist via tensorflow_datasets download"]


def test_exception_line_of_a_tf_abort_skips_the_op_frames():
    (line,) = exception_lines(ABORTED)
    assert line.startswith("UnavailableError: Graph execution error: Collective ops is aborted by: Error reported "
                           "from /job:worker/task:1: The following tasks are unhealthy"), line
    assert len(line) <= 240


def test_exception_line_of_keras3_shows_type_and_start_with_the_tensor_dump_shortened():
    assert len(KERAS3) > 15 and "ValueError" not in "\n".join(KERAS3[-15:])  # the old report's window
    (line,) = exception_lines(KERAS3)
    assert line.startswith("ValueError: Attempt to convert a value (PerReplica:{"), line
    assert line.endswith("with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) "
                         "to a Tensor."), line
    assert len(line) <= 240 and "0.7490196" not in line


@pytest.mark.parametrize("lines, expected", [
    (GENUINE, ("KeyError: 'learning_rate'",)),
    (["Traceback (most recent call last):", "  File \"x.py\", line 1, in <module>",
      "ValueError: bad", "", "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  File \"x.py\", line 3, in <module>", "SystemExit: 2"],
     ("ValueError: bad", "SystemExit: 2")),
    (["step 1", "step 2", "done"], ()),
    (["  ValueError: indented, inside a repr"], ()),
])
def test_exception_lines_table(lines, expected):
    assert exception_lines(lines) == expected


def test_shorten_keeps_start_and_end():
    text = "ValueError: " + "x" * 1000 + " the end"
    out = shorten(text)
    assert out.startswith("ValueError: xxx") and out.endswith("the end") and len(out) <= 240


@pytest.mark.parametrize("lines, expected", [
    (KERAS3, "Keras 3 `model.fit` does not support MultiWorkerMirroredStrategy/ParameterServerStrategy in TF 2.21; "
             "use tf_keras: env TF_USE_LEGACY_KERAS=1 with the tf-keras package"),
    (ABORTED, "a peer stopped or died and TensorFlow aborted this task; look at the task named as the root cause"),
    (PORT, "a TF port is taken: stop what holds it (ss -ltnp) or change ports.base in the spec"),
    (TFDS, "the dataset download needs network: prepare it once where there is network and set TFDS_DATA_DIR "
           "(in env) to that directory on every host"),
    (["OSError: [Errno 28] No space left on device: '/runs/t/state/ckpt'"],
     "a file system is full: free space on it, or set run_dir (logs, checkpoints under state/) to a larger one"),
    (GENUINE, None),
    (["Connection reset by peer"], None),
])
def test_hints_table(lines, expected):
    assert hint(lines) == expected


KEYS = ["worker:0", "worker:1", "worker:2"]


@pytest.mark.parametrize("lines, expected", [
    (ABORTED, "worker:1"),
    (["Collective ops is aborted by: Error reported from /job:worker/task:2: something"], "worker:2"),
    (["The following tasks are unhealthy (stopped sending heartbeats):", "/job:worker/replica:0/task:2"], "worker:2"),
    (["/job:worker/replica:0/task:0 started"], None),  # itself, and no trouble
    (["listening on /job:worker/replica:0/task:1"], None),  # a mention is not an accusation
    (GENUINE, None),
])
def test_named_peer_table(lines, expected):
    assert named_peer("worker:0", lines, KEYS) == expected


@pytest.mark.parametrize("lines, peers, root, why", [
    # SIGSTOP: the survivor's lines name worker:1, which is stopped.
    (ABORTED, {"worker:1": "process is stopped (SIGSTOP?)"}, "worker:1", "process is stopped (SIGSTOP?)"),
    # The stopped peer has resumed by the time the supervisor looks: the lines still blame it.
    (ABORTED, {"worker:1": ""}, "worker:1", "named as unhealthy in worker:0's last lines"),
    # Partition over ssh: no task named, one peer unreachable.
    (["Socket closed"], {"worker:1": "no word for 17 s (network partition or host down)"},
     "worker:1", "no word for 17 s (network partition or host down)"),
    (["E1123 grpc Connection reset by peer"], {"worker:1": "", "worker:2": "killed by SIGKILL (exit 137)"},
     "worker:2", "killed by SIGKILL (exit 137)"),
    # A genuine bug: same traceback, every peer healthy -> the task itself.
    (GENUINE, {"worker:1": "", "worker:2": ""}, "worker:0", ""),
    # A genuine bug while a peer happens to be hung: still the task's own error.
    (GENUINE, {"worker:1": "hung: no progress for 12 s"}, "worker:0", ""),
    # A reset connection with every peer healthy: nothing to blame elsewhere.
    (["Connection reset by peer"], {"worker:1": ""}, "worker:0", ""),
])
def test_root_cause_table(lines, peers, root, why):
    blame = root_cause("worker:0", lines, peers)
    assert (blame.root, blame.why) == (root, why)


def _failure(lines, peers, code):
    """What the supervisor builds: the root cause's Failure, the survivor's exit as a consequence."""
    blame = root_cause("worker:0", lines, peers)
    if not blame.consequence("worker:0"):
        return Failure(key="worker:0", reason=f"exit code {code}", code=code, last_lines=tuple(lines))
    return Failure(key=blame.root, reason=blame.why, code=None, consequences=(("worker:0", code),))


@pytest.mark.parametrize("lines, peers, code, retryable, why", [
    (ABORTED, {"worker:1": "process is stopped (SIGSTOP?)"}, 1, True,
     "worker:0 (exit code 1) followed from worker:1's state (process is stopped (SIGSTOP?)); retryable"),
    (["Socket closed"], {"worker:1": "no word for 17 s (network partition or host down)"}, 1, True,
     "worker:0 (exit code 1) followed from worker:1's state (no word for 17 s (network partition or host down)); "
     "retryable"),
    (GENUINE, {"worker:1": ""}, 1, False,
     "not retried: an uncaught error in the task (exit 1) fails the same way every time; fix the cause, "
     "or remove 1 from restart.permanent_exit_codes"),
])
def test_consequence_is_retryable_a_genuine_bug_is_not(lines, peers, code, retryable, why):
    assert retry_decision(_failure(lines, peers, code), PERMANENT) == (retryable, why)


def test_peer_abort_lines():
    assert peer_abort(ABORTED) and peer_abort(["grpc: Socket closed"]) and not peer_abort(GENUINE)
