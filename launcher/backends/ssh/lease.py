"""The lease: the launcher writes one byte to every live task channel about every second; a
task's wrapper stops its task group when nothing arrives for ``ssh.lease`` seconds (or its
channel closes), so a launcher that is gone -- killed, partitioned -- leaves no task behind."""

from __future__ import annotations

import threading
from typing import Optional

from launcher.backends.ssh.task import SSHTask


class Lease:
    def __init__(self, lease: float) -> None:
        self.interval = min(1.0, lease / 4)
        self._tasks: list[SSHTask] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def track(self, handle: SSHTask) -> None:
        """Renew ``handle``'s lease from now on (the thread starts with the first task)."""
        with self._lock:
            self._tasks.append(handle)
            if self._thread is None and not self._closing.is_set():
                self._thread = threading.Thread(target=self._renew, daemon=True, name="ssh-lease")
                self._thread.start()

    def close(self) -> list[SSHTask]:
        """Stop renewing; returns the tasks still tracked (their channels are the caller's to close)."""
        self._closing.set()
        with self._lock:
            tasks, self._tasks = self._tasks, []
        return tasks

    def _renew(self) -> None:
        while not self._closing.wait(self.interval):
            with self._lock:
                live = [t for t in self._tasks if t.exit_code is None and not t.channel.closed]
                self._tasks = [t for t in self._tasks if t.exit_code is None]
            for t in live:
                try:
                    if t.channel.send_ready():
                        t.channel.send(b".")
                except Exception:  # noqa: BLE001
                    pass
