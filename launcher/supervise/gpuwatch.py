"""Each task's GPU memory and utilisation, where ``nvidia-smi`` answers: cheap and bounded.

Every ``every`` seconds (default 5) one thread runs two queries, each with a timeout::

    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits

and matches the compute processes to the tasks' processes (a task's process group here: the
local backend's wrapper leads one per task). A task's memory is what its processes hold; its
utilisation the busiest of its GPUs (utilisation is per GPU: tasks sharing one share the figure).
A sample that changed is handed on (the supervisor writes it as a ``gpu_usage`` event: the live
panel, ``status`` and the final report's peak read it). An nvidia-smi that fails or times out
three times in a row ends the watch (said once). The parsing is pure and unit-tested.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Iterable, Mapping, Optional, Sequence

# The queries and their parsing are shared with the ssh task wrapper (stdlib only, uploaded to hosts).
from launcher.remote.gpuquery import APPS_QUERY as APPS, GPUS_QUERY as GPUS, figures, parse_apps, parse_gpus, query  # noqa: F401


def usage(pids: Mapping[str, Iterable[int]], gpu_ids: Mapping[str, Sequence[int]], apps: Mapping[int, int],
          utils: Mapping[int, Optional[int]]) -> dict[str, tuple[int, Optional[int]]]:
    """{task: (MiB its processes hold, utilisation % of its busiest GPU or None)} for the tasks
    with GPUs (``gpu_ids``)."""
    return {key: figures(pids.get(key, ()), ids, apps, utils) for key, ids in gpu_ids.items()}


def group_members(pgids: Mapping[str, int]) -> dict[str, set[int]]:
    """Each task's processes: those in its process group (one /proc scan for all tasks)."""
    wanted = {pgid: key for key, pgid in pgids.items()}
    out: dict[str, set[int]] = {key: set() for key in pgids}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
            pgid = int(stat[stat.rindex(")") + 2:].split()[2])
        except (OSError, ValueError, IndexError):
            continue
        if pgid in wanted:
            out[wanted[pgid]].add(int(entry))
    return out


class GpuWatch:
    """The sampling thread. ``groups()``: {task: its process group id} now; ``gpu_ids``: each GPU
    task's GPU indices; ``on_sample(figures)`` gets each changed sample; ``on_give_up(misses,
    timeout)`` once if nvidia-smi stops answering (that many times in a row, each within ``timeout`` s)."""

    def __init__(self, groups: Callable[[], Mapping[str, int]], gpu_ids: Mapping[str, Sequence[int]],
                 on_sample: Callable[[dict[str, tuple[int, Optional[int]]]], None],
                 on_give_up: Callable[[int, float], None] = lambda misses, timeout: None, every: float = 5.0,
                 timeout: float = 5.0, sampler: Callable[[float], Optional[tuple]] = query) -> None:
        self.groups, self.gpu_ids, self.on_sample, self.on_give_up = groups, dict(gpu_ids), on_sample, on_give_up
        self.every, self.timeout, self.sampler = every, timeout, sampler
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="gpuwatch")
        self._last: dict[str, tuple[int, Optional[int]]] = {}

    def start(self) -> "GpuWatch":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout * 2 + 1)

    def sample_once(self) -> Optional[dict[str, tuple[int, Optional[int]]]]:
        """One sample: the figures when they changed since the last, else None."""
        got = self.sampler(self.timeout)
        if got is None:
            raise OSError("nvidia-smi did not answer")
        apps, utils = got
        figures = usage(group_members(self.groups()), self.gpu_ids, apps, utils)
        if figures == self._last:
            return None
        self._last = figures
        return figures

    def _loop(self) -> None:
        misses = 0
        while not self._stop.is_set():
            try:
                figures = self.sample_once()
                misses = 0
                if figures is not None:
                    self.on_sample(figures)
            except OSError:
                misses += 1
                if misses >= 3:
                    self.on_give_up(misses, self.timeout)
                    return
            except Exception:  # noqa: BLE001 - a watch must never take the supervisor down
                return
            self._stop.wait(self.every)
