"""What the task wrapper (taskwrap.py) makes of its host for its task, stdlib only: the thread
budget and the GPUs it sets in the task's environment before the task starts (``--threads``,
``--gpus``: the placement is gpuplace.py's, the host's GPUs gpuquery.py's), and the task's GPU
figures while it runs (``--gpu-watch``). Shipped next to taskwrap.py, with gpuplace.py and
gpuquery.py, wherever it runs (the ssh backend uploads them, the worker image copies them).
"""

from __future__ import annotations

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # shipped beside it (TASK_FILES)
from sibling import sibling  # noqa: E402

sys.path.pop(0)

THREAD_NAMES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def host_cores() -> int:
    """This host's cores for this process: CPU affinity, capped by a cgroup v2 CPU limit
    (launcher/plan/threads.py's local_cores; this file is stdlib only and stands alone)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            n = min(n, max(-(-int(quota) // int(period)), 1))
    except (OSError, ValueError):
        pass
    return n


def thread_budget(var: str) -> None:
    """``--threads VAR``: make the task's thread budget from VAR's ``I/N`` (launcher/plan/threads.py's
    share: floor division, the remainder to the first tasks, at least 1; the inter-op pool at
    least 2, its INTEROP_MIN), in this process's env."""
    value = os.environ.pop(var, "")
    try:
        place, n = (int(x) for x in value.split("/"))
    except ValueError:
        return
    if not 0 <= place < n:
        return
    base, extra = divmod(host_cores(), n)
    budget = max(base + (1 if place < extra else 0), 1)
    for name in THREAD_NAMES:
        os.environ.setdefault(name, str(max(budget, 2) if name == "TF_NUM_INTEROP_THREADS" else budget))


def gpu_request(var: str, limit_var: str, coll_var: str, say) -> "str | None":
    """``--gpus VAR``: make the task's GPUs from VAR's request on this host (gpuplace.complete),
    in this process's env, and ``say`` the given line; the problem, if the host cannot meet it."""
    if var not in os.environ:
        return None
    gpuplace, gpuquery = sibling("gpuplace"), sibling("gpuquery")
    gpus = gpuquery.host_gpus(fresh_for=gpuquery.FRESH)  # placement units: a MIG device is one; the host's CUDA_VISIBLE_DEVICES bounds them
    env, problem = gpuplace.complete(dict(os.environ), gpus, var, limit_var, coll_var or None)
    if problem:
        import socket

        return "%s %s" % (socket.gethostname(), problem)
    os.environ.clear()
    os.environ.update(env)
    visible = env.get(gpuplace.CUDA_VAR)
    say(gpuplace.given_line(gpuplace.watched_ids(visible, gpus) if visible is not None else [], visible,
                            env.get(coll_var, "") if coll_var else ""))
    return None


QUERY_TIMEOUT = 10.0  # s: one nvidia-smi query of --gpu-watch; three misses in a row end the watch


def watch_gpus(every: float, visible: "str | None", members, done: threading.Event, say) -> None:
    """``--gpu-watch``: the task's GPU figures (what the pids ``members()`` gives hold on the GPUs
    its CUDA_VISIBLE_DEVICES ``visible`` names, how busy they are), each change one line ``say``s."""
    if visible is not None and visible.strip().startswith("-"):
        return  # CUDA_VISIBLE_DEVICES=-1: a CPU task (no nvidia-smi call at all)
    try:
        gpuplace, gpuquery = sibling("gpuplace"), sibling("gpuquery")
    except ImportError:
        return
    ids = gpuplace.watched_ids(visible, gpuquery.host_gpus(fresh_for=gpuquery.FRESH))
    last, misses = None, 0
    while ids and not done.is_set():
        # nvidia-smi may take seconds on a busy host (the suite's stand-in, a Python script, took
        # over 2 s at load 20): the sampling interval is not its deadline.
        got = gpuquery.query(QUERY_TIMEOUT)
        if got is None:
            misses += 1
            if misses >= 3:
                say("taskwrap: nvidia-smi did not answer 3 times in a row; no more GPU figures for this task\n")
                return
        else:
            misses = 0
            fig = gpuquery.figures(set(members()), ids, *got)
            if fig != last and not done.is_set():
                last = fig
                say(gpuplace.figures_line(*fig))
        done.wait(every)
