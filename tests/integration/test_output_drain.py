"""A task's last lines are in its log when the run ends, however late its reader thread gets to them.

On a loaded machine the thread that reads a task's output can still hold its last lines when the
task has exited: ``ChildTask.poll`` waits for it only briefly, and the run's end used to come
before them; when ``up`` then exited, the daemon reader died and the lines were never logged
(seen as an empty last attempt in ``logs --attempt``). The gate: the reader is held until 4 s
after the exit was first seen, past poll's own 2 s wait; the attempt's end must wait for it.
"""

from __future__ import annotations

import json
import sys
import threading

from launcher.backends.base import Backend
from launcher.backends.local import LocalBackend, LocalHosts, LocalRun, LocalTasks
from launcher.record.layout import log_path
from tests.support.fakes import supervise

HELD = 4.0  # s after the exit is seen: beyond ChildTask.poll's 2 s, within the attempt end's DRAIN_BOUND


class HeldReaders(LocalTasks):
    """The local backend, each task's line sink held until HELD s after its exit is first seen."""

    def start(self, request, on_line):
        gate = threading.Event()

        def held(key, line):
            gate.wait(30)
            on_line(key, line)

        handle = super().start(request, held)
        poll = handle.poll
        seen: list[bool] = []

        def poll_then_release():
            code = poll()  # (the first that sees the exit waits up to 2 s for the reader, in vain)
            if code is not None and not seen:
                seen.append(True)
                threading.Timer(HELD - 2.0, gate.set).start()
            return code

        handle.poll = poll_then_release
        return handle


def test_the_last_lines_of_a_task_are_logged_before_the_run_ends(tmp_path):
    spec = f"""\
        name: s
        strategy: multi_worker_mirrored
        entrypoint: [{json.dumps(sys.executable)}, -c, "print('the last line', flush=True)"]
        tasks: {{worker: 1}}
        watchdog: {{stop_grace: 0}}
    """
    run = LocalRun(tmp_path, tmp_path / "backend", tmp_path / "state", stop_grace=0)
    backend = Backend(LocalBackend, LocalHosts(run), HeldReaders(run))
    result = supervise(tmp_path, spec, backend, poll_interval=0.05)
    assert result.code == 0, result.err
    run = next(p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir() and not p.is_symlink()
               and p.name != "state")
    assert log_path(run, "worker:0").read_text() == "the last line\n", result.err + result.out
