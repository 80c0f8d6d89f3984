"""Failure analysis on real task output: exception lines, hints, root cause, retry decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.supervise.diagnose import exception_lines, hint, named_peer, peer_abort, root_cause, shorten
from launcher.supervise.policy import AttemptFailure, retry_decision

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
             "use tf_keras: keras: auto (the default) and no TF_USE_LEGACY_KERAS in env, with the tf-keras package"),
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
    """What the supervisor builds: the root cause's AttemptFailure, the survivor's exit as a consequence."""
    blame = root_cause("worker:0", lines, peers)
    if not blame.consequence("worker:0"):
        return AttemptFailure(key="worker:0", reason=f"exit code {code}", code=code, last_lines=tuple(lines))
    return AttemptFailure(key=blame.root, reason=blame.why, code=None, consequences=(("worker:0", code),))


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


# GPU failures, as TensorFlow, CUDA and NCCL print them (each verbatim from a real log or the
# library's source: TF's bfc_allocator/cuda_driver/dso_loader/cuda_dnn, NCCL's init.cc).
GPU_OOM_TF = ["tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
              "__wrapped__MatMul_device_/job:localhost/replica:0/task:0/device:GPU:0}} OOM when allocating tensor "
              "with shape[32768,32768] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
              "GPU_0_bfc [Op:MatMul]"]
GPU_OOM_CUDA = ["2024-01-10 10:01:02.123456: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:628] "
                "failed to allocate 14.76G (15852846080 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory"]
CPU_OOM = ["ResourceExhaustedError: OOM when allocating tensor with shape[1000000,100000] and type float on "
           "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"]
DUPLICATE = ["vm1:1585:1585 [0] init.cc:738 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA "
             "device 1000"]
CUINIT_NEW = ["E0000 00:00:1795701429.344121   27269 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
              "error: Failed call to cuInit: UNKNOWN ERROR (303)"]
CUINIT_OLD = ["2023-05-02 09:12:00.1: E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: "
              "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"]
LIBCUDNN = ["2022-03-01 12:00:00.1: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
            "dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file: No such file "
            "or directory",
            "W tensorflow/core/common_runtime/gpu/gpu_device.cc:1850] Cannot dlopen some GPU libraries. Please make "
            "sure the missing libraries mentioned above are installed properly if you would like to use GPU."]
CUDNN_MISMATCH = ["E tensorflow/stream_executor/cuda/cuda_dnn.cc:361] Loaded runtime CuDNN library: 8.0.5 but source "
                  "was compiled with: 8.1.0.  CuDNN library needs to have matching major version and equal or higher "
                  "minor version. If using a binary install, upgrade your CuDNN library."]
COLLECTIVE_TIMEOUT = ["tensorflow.python.framework.errors_impl.DeadlineExceededError: Collective has timed out during "
                      "execution. [Op:CollectiveReduceV2]"]
COLLECTIVE_WAIT = ["DeadlineExceededError: Collective has timed out waiting for other workers."]


@pytest.mark.parametrize("lines, gpus, start", [
    (GPU_OOM_TF, False, "a GPU ran out of memory"),
    (GPU_OOM_CUDA, True, "a GPU ran out of memory"),
    (DUPLICATE, True, "two NCCL ranks on one GPU"),
    (COLLECTIVE_TIMEOUT, False, "a collective (all-reduce) timed out"),
    (COLLECTIVE_WAIT, True, "a collective (all-reduce) timed out"),
    (CUDNN_MISMATCH, False, "the cuDNN library does not match"),
    (CUINIT_NEW + GENUINE, True, "this task was given GPUs but CUDA did not start"),
    (CUINIT_OLD, True, "this task was given GPUs but CUDA did not start"),
    (LIBCUDNN, True, "this task was given GPUs but TensorFlow could not load the CUDA/cuDNN libraries"),
])
def test_gpu_failures_get_one_hint_each(lines, gpus, start):
    got = hint(lines, gpus)
    assert got is not None and got.startswith(start) and "\n" not in got, got


@pytest.mark.parametrize("lines", [CUINIT_NEW + GENUINE, CUINIT_OLD, LIBCUDNN, CPU_OOM])
def test_cuda_start_up_noise_is_no_hint_for_a_task_without_gpus(lines):
    """TensorFlow on a CPU host prints cuInit failures and missing libraries as harmless warnings;
    a CPU tensor's OOM is not a GPU's."""
    assert hint(lines, gpus=False) is None


def test_report_lines_hint_a_gpu_tasks_cuda_failure_only():
    from launcher.ui.failurelines import report_lines

    def shown(gpus: bool) -> str:
        return "\n".join(report_lines("worker:0", exception_lines(CUINIT_OLD), hint(CUINIT_OLD, gpus), CUINIT_OLD, "l",
                                       False))

    assert "  hint: this task was given GPUs" in shown(True)
    assert "  hint:" not in shown(False)
