"""The diagnoses of launcher/supervise/diagnose.py for failures TensorFlow words obscurely, as
tfcluster's own failure reason (blame.blame_exit), on the lines TensorFlow 2.21 printed in real runs
(tests/integration/test_tf_diagnoses.py makes them happen): a strategy created after TensorFlow
started (with the script's first TensorFlow call, read from the script the traceback names), the
abort on stopping a server that follows another error, a task that lost the coordination service
because its leader ended first, and a collective that timed out waiting for the peer behind."""

from __future__ import annotations

from launcher.supervise.blame import blame_exit
from launcher.supervise.diagnose import diagnosis, leader_gone, user_frame, waited_for

SCRIPT = "import tensorflow as tf\nprint(tf.config.list_logical_devices())\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
LATE = [
    "Traceback (most recent call last):",
    '  File "/work/run/train.py", line 3, in <module>',
    "    strategy = tf.distribute.MultiWorkerMirroredStrategy()",
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/distribute/collective_all_reduce_strategy.py", '
    "line 187, in __init__",
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/context.py", line 1083, in configure_collective_ops',
    '    raise RuntimeError("Collective ops must be configured at program startup")',
    "RuntimeError: Collective ops must be configured at program startup",
]
# TensorFlow 2.21's abort on dropping a started server (absl's CHECK_OK in ~GrpcServer), as a real run
# printed it (tests/integration/test_tf_diagnoses.py), after the harmless CPU-host CUDA line and the
# error the script printed before; then the same abort as TensorFlow 2.12 worded it (TF_CHECK_OK's own
# "Non-OK-status"), after an error TensorFlow logged.
SHUTDOWN = [
    "E0000 00:00:1796211302.875255   26901 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: Failed "
    "call to cuInit: UNKNOWN ERROR (303)",
    "Traceback (most recent call last):",
    '  File "/work/run/train.py", line 18, in <module>',
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node "
    "__wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:CPU:0}} Incompatible shapes: [2] vs. [3] "
    "[Op:AddV2] name: ",
    "F0000 00:00:1796211303.452788   26901 grpc_server_lib.cc:106] Check failed: (::tsl::TfCheckOkDeprecationMarker(), "
    "Stop()) is OK (UNIMPLEMENTED: Clean shutdown is not currently implemented) ",
    "*** Check failure stack trace: ***",
    "    @     0x7f15086a9bab  tensorflow::GrpcServer::~GrpcServer()",
]
SHUTDOWN_212 = [
    "E0000 00:00:1685013057.934497    5957 context_distributed_manager.cc:737] Deadline Exceeded",
    "F0000 00:00:1685013057.934547    5957 grpc_server_lib.cc:103] Non-OK-status: Stop() status: UNIMPLEMENTED: "
    "Clean shutdown is not currently implemented",
    "Fatal Python error: Aborted",
]
LEADER = [
    "E0000 00:00:1796173665.212205    4190 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    "UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task was preempted/died/restarted "
    "unexpectedly or this task is experiencing network issues. Check earlier logs from 1) this task, 2) the leader "
    "(usually slice 0 task 0), and 3) cluster scheduler to debug further.",
    "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.CoordinationService/Heartbeat:",
    "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Failed to send RPC",
]
TIMEOUT = [
    "/job:worker/replica:0/task:1",  # (an earlier "Example stragglers" line of the coordination service)
    "E0000 00:00:1796173735.972089    5957 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
    "DEADLINE_EXCEEDED: Collective has timed out during execution.",
    "E0000 00:00:1796173735.972274    5957 ring_alg.cc:291] Aborting RingReduce with DEADLINE_EXCEEDED: Collective "
    "ops is aborted by: Collective has timed out during execution.",
    "tensorflow.python.framework.errors_impl.DeadlineExceededError: {{function_node __wrapped__CollectiveReduceV2}} "
    "Collective has timed out during execution. [Op:CollectiveReduceV2]",
]


def test_a_late_strategy_names_the_first_tensorflow_call_from_the_script():
    read = {"/work/run/train.py": SCRIPT}.get
    assert user_frame(LATE) == ("/work/run/train.py", 3)
    assert diagnosis(LATE, read) == ("the strategy was created after TensorFlow had started: create the strategy "
                                     "before any other TensorFlow call: train.py:2 calls "
                                     "tf.config.list_logical_devices first (train.py:3 creates the strategy)")
    # The script not readable here (another host's path): the line that created it, still.
    assert diagnosis(LATE, lambda path: None).endswith("any other TensorFlow call (train.py:3 creates it after one)")


