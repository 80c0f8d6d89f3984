"""A task whose handle here is a child process of this launcher (the ``taskwrap`` wrapper), with
its output on a pipe: the local backend's tasks, and the ``srun`` of each Slurm step."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Optional

from launcher.plan.build import PlannedTask
from launcher.backends.base import OutputSink, TaskHandle, normalize_exit
from launcher.backends.channel import Decoder

# After the leader is reaped its pgid could in theory be reused; only signal it shortly after.
REAPED_SIGNAL_WINDOW = 5.0


class ChildTask(TaskHandle):
    def __init__(self, task: PlannedTask, proc: subprocess.Popen, on_line: OutputSink) -> None:
        super().__init__(task)
        self.proc = proc
        self._reaped_at: Optional[float] = None
        self._reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"out-{task.key}")
        self._reader.start()

    def _wrapper_line(self, text: str) -> bool:
        """Whether the wrapper's line ``text`` was meant for this handle (taken: not shown)."""
        return self.wrapper_word(text)

    def _pump(self, on_line: OutputSink) -> None:
        stream = self.proc.stdout
        assert stream is not None
        decoder = Decoder(self.key, on_line, wrapper=self._wrapper_line)
        for chunk in iter(lambda: stream.read1(65536), b""):
            decoder.feed(chunk)
        decoder.end()
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
