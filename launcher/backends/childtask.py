"""A task whose handle here is a child process of this launcher (the ``taskwrap`` wrapper), with
its output on a pipe: the local backend's tasks, and the ``srun`` of each Slurm step."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Optional

from launcher.plan.build import PlannedTask
from launcher.backends.base import LineSink, TaskHandle, normalize_exit

# After the leader is reaped its pgid could in theory be reused; only signal it shortly after.
REAPED_SIGNAL_WINDOW = 5.0


class ChildTask(TaskHandle):
    def __init__(self, task: PlannedTask, proc: subprocess.Popen, on_line: LineSink) -> None:
        super().__init__(task)
        self.proc = proc
        self._reaped_at: Optional[float] = None
        self._reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"out-{task.key}")
        self._reader.start()

    def _keep(self, line: str) -> bool:
        """Whether ``line`` is the task's output (a subclass may take lines meant for itself)."""
        return True

    def _pump(self, on_line: LineSink) -> None:
        stream = self.proc.stdout
        assert stream is not None
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if self._keep(line):
                on_line(self.key, line)
        stream.close()

    def poll(self) -> Optional[int]:
        code = self.proc.poll()
        if code is None:
            return None
        if self._reaped_at is None:
            self._reaped_at = time.monotonic()
            # Let the reader drain what the task printed last (bounded).
            self._reader.join(timeout=2.0)
            if self.proc.stdin:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        return normalize_exit(code)

    def drain(self, timeout: float) -> None:
        self._reader.join(timeout=max(0.0, timeout))

    def reaped_long_ago(self) -> bool:
        """Reaped more than REAPED_SIGNAL_WINDOW ago: its ids may belong to someone else now."""
        return self._reaped_at is not None and time.monotonic() - self._reaped_at > REAPED_SIGNAL_WINDOW
