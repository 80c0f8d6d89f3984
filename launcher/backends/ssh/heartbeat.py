"""The launcher's side of the ssh lease: is each host still answering?

The lease is a heartbeat: about every second the launcher writes a byte to every task's channel,
and a task's wrapper stops the task when nothing has arrived for ``ssh.lease`` seconds. Those
bytes are never answered, and paramiko's ``transport.is_active()`` stays true until TCP gives up
(minutes), so the launcher could not tell a silent host from a quiet one. Here, at the same
cadence and over the same SSH transport, each host gets an *answered* keepalive
(``keepalive@openssh.com``, as ssh(1)'s ServerAliveInterval sends). Only answers count, not
the tasks' output: output proves the host->launcher direction alone, while the lease needs the
launcher->host one. A host silent for ``ssh.lease`` seconds is reported as lost at the moment
its wrappers, hearing nothing either, stop their tasks.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

KEEPALIVE = "keepalive@openssh.com"


class Heartbeat:
    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()

    def watch(self, name: str, transport: Callable[[], Optional[object]]) -> None:
        """Start asking ``name`` (once per host; ``transport()`` gives its current transport)."""
        with self._lock:
            if name in self._threads and self._threads[name].is_alive():
                return
            self._last[name] = self.clock()
            thread = threading.Thread(target=self._ask, args=(name, transport), daemon=True,
                                      name=f"ssh-heartbeat-{name}")
            self._threads[name] = thread
        thread.start()

    def heard(self, name: str) -> None:
        with self._lock:
            if name in self._last:
                self._last[name] = self.clock()

    def silence(self, name: str) -> float:
        """Seconds since ``name`` last answered (0 for a host not watched)."""
        with self._lock:
            last = self._last.get(name)
        return 0.0 if last is None else max(0.0, self.clock() - last)

    def close(self) -> None:
        self._closing.set()

    def _ask(self, name: str, transport: Callable[[], Optional[object]]) -> None:
        # One request in flight per host: a reply that never comes keeps this thread waiting
        # (paramiko returns when the transport closes), and the silence grows meanwhile.
        while not self._closing.wait(self.interval):
            t = transport()
            if t is None or not t.is_active():  # type: ignore[attr-defined]
                continue
            try:
                t.global_request(KEEPALIVE, wait=True)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a broken transport is silence, reported by silence()
                continue
            if t.is_active():  # type: ignore[attr-defined]
                self.heard(name)
