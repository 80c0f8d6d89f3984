"""TensorFlow's known, harmless start-up lines, which the console hides (``--verbose`` shows them),
and the tail of a task's output a failure's report shows (``report_tail``: the failure event keeps
it, launcher/record/events.py's Failure, and launcher/ui/failurelines.py shows it).

Every TF process prints these on a CPU machine, some twice, and ``TF_CPP_MIN_LOG_LEVEL`` does not
silence them (they come before absl logging is initialised). Each pattern matches one exact
message with its log prefix, never a family of messages: a line that merely mentions CUDA, an
error or a traceback is always shown. The task log files keep every line.
"""

from __future__ import annotations

import re
from typing import Sequence

TAIL = 15  # lines of a task's output a failure's report shows

# The prefix C++ TF logs with: absl ("I0000 00:00:1732044840.896830    7274 file.cc:31] ")
# or the older TF one ("2024-11-19 12:00:00.123456: I tensorflow/core/util/port.cc:113] ").
_LOG = r"(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] )(?:[\w./-]+/)?"

PATTERNS: tuple[re.Pattern, ...] = tuple(re.compile(p) for p in (
    # absl, before logging is set up (printed by every TF import).
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    # No GPU on this machine: expected on CPU hosts.
    _LOG + r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\.$",
    # The same, as an E-level line: CUDA error 303 is "no driver", not a failure.
    _LOG + r"cuda_(?:platform|executor|driver)\.cc:\d+\] failed call to cuInit: "
           r"(?:INTERNAL: CUDA error: Failed call to cuInit: )?(?:UNKNOWN ERROR|CUDA_ERROR_UNKNOWN) \(303\)$",
    # oneDNN's numerics notice.
    _LOG + r"port\.cc:\d+\] oneDNN custom operations are on\. You may see slightly different numerical results "
           r"due to floating-point round-off errors from different computation orders\. To turn them off, set "
           r"the environment variable `TF_ENABLE_ONEDNN_OPTS=0`\.$",
    # The CPU-instructions notice and its second line.
    _LOG + r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized to use available CPU instructions "
           r"in performance-critical operations\.$",
    r"To enable the following instructions: [\w., ]+, in other operations, rebuild TensorFlow with the "
    r"appropriate compiler flags\.$",
))


def is_noise(line: str) -> bool:
    """True for a known harmless TF start-up line (the console hides it unless --verbose)."""
    text = line.rstrip()
    return any(p.search(text) for p in PATTERNS)


def report_tail(lines: Sequence[str], tail: int = TAIL) -> list[str]:
    """The last of ``lines`` back to the ``tail``-th that is not noise (and at least the last
    ``tail``): the report's last ``tail`` lines with the noise left out, and with it (-v), are both
    in it."""
    kept = 0
    for start in range(len(lines) - 1, -1, -1):
        if not is_noise(lines[start]):
            kept += 1
        if kept >= tail and len(lines) - start >= tail:
            return list(lines[start:])
    return list(lines)
