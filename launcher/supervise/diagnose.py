"""Reading a failed task's last lines: pure functions (no clock, files or network).

* ``exception_lines``: the exception a Python task died of (type and the start of its message,
  long reprs such as tensor dumps shortened), found in a tail longer than the one shown.
* ``hint``: one line for a known failure signature (a small table, table-tested).
* ``diagnosis``: the cause and its fix where TensorFlow's words hide them (a strategy created too
  late, with the script's first TensorFlow call; an abort that follows another error): the failure's
  reason.
* ``named_peer`` / ``peer_abort``: whether the lines say the task was aborted because of
  another task (TF's coordination service, collective ops, a reset connection to a peer).
* ``root_cause``: given the task that failed and the state of every other task of the group,
  which task to blame, so a survivor's exit is reported as the consequence it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from launcher.contract.portcheck import TASK_EXIT_PORT_TAKEN, PORT_FIX, port_holders
from launcher.record.noise import is_noise

MESSAGE_CHARS = 240  # an exception message longer than this is cut in the middle
_EXC = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Exhausted|Abort(?:ed)?|Failure))"
    r"(?::\s?(?P<msg>.*))?$"
)
_TRACEBACK = "Traceback (most recent call last):"
# Where a multi-line exception message ends: a log record or a launcher-style progress line.
_RECORD = re.compile(r"^(?:[IWEF]\d{4} |\d{4}-\d\d-\d\d[ T]|tfcluster-|\[\w+:\d+\] |Traceback )")
_NUMBERS = re.compile(r"(?:[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|\.\.\.)[,\s\]\[]*){6,}")


def exception_lines(lines: Sequence[str], limit: int = 2) -> tuple[str, ...]:
    """The last ``limit`` distinct exception lines (``Type: message``, the type without its
    module path, the message joined over its continuation lines and shortened), oldest first;
    () if the lines hold none."""
    found: list[str] = []
    n = len(lines)
    i = 0
    while i < n:
        m = _EXC.match(lines[i])
        if not m:
            i += 1
            continue
        parts = [m.group("type").rsplit(".", 1)[-1] + ":", (m.group("msg") or "").strip()]
        j = i + 1
        while j < n and j - i < 400:
            line = lines[j]
            if _EXC.match(line) or _RECORD.match(line) or line.startswith(_STOP):
                break
            j += 1
            # TF's "Graph execution error" lists the op's frames inside its message: skip them.
            if line.strip() and not line.startswith(_SKIP):
                parts.append(line.strip())
        text = shorten(" ".join(p for p in parts if p))
        if text in found:
            found.remove(text)
        found.append(text)
        i = j
    return tuple(found[-limit:])


_STOP = (_TRACEBACK, "During handling of the above exception", "The above exception was the direct cause")
_SKIP = ("  File ", "    ", "Detected at node")


def shorten(text: str, limit: int = MESSAGE_CHARS) -> str:
    """Collapse runs of numbers (tensor and array reprs) to ``...`` and cut what is still too
    long in the middle, keeping the start (type, what went wrong) and the end."""
    text = _NUMBERS.sub("... ", text)
    text = re.sub(r"\s{2,}", " ", text)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head - 5
    return f"{text[:head]} ... {text[-tail:]}"


PORT_TAKEN = "a TF port is taken: stop what holds it (ss -ltnp) or change ports.base in the spec"
# (pattern over the joined lines, hint). Order matters: the first match wins.
SIGNATURES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"PerReplica'?>?\)? to a Tensor|Keras 3.*(?:distribut|strateg)|"
                r"(?:MultiWorkerMirrored|ParameterServer)Strategy.*not supported.*Keras", re.S),
     "Keras 3 `model.fit` does not support MultiWorkerMirroredStrategy/ParameterServerStrategy in TF 2.21; "
     "use tf_keras: keras: auto (the default) and no TF_USE_LEGACY_KERAS in env, with the tf-keras package"),
    (re.compile(r"stopped sending heartbeats|Collective ops is aborted by|The tasks have crashed|"
                r"unhealthy \(stopped sending heartbeats\)"),
     "a peer stopped or died and TensorFlow aborted this task; look at the task named as the root cause"),
    (re.compile(r"Address already in use|Failed to add port|Could not start (?:the )?gRPC server|"
                r"UNKNOWN: Could not start server", re.I),
     PORT_TAKEN),
    (re.compile(r"No space left on device|Disk quota exceeded|ENOSPC"),
     "a file system is full: free space on it, or set run_dir (logs, checkpoints under state/) to a larger one"),
    (re.compile(r"(?:tensorflow_datasets|tfds|DownloadError|download).*"
                r"(?:Temporary failure in name resolution|Name or service not known|Network is unreachable|"
                r"Max retries exceeded|urlopen error|ConnectionError|Failed to establish a new connection)|"
                r"(?:Temporary failure in name resolution|urlopen error).*(?:tfds|tensorflow_datasets|download)",
                re.I | re.S),
     "the dataset download needs network: prepare it once where there is network and set TFDS_DATA_DIR "
     "(in env) to that directory on every host"),
)


# GPU failures (one hint each). The first three hold whatever the task was given; the last two
# only for a task that was given GPUs (``gpus``): TensorFlow's CPU runs print them as harmless noise
# ("failed call to cuInit: ... UNKNOWN ERROR (303)" on every CPU host of this suite).
GPU_SIGNATURES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"Duplicate GPU detected"),
     "two NCCL ranks on one GPU: give each worker its own GPU (devices.gpus_per_task: 1 with enough GPUs per "
     "host, or auto with no more workers than GPUs), or collective.implementation: ring"),
    (re.compile(r"OOM when allocating[^\n]*GPU|CUDA_ERROR_OUT_OF_MEMORY|CUDA out of memory|"
                r"failed to allocate [^\n]* from device: [^\n]*out of memory", re.I),
     "a GPU ran out of memory: tasks sharing a GPU need devices.gpu_memory: growth or a MiB limit each, or fewer "
     "tasks per GPU (devices.gpus_per_task: 1); else lower the batch size"),
    (re.compile(r"Collective has timed out (?:during execution|waiting for other workers)|NCCL[^\n]*(?:timed? ?out|"
                r"Timeout)|Watchdog caught collective operation timeout", re.I),
     "a collective (all-reduce) timed out: a peer is slow, hung or unreachable, or NCCL cannot connect between "
     "hosts (open its ports, set NCCL_SOCKET_IFNAME); raise collective.timeout if the step is just slow"),
    (re.compile(r"Loaded runtime CuDNN library: [^\n]* but source was compiled with|"
                r"CuDNN library needs to have matching major version"),
     "the cuDNN library does not match this TensorFlow build: install the cuDNN its build needs "
     "(pip install 'tensorflow[and-cuda]' brings matching CUDA/cuDNN) or fix LD_LIBRARY_PATH"),
)
GPU_ASKED_SIGNATURES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"Could not load dynamic library '?lib(?:cudnn|cudart|cublas|cublasLt|cufft|curand|cusolver|"
                r"cusparse|nccl)[^\s']*|Cannot dlopen some GPU libraries"),
     "this task was given GPUs but TensorFlow could not load the CUDA/cuDNN libraries: install the versions its "
     "build needs (pip install 'tensorflow[and-cuda]') or fix LD_LIBRARY_PATH on that host"),
    (re.compile(r"failed call to cuInit"),
     "this task was given GPUs but CUDA did not start (failed call to cuInit): check the NVIDIA driver on that "
     "host (nvidia-smi), that TensorFlow is a GPU build, and the task's CUDA_VISIBLE_DEVICES"),
)


# The line a task prints when it finds its own port taken right before its script runs
# (launcher/contract/portcheck.py, port_taken_line), then exits TASK_EXIT_PORT_TAKEN.
_PORT_TAKEN_LINE = re.compile(r"^tfcluster: port (\d+) of \S+ is (taken(?: by .+)?|not .+); "
                              + re.escape(PORT_FIX) + "$")


def port_taken(lines: Sequence[str], code: Optional[int]) -> Optional[str]:
    """``port N taken by <holder>`` when a task that exited ``code`` TASK_EXIT_PORT_TAKEN said so (its
    last such line), else None."""
    if code != TASK_EXIT_PORT_TAKEN:
        return None
    for line in reversed(lines[-20:]):
        m = _PORT_TAKEN_LINE.match(line)
        if m:
            return f"port {m.group(1)} {m.group(2)}"
    return None


def hint(lines: Sequence[str], gpus: bool = False, port: Optional[int] = None) -> Optional[str]:
    """One line for the first known signature in ``lines``; ``gpus``: the task was given GPUs
    (then CUDA start-up failures count too); ``port``: the task's port on this machine, whose
    holder a taken port names (taken between the preflight's check and the task's bind)."""
    taken = port_taken(lines, TASK_EXIT_PORT_TAKEN)
    if taken:
        return f"{taken}: {PORT_FIX}"
    text = "\n".join(lines)
    for pattern, message in SIGNATURES + GPU_SIGNATURES + (GPU_ASKED_SIGNATURES if gpus else ()):
        if pattern.search(text):
            holders = port_holders(port) if message == PORT_TAKEN and port is not None else []
            if holders:
                return f"port {port} was taken by {', '.join(holders)}: stop it, or change ports.base in the spec"
            return message
    return None


# What TensorFlow says when a MultiWorkerMirroredStrategy is created after its runtime started
# (tensorflow/python/eager/context.py, configure_collective_ops).
LATE_COLLECTIVES = "Collective ops must be configured at program startup"
# GrpcServer::Stop (tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc) returns this for a
# started server; its destructor CHECKs it, so a process that drops a started server aborts (SIGABRT)
# with it: ``F... grpc_server_lib.cc:106] Check failed: (::tsl::TfCheckOkDeprecationMarker(), Stop()) is
# OK (UNIMPLEMENTED: Clean shutdown is not currently implemented)`` in 2.21, ``Non-OK-status: Stop()
# status: UNIMPLEMENTED: ...`` in older releases. TensorFlow's own code dropped one only after another
# error (a failed cluster set-up), which is the cause.
CLEAN_SHUTDOWN = "Clean shutdown is not currently implemented"
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_LIBRARY_FILE = re.compile(r"/(?:site|dist)-packages/|/lib/python\d+(?:\.\d+)?/|^<")
# An error TensorFlow logged (absl's E/F prefix, or the older "... E tensorflow/...") before an abort.
_LOGGED_ERROR = re.compile(r"^(?:[EF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [EF] )"
                           r"(?:[\w./-]+/)?[\w.]+:\d+\] (?P<msg>.+)$")


def diagnosis(lines: Sequence[str], read: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """The cause and its fix for a failure TensorFlow words obscurely, or None: a strategy created
    after TensorFlow's runtime started (``read(path)``: the text of the script its traceback names,
    None where it cannot be read here; the first TensorFlow call before the strategy is named from
    it), and TensorFlow's abort on stopping its server, which only follows an earlier error."""
    for i, line in enumerate(lines):
        if LATE_COLLECTIVES in line:
            return _late(lines[:i], read)
    for i, line in enumerate(lines):
        if CLEAN_SHUTDOWN in line:
            return _clean_shutdown(lines[:i])
    return mismatch(lines)


