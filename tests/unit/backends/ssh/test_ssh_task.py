"""launcher/backends/ssh/task.SSHTask: how a task that ended on a silent host is described."""

from __future__ import annotations

import time
from types import SimpleNamespace

from launcher.backends.ssh.task import SSHTask
from launcher.backends.base import OutputSink
from launcher.plan.build import PlannedTask
from launcher.remote.taskwrap import LEASE_EXPIRED


class _Channel:
    """A finished remote command: its output, then EOF, then its exit status."""

    def __init__(self, output: bytes, code: int) -> None:
        self._chunks = [output]
        self.exit_status = code
        self.closed = False

    def recv(self, _n: int) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def exit_status_ready(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def _task(output: bytes, code: int, silence: float) -> SSHTask:
    pool = SimpleNamespace(heartbeat=SimpleNamespace(silence=lambda host: silence), opts=SimpleNamespace(lease=3))
    host = SimpleNamespace(name="h2", transport=None)
    planned = PlannedTask(type="worker", index=1, host="h2", address="h2", port=1, command=("true",))
    lines = []
    task = SSHTask(planned, pool, host, _Channel(output, code), "pidfile",
                   OutputSink(lambda key, line: lines.append(line), lambda key, line: None))
    deadline = time.monotonic() + 5
    while task.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return task


def test_a_lease_expiry_whose_exit_arrives_first_names_the_silent_host():
    # A one-way partition: the wrapper's exit 143 reaches the launcher before its own heartbeat
    # check (silence 2.6 s < lease 3 s) would have fired.
    line = f"\x1eWtaskwrap: {LEASE_EXPIRED} 3 s (lease expired); stopping task group 42\n".encode()  # (its frame)
    task = _task(b"\x1eDATTEMPT 0\n" + line, 143, silence=2.6)
    assert task.poll() == 143
    assert task.state_note() == "h2: no word for 3 s (network partition or host down)"


def test_a_plain_sigterm_keeps_its_exit_description():
    task = _task(b"ATTEMPT 0\nbye\n", 143, silence=0.1)
    assert task.poll() == 143 and task.state_note() == ""


def test_the_wrappers_gpu_figures_are_handed_on_not_logged():
    pool = SimpleNamespace(heartbeat=SimpleNamespace(silence=lambda host: 0.0), opts=SimpleNamespace(lease=3))
    planned = PlannedTask(type="worker", index=1, host="h2", address="h2", port=1, command=("true",))
    lines, figures, given = [], [], []
    out = (b"\x1eWtaskwrap: GPUs given 2,3 collective=nccl\n\x1eDstep 1\n\x1eWtaskwrap: GPU figures [1234, 37]\n"
           b"\x1eWtaskwrap: GPU figures [1300, null]\n\x1eWtaskwrap: GPU figures [not, json]\n\x1eDstep 2\n"
           # what the task printed is its output, however it looks: never the wrapper's
           b"\x1eDtaskwrap: GPU figures [9999, 99]\n\x1eDtaskwrap: GCE preemption notice\n")
    task = SSHTask(planned, pool, SimpleNamespace(name="h2", transport=None), _Channel(out, 0), "pidfile",
                   OutputSink(lambda key, line: lines.append(line), lambda key, line: None),
                   lambda key, mib, util: figures.append((key, mib, util)),
                   lambda key, got: given.append((key, got)))
    task._reader.join(5)
    assert figures == [("worker:1", 1234, 37), ("worker:1", 1300, None)] and given == [("worker:1", ([2, 3], "", "nccl"))]
    assert lines == ["step 1", "taskwrap: GPU figures [not, json]", "step 2",  # a garbled one stays output
                     "taskwrap: GPU figures [9999, 99]", "taskwrap: GCE preemption notice"]
