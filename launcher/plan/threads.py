"""Thread budgets for tasks that share a host (``devices: {threads: auto | N | 0}``).

TensorFlow sizes its intra-op and inter-op thread pools for the whole machine (and OpenMP/oneDNN
likewise), so two tasks on one host run twice as many busy threads as it has cores. A budget is
the number each task gets for all three of ``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``
(read by TensorFlow's runtime when it starts) and ``OMP_NUM_THREADS``:

* ``auto``: the host's cores shared among the tasks on it (``shares``: floor division, the
  remainder to the first tasks, at least 1 each). Where the plan knows the cores (the local
  backend; docker's containers, all on the engine's machine) the plan holds the figures;
  elsewhere the plan gives each task its place on its host (``TFCLUSTER_THREADS=I/N``) and the
  figures are made where the task starts (``complete``): by the task wrapper on an ssh host, by
  the step's shell on a Slurm node (SLURM_CPUS_ON_NODE).
* ``N``: every task gets N.  ``0``: nothing is set.

The inter-op pool never gets fewer than ``INTEROP_MIN`` (2) threads: TensorFlow runs blocking ops
there (a parameter server's remote reads, a dataset's ``get_next``), and with one thread the op
that would unblock them can wait forever (tensorflow/tensorflow#38969 "pass if set 2", #10369).
Three parameter_server tasks on a 2-core host with one inter-op thread each hung past 300 s in
our suite (a chief evaluating the test split after every epoch beside one ps and one worker);
with two they finish. Inter-op threads mostly wait, so the floor costs no cores; intra-op and
OpenMP (the compute) keep the budget.

A variable the spec's ``env:`` sets is never overridden. Imports nothing of ours: the task
wrapper (stdlib only, copied to hosts) and the Slurm step's shell have their own copies of
``complete``'s arithmetic.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Sequence

NAMES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
INTEROP = "TF_NUM_INTEROP_THREADS"
INTEROP_MIN = 2


def shares(cores: int, n: int) -> list[int]:
    """``n`` tasks' budgets on a host of ``cores``: they add up to ``cores`` (floor division,
    the remainder to the first tasks), at least 1 each (more tasks than cores: 1 each)."""
    if n <= 0:
        return []
    base, extra = divmod(max(int(cores), 1), n)
    return [max(base + (1 if i < extra else 0), 1) for i in range(n)]


def share(cores: int, place: int, n: int) -> int:
    """The budget of the task at ``place`` (0-based) of ``n`` on a host of ``cores``: ``shares``'s
    element, computed alone (the plan asks once per task: building the whole list each time made a
    plan of N tasks on one host cost N squared, 41 CPU-s for 20,000 local tasks)."""
    if not 0 <= place < n:
        raise IndexError(f"place {place} of {n}")
    base, extra = divmod(max(int(cores), 1), n)
    return max(base + (1 if place < extra else 0), 1)


def places(hosts: Sequence[str]) -> list[tuple[int, int]]:
    """Each task's (place, count) on its host, tasks in plan order: ``["a", "a", "b"]`` ->
    ``[(0, 2), (1, 2), (0, 1)]``."""
    count: dict[str, int] = {}
    seen: dict[str, int] = {}
    for h in hosts:
        count[h] = count.get(h, 0) + 1
    out = []
    for h in hosts:
        out.append((seen.get(h, 0), count[h]))
        seen[h] = seen.get(h, 0) + 1
    return out


def budget_env(threads: int, user_env: Iterable[str] = ()) -> dict[str, str]:
    """The variables a budget sets, without those the user's env already sets (theirs win); the
    inter-op pool gets at least ``INTEROP_MIN``."""
    if threads <= 0:
        return {}
    user = set(user_env)
    return {name: str(max(threads, INTEROP_MIN) if name == INTEROP else threads)
            for name in NAMES if name not in user}


def parse_place(value: str) -> Optional[tuple[int, int]]:
    """``"I/N"`` (``TFCLUSTER_THREADS``) -> (I, N); None if it is not that."""
    try:
        i, n = (int(x) for x in value.split("/"))
    except (ValueError, AttributeError):
        return None
    return (i, n) if 0 <= i < n else None


def complete(env: Mapping[str, str], cores: int, marker: str) -> dict[str, str]:
    """The env with an ``auto`` budget made for ``cores`` (a backend that knows the cores only
    when it starts the task): ``marker`` (TFCLUSTER_THREADS) is replaced by the three variables,
    each unless ``env`` already has it. An env without the marker comes back unchanged."""
    out = dict(env)
    place = parse_place(out.pop(marker, "") or "")
    if place is None:
        return out
    for name, value in budget_env(share(cores, *place)).items():
        out.setdefault(name, value)
    return out


def cgroup_cores(path: str = "/sys/fs/cgroup/cpu.max") -> Optional[int]:
    """The CPU limit of this process's cgroup (v2 ``cpu.max``, e.g. a container's --cpus),
    rounded up; None when there is none or it cannot be read."""
    try:
        with open(path, encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
        if quota == "max":
            return None
        return max(-(-int(quota) // int(period)), 1)
    except (OSError, ValueError):
        return None


def local_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup CPU limit."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    limit = cgroup_cores()
    return min(n, limit) if limit else n


def describe(setting, cores: Optional[int] = None, budgets: Sequence[int] = ()) -> str:
    """How ``plan`` shows ``devices.threads``."""
    if setting == 0:
        return "threads: 0 (TensorFlow's own defaults)"
    if setting == "env":
        return "threads: as the spec's env sets them"
    if setting != "auto":
        return f"threads: {setting} per task (TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS, OMP_NUM_THREADS)"
    if cores is None:
        return "threads: auto (per host at start: its cores shared among its tasks)"
    return f"threads: auto ({cores} cores: {' + '.join(str(b) for b in budgets)} per task on the host)"


def shell_budget(marker: str, cores: str = "${SLURM_CPUS_ON_NODE:-$(nproc)}") -> str:
    """``complete`` as POSIX shell, for a command line that runs on the task's host (the Slurm
    step's shell: ``cores`` is the job's CPUs on that node, else what nproc says)."""
    names = " ".join(f'{n}="${{{n}:-$t}}"' if n == INTEROP else f'{n}="${{{n}:-$b}}"' for n in NAMES)
    return (f'if [ -n "${{{marker}:-}}" ]; then i=${{{marker}%/*}}; n=${{{marker}#*/}}; c={cores}; '
            f'b=$((c / n)); if [ "$i" -lt $((c % n)) ]; then b=$((b + 1)); fi; if [ "$b" -lt 1 ]; then b=1; fi; '
            f't=$b; if [ "$t" -lt {INTEROP_MIN} ]; then t={INTEROP_MIN}; fi; export {names}; unset {marker}; fi')