# Two workers met at one collective with different tensors (collective_param_resolver_local.cc /
# the CompleteInstance RPC): they traced different programs.
_MISMATCH = re.compile(r"Collective instance \d+ expected type \d+ and data_type \d+ but got type \d+ and "
                       r"data_type \d+|Collective instance \d+ expected shape .{1,80} but got")


def mismatch(lines: Sequence[str]) -> Optional[str]:
    """For a collective two workers entered with different tensors: the workers run different
    programs (the task's own failure, whichever peer reported it), else None."""
    found = next((m.group(0) for line in lines if (m := _MISMATCH.search(line))), None)
    if found is None:
        return None
    return (f"the workers met at a collective with different tensors ({shorten(found, 120)}): they run different "
            "steps; every worker must build the same model, dataset structure and step (a branch on the task's "
            "index, or one worker's dataset ending or typed differently, makes them differ)")


def user_frame(lines: Sequence[str]) -> Optional[tuple[str, int]]:
    """(path, line) of the last frame of the user's own code in these traceback lines."""
    found = None
    for line in lines:
        m = _FRAME.match(line)
        if m and not _LIBRARY_FILE.search(m.group("path")):
            found = (m.group("path"), int(m.group("line")))
    return found


def _late(before: Sequence[str], read: Optional[Callable[[str], Optional[str]]]) -> str:
    from launcher.loader.scriptread import first_tf_call

    head = "the strategy was created after TensorFlow had started: create the strategy before any other TensorFlow call"
    where = user_frame(before)
    if where is None:
        return head
    path, line = where
    name = path.rsplit("/", 1)[-1]
    text = read(path) if read is not None else None
    first = first_tf_call(text, line) if text else None
    if first is None:
        return f"{head} ({name}:{line} creates it after one)"
    return f"{head}: {name}:{first[0]} calls {first[1]} first ({name}:{line} creates the strategy)"