def test_the_abort_on_a_servers_stop_points_at_the_error_before_it():
    head = 'TensorFlow aborted stopping its server ("Clean shutdown is not currently implemented"): a consequence, not the cause'
    # The exception nearest before the abort, not the CUDA line TensorFlow logs on every CPU host.
    assert diagnosis(SHUTDOWN) == (f"{head}; the error before it: InvalidArgumentError: {{{{function_node "
                                   "__wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:CPU:0}} Incompatible "
                                   "shapes: [2] vs. [3] [Op:AddV2] name:")
    assert diagnosis(SHUTDOWN_212) == f"{head}; the error before it: Deadline Exceeded"
    # An error TensorFlow logged after the exception is the nearer one.
    logged = "E0000 00:00:1796211303.1   26901 context_distributed_manager.cc:737] Deadline Exceeded"
    assert diagnosis([*SHUTDOWN[:4], logged, *SHUTDOWN[4:]]) == f"{head}; the error before it: Deadline Exceeded"
    assert diagnosis([SHUTDOWN[0], *SHUTDOWN[4:]]) == f"{head}; the error before it is the cause (the task's log)"
    assert diagnosis(SHUTDOWN_212[1:]) == f"{head}; the error before it is the cause (the task's log)"
    assert diagnosis(["RuntimeError: something else"]) is None


def test_a_task_that_lost_its_leader_after_the_leader_ended_normally():
    exits = {"worker:0": 0, "worker:1": 1}
    assert leader_gone("worker:1", LEADER, exits).startswith(
        "lost TensorFlow's coordination service when worker:0, which runs it, ended (exit 0) before this task did")
    assert leader_gone("worker:1", LEADER, {"worker:0": 137, "worker:1": 1}) is None  # the leader died: a crash
    assert leader_gone("worker:1", LEADER, {"chief:0": 0, "worker:0": None, "worker:1": 1}).startswith(
        "lost TensorFlow's coordination service when chief:0")
    # A collective of worker:1 aborted by worker:0's end (TF 2.21's words, from a real run).
    reset = ["tensorflow.python.framework.errors_impl.UnavailableError: {{function_node __inference_<lambda>_27}} "
             "Collective ops is aborted by: recvmsg:Connection reset by peer",
             "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
             "/tensorflow.WorkerService/CompleteInstance:"]
    assert leader_gone("worker:1", reset, exits).startswith(
        "its collective lost worker:0, which had ended (exit 0) before this task did: every task must run")
    assert leader_gone("worker:1", reset, {"worker:0": None, "worker:1": 1}) is None
    assert blame_exit(["worker:1"], exits, {"worker:1": reset}, {"worker:0": ""}, lambda k: "").key == "worker:1"
    fault = blame_exit(["worker:1"], exits, {"worker:1": LEADER}, {"worker:0": ""}, lambda k: "")
    assert fault.key == "worker:1" and fault.reason.endswith("such as only the chief evaluating, leaves the "
                                                             "others without it) (exit code 1)"), fault


def test_a_collective_timeout_blames_the_live_peer_behind_in_its_count():
    exits = {"worker:0": 1, "worker:1": None, "worker:2": None}
    counts = {"worker:0": 14, "worker:1": 12, "worker:2": 14}
    got = waited_for("worker:0", TIMEOUT, exits, counts)
    assert got.root == "worker:1" and got.why.startswith(
        "a collective of worker:0 timed out waiting for it (collective.timeout): its count of TensorFlow calls "
        "stopped at 12 while worker:0's reached 14"), got
    # The only other live task is the one waited for, whatever the counts.
    alone = waited_for("worker:0", TIMEOUT, {"worker:0": 1, "worker:1": None}, {"worker:0": 3, "worker:1": 3})
    assert alone.root == "worker:1" and "never joined that collective" in alone.why
    # Two peers equally behind, or none behind: no verdict from the counts.
    assert waited_for("worker:0", TIMEOUT, exits, {**counts, "worker:2": 12}) is None
    assert waited_for("worker:0", TIMEOUT, exits, {**counts, "worker:1": 14}) is None
    assert waited_for("worker:0", ["ValueError: x"], exits, counts) is None
    fault = blame_exit(["worker:0"], exits, {"worker:0": TIMEOUT}, {"worker:1": "", "worker:2": ""}, lambda k: "",
                       counts=counts)
    assert fault.key == "worker:1" and fault.code is None and fault.consequences == (("worker:0", 1),), fault


def test_the_diagnosis_is_the_failures_reason_with_its_exit():
    fault = blame_exit(["worker:1"], {"worker:0": None, "worker:1": 1}, {"worker:1": LATE}, {"worker:0": ""},
                       lambda k: "", read={"/work/run/train.py": SCRIPT}.get)
    assert fault.key == "worker:1" and fault.code == 1
    assert fault.reason.endswith("train.py:2 calls tf.config.list_logical_devices first (train.py:3 creates the "
                                 "strategy) (exit code 1)"), fault


def test_workers_that_met_at_a_collective_with_different_tensors_run_different_programs():
    lines = ["tensorflow.python.framework.errors_impl.InternalError: Collective ops is aborted by: Collective "
             "instance 112 expected type 0 and data_type 1 but got type 0 and data_type 9",
             "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
             "/tensorflow.WorkerService/CompleteInstance:"]
    # (worker:0 looks hung only because worker:1 left the collective: the program is the cause)
    fault = blame_exit(["worker:1"], {"worker:0": None, "worker:1": 1}, {"worker:1": lines},
                       {"worker:0": "hung: no progress for 12 s"}, lambda k: "")
    assert fault.key == "worker:1" and fault.reason.startswith(
        "the workers met at a collective with different tensors (Collective instance 112 expected type 0 and "
        "data_type 1 but got type 0 and data_type 9): they run different steps"), fault
