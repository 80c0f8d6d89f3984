"""launcher/record/noise.py: the known harmless TF start-up lines are recognised exactly; errors never are."""

from __future__ import annotations

import io

import pytest

from launcher.ui.console import Console
from launcher.record.noise import is_noise

# Exactly as TF 2.21 workers print them (captured from `tfcluster up cluster.yaml`), plus the
# oneDNN and CPU-instructions notices as TF prints them on CPUs that trigger them.
HARMLESS = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795424840.896830    7274 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.",
    "E0000 00:00:1795424845.812272    7276 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1732044840.312345    7274 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. "
    "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    "2024-11-19 12:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors from different computation "
    "orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    "2024-11-19 12:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:282] failed call "
    "to cuInit: CUDA_ERROR_UNKNOWN (303)",
    "I0000 00:00:1795424866.305012    8725 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
]

# What must always reach the console, including lines that look like the ones above.
MATTERS = [
    "Traceback (most recent call last):",
    '  File "/work/worker/main.py", line 12, in <module>',
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
    "shape[1024,1024,256] and type float on /job:worker/replica:0/task:0/device:CPU:0 by allocator cpu",
    "E0000 00:00:1795424845.812272    7276 grpc_server_lib.cc:490] UNAVAILABLE: failed to connect to all "
    "addresses; last error: UNKNOWN: ipv4:127.0.0.1:23457: Failed to connect to remote host: Connection refused",
    "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Socket closed",
    "E0000 00:00:1795424845.812272    7276 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: CUDA_ERROR_OUT_OF_MEMORY (2)",
    "W0000 00:00:1795424845.812272    7276 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used. And then something else happened",
    "RuntimeError: Could not find cuda drivers on your machine, GPU will not be used.",
    "tfcluster-epoch epoch=1 loss=2.1932 accuracy=0.3805",
    "",
]


@pytest.mark.parametrize("line", HARMLESS)
def test_known_harmless_lines_are_noise(line):
    assert is_noise(line)
    assert is_noise(line + "\n")


@pytest.mark.parametrize("line", MATTERS)
def test_errors_and_ordinary_lines_are_never_noise(line):
    assert not is_noise(line)


def _shown(verbose: bool, lines: list[str]) -> str:
    out = io.StringIO()
    console = Console(out=out, err=io.StringIO(), color=False)
    console.verbose = verbose
    for line in lines:
        console.task_line("worker:0", line)
    return out.getvalue()


def test_console_hides_noise_but_shows_a_traceback_and_verbose_shows_all():
    traceback = ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
                 "ValueError: boom"]
    shown = _shown(False, HARMLESS + traceback)
    assert shown.splitlines() == [f"[worker:0] {line}" for line in traceback]
    shown = _shown(True, HARMLESS + traceback)
    assert shown.splitlines() == [f"[worker:0] {line}" for line in HARMLESS + traceback]