def _clean_shutdown(before: Sequence[str]) -> str:
    cause = _error_before(before)
    said = (f"; the error before it: {shorten(cause, 160)}" if cause else
            "; the error before it is the cause (the task's log)")
    return ("TensorFlow aborted stopping its server (\"Clean shutdown is not currently implemented\"): a consequence, "
            f"not the cause{said}")


def _error_before(before: Sequence[str]) -> Optional[str]:
    """The error nearest before the abort: an error TensorFlow logged or an exception (with its
    message's continuation lines), whichever came last; TensorFlow's harmless start-up errors (no
    CUDA driver on a CPU host: launcher/record/noise.py) are not it."""
    for i in range(len(before) - 1, -1, -1):
        line = before[i]
        m = _LOGGED_ERROR.match(line)
        if m and CLEAN_SHUTDOWN not in line and not is_noise(line):
            return m.group("msg")
        if _EXC.match(line):
            return next(iter(exception_lines(before[i:], 1)), None)
    return None


# A collective that gave up waiting (base_collective_executor.cc; collective.timeout, or
# CommunicationOptions(timeout_seconds=...)).
_COLLECTIVE_TIMEOUT = re.compile(r"Collective has timed out (?:during execution|waiting for other workers)")
# The coordination service's agent that lost its leader (coordination_service_agent.cc /
# base_collective_executor.cc: "Failed to send RPC to coordination service. Either the leader task
# was preempted/died/restarted unexpectedly or this task is experiencing network issues.").
_LEADER_LOST = re.compile(r"Failed to send RPC to coordination service|leader task was preempted/died")


