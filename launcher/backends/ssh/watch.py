"""Hosts that were lost, watched for their return (elastic runs, launcher/plan/elastic.py).

A thread of its own probes each watched host about once a second (all of them at once) and
keeps, per host, since when it has answered without a break; a probe that fails starts the
clock again, so a host that flaps (up a few seconds, down a few) never counts as back. The
supervisor only reads ``settled``: it never waits on a probe.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence


class HostWatch:
    def __init__(self, probe: Callable[[str], bool], interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.probe, self.interval, self.clock = probe, interval, clock
        self._names: set[str] = set()
        self._since: dict[str, float] = {}
        self._going: set[str] = set()  # announced their end (a preemption notice): must go first
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, names: Sequence[str], start: bool = True) -> None:
        with self._lock:
            self._names.update(names)
            if start and self._thread is None and self._names:
                self._thread = threading.Thread(target=self._run, daemon=True, name="ssh-hostwatch")
                self._thread.start()

    def going(self, name: str) -> None:
        """``name`` announced that it is going away (GCE's preemption notice): answers count only
        after a probe has failed once (it went), so a host still up in its notice is not back."""
        with self._lock:
            self._going.add(name)
            self._since.pop(name, None)

    def forget(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)
            self._since.pop(name, None)

    def settled(self, settle: float) -> list[str]:
        """Watched hosts that have answered every probe for at least ``settle`` seconds."""
        now = self.clock()
        with self._lock:
            return sorted(n for n, since in self._since.items() if n in self._names and now - since >= settle)

    def close(self) -> None:
        self._closing.set()

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="ssh-hostwatch") as pool:
            while not self._closing.is_set():
                started = self.clock()
                self.probe_once(pool.map)
                self._closing.wait(max(0.0, self.interval - (self.clock() - started)))

    def probe_once(self, map_=map) -> None:
        """One round: every watched host probed (through ``map_``: the thread's pool), its
        unbroken run of answers extended or ended."""
        with self._lock:
            names = sorted(self._names)
        answers = dict(zip(names, map_(self._ask, names)))
        # An answer proves the host answers when it came, not since the round began: a probe
        # that opened a new connection can span a link's short outage (TCP delivers the handshake
        # late) and still succeed; counted from its start, a flapping host looked settled 1.5 s
        # early in the suite.
        answered = self.clock()
        with self._lock:
            for name, ok in answers.items():
                if name not in self._names:
                    continue
                if ok and name not in self._going:
                    self._since.setdefault(name, answered)
                elif not ok:
                    self._since.pop(name, None)
                    self._going.discard(name)

    def _ask(self, name: str) -> bool:
        try:
            return bool(self.probe(name))
        except Exception:  # noqa: BLE001 - a probe that fails is a host that does not answer
            return False