def waited_for(key: str, lines: Sequence[str], exits: Mapping[str, Optional[int]],
               counts: Mapping[str, Optional[int]]) -> Optional["Blame"]:
    """For a task whose collective timed out: the live peer it waited for, or None. The only other
    live task is that peer; among several, the one behind every other in its count of TensorFlow
    calls (the others reached the collective: a count does not tell a task inside the collective
    from one that never called it, so equal counts decide nothing)."""
    if not any(_COLLECTIVE_TIMEOUT.search(line) for line in lines):
        return None
    live = [k for k, code in exits.items() if code is None and k != key and k.split(":")[0] != "evaluator"]
    if len(live) == 1:
        return Blame(live[0], f"a collective of {key} timed out waiting for it (collective.timeout): it was still "
                              "running and never joined that collective (its last lines say where it was)")
    mine = counts.get(key)
    known = [k for k in live if counts.get(k) is not None]
    if mine is None or len(known) < 2:
        return None
    low = min(known, key=lambda k: counts[k] or 0)
    if (counts[low] or 0) >= mine or sum(1 for k in known if counts[k] == counts[low]) > 1:
        return None
    return Blame(low, f"a collective of {key} timed out waiting for it (collective.timeout): its count of TensorFlow "
                      f"calls stopped at {counts[low]} while {key}'s reached {mine}")


def leader_gone(key: str, lines: Sequence[str], exits: Mapping[str, Optional[int]]) -> Optional[str]:
    """For a task that lost a peer which had ended normally (exit 0) before it: the coordination
    service's leader (the chief, else worker 0), or the peer its aborted collective names. The
    tasks did not end together: the words and the fix, else None."""
    fix = ("every task must run the same collective steps to the end (a task that stops early, or one that does "
           "more, such as only the chief evaluating, leaves the others without it)")
    leader = _leader(exits)
    if leader != key and exits.get(leader) == 0 and any(_LEADER_LOST.search(line) for line in lines):
        return f"lost TensorFlow's coordination service when {leader}, which runs it, ended (exit 0) before this task did: {fix}"
    if not peer_abort(lines):
        return None
    ended = [k for k in _tasks_named(lines) if k != key and exits.get(k) == 0]
    if not ended:
        return None
    return f"its collective lost {ended[-1]}, which had ended (exit 0) before this task did: {fix}"


_TASK_REF = re.compile(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)")


def _leader(keys) -> str:
    """The task that runs TensorFlow's coordination service: the chief, else worker 0."""
    return "chief:0" if "chief:0" in keys else "worker:0"


def _tasks_named(lines: Sequence[str]) -> list[str]:
    """Every task the lines name (``/job:worker/replica:0/task:1`` as ``worker:1``), in order."""
    return [f"{m.group(1)}:{m.group(2)}" for line in lines for m in _TASK_REF.finditer(line)]
_UNHEALTHY = re.compile(
    r"unhealthy|stopped sending heartbeats|Collective ops is aborted by|aborted by|The tasks have crashed|"
    r"Connection reset by peer|Socket closed|failed to connect|heartbeat timeout|is not available|"
    r"UnavailableError|DeadlineExceeded", re.I)
_PEER_ABORT = re.compile(
    r"stopped sending heartbeats|Collective ops is aborted by|The tasks have crashed|"
    r"Connection reset by peer|Socket closed|coordination service.*(?:error|unavailable)|"
    r"Failed to send heartbeat|heartbeat.*(?:timed out|timeout)", re.I)


def peer_abort(lines: Sequence[str]) -> bool:
    """Whether the lines say this task was aborted because of another task."""
    return any(_PEER_ABORT.search(line) for line in lines)


def peers_gone_named(key: str, lines: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The other tasks whose end ``key``'s lines may be reporting (leader_gone's reading): where
    they say a peer aborted it, every task they name; where they say the coordination service was
    lost, its leader."""
    named = _tasks_named(lines) if peer_abort(lines) else []
    if any(_LEADER_LOST.search(line) for line in lines):
        named.append(_leader(keys))
    return [k for k in dict.fromkeys(named) if k != key and k in keys]


def named_peer(key: str, lines: Sequence[str], keys: Sequence[str]) -> Optional[str]:
    """The other task the lines name as unhealthy or as the source of an abort, if any (the
    last such mention wins: it is the freshest)."""
    found = None
    for line in lines:
        if not _UNHEALTHY.search(line) and not _TASK_REF.search(line):
            continue
        for m in _TASK_REF.finditer(line):
            other = f"{m.group(1)}:{m.group(2)}"
            if other != key and other in keys and (_UNHEALTHY.search(line) or _abort_context(lines, line)):
                found = other
    return found


def _abort_context(lines: Sequence[str], line: str) -> bool:
    """A bare task reference (TF prints the unhealthy tasks one per line) counts when the lines
    around say the tasks are unhealthy."""
    return line.strip().startswith("/job:") and peer_abort(lines)


@dataclass(frozen=True)
class Blame:
    """Who is the root cause of ``key``'s failure: ``root`` (another task, or ``key`` itself)
    and why (the other task's state, or what the lines say)."""

    root: str
    why: str

    def consequence(self, key: str) -> bool:
        return self.root != key


def root_cause(key: str, lines: Sequence[str], peers: Mapping[str, str]) -> Blame:
    """Blame for ``key``'s failure. ``peers`` maps every other task of the group to its state:
    "" when healthy, else a short note ("process is stopped (SIGSTOP?)", "hung: no progress for
    20 s", "no word for 17 s (network partition or host down)", "exit code 137").

    A peer in trouble is the root cause when the lines name it, or when they show an abort
    caused by a peer and it is the only peer in trouble; a peer the lines name as unhealthy is
    blamed even if it looks healthy now. Otherwise (a genuine error, every peer healthy) the
    task itself is."""
    named = named_peer(key, lines, list(peers))
    troubled = [k for k, note in peers.items() if note]
    if named and peers.get(named):
        return Blame(named, peers[named])
    if troubled and (peer_abort(lines) or named):
        # The lines name a peer that looks healthy, or name none: the peer in trouble is likelier.
        return Blame(troubled[0], peers[troubled[0]])
    if named:
        return Blame(named, f"named as unhealthy in {key}'s last lines")
    return Blame(key, "")
