"""Which of its host's GPUs a task gets: the arithmetic, in one place, stdlib only.

The plan (launcher/plan/gpus.py) runs it where it knows a host's GPUs (the local backend, from
``nvidia-smi -L`` at plan time); elsewhere the plan gives each GPU task a request (the
``TFCLUSTER_GPUS`` marker, ``format_request``) and the task wrapper (taskwrap.py ``--gpus VAR``,
uploaded next to this file) completes it on the host with the indices ``nvidia-smi -L`` lists
there (``complete``). Both call ``resolve``, so a task gets the same GPUs either way.

A request (the marker's fields, space-separated ``key=value``):

* ``take``: ``auto`` (the host's usable GPUs divided among its auto tasks; more tasks than GPUs:
  round-robin, shared), ``all`` (every usable GPU), or ``N`` (its own N, disjoint from its
  neighbours', by ``offset``);
* ``place=I/N``: the task's place among its host's ``auto`` tasks;
* ``offset``: GPUs the host's ``N``-tasks before it take (for an auto task: all the N-tasks take);
* ``tasks``: the host's GPU tasks (``all`` with more than one shares);
* ``use``: ``all`` or the comma list of GPU indices ``devices.gpus`` lets the run use (``need``
  marks a ``devices.gpus`` count or list: the host must have those GPUs);
* ``mem``: ``devices.gpu_memory`` (auto, growth, all, or MiB); ``coll``: the collective
  implementation (``nccl`` refuses a shared GPU).
Imports nothing; Python 3.6+.
"""

GROWTH_VAR = "TF_FORCE_GPU_ALLOW_GROWTH"
CUDA_VAR = "CUDA_VISIBLE_DEVICES"
# CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi (whose indices the plan uses)
# by PCI bus. With this, CUDA_VISIBLE_DEVICES=1 is nvidia-smi's GPU 1.
ORDER_VAR, ORDER = "CUDA_DEVICE_ORDER", "PCI_BUS_ID"


def format_request(take, place=0, n=1, offset=0, tasks=1, use="all", need=False, mem="auto", coll="auto"):
    """The marker's text for one task's request."""
    return "take=%s place=%d/%d offset=%d tasks=%d use=%s need=%d mem=%s coll=%s" % (
        take, place, n, offset, tasks, use, 1 if need else 0, mem, coll)


def parse_request(text):
    """The marker's fields as a dict, or None when it is not one."""
    out = {}
    try:
        for part in (text or "").split():
            key, value = part.split("=", 1)
            out[key] = value
        place, n = (int(x) for x in out.get("place", "0/1").split("/"))
        req = {"take": out["take"], "place": place, "n": max(n, 1), "offset": int(out.get("offset", "0")),
               "tasks": int(out.get("tasks", "1")), "use": out.get("use", "all"), "need": out.get("need") == "1",
               "mem": out.get("mem", "auto"), "coll": out.get("coll", "auto")}
    except (KeyError, ValueError):
        return None
    if req["take"] not in ("auto", "all") and not req["take"].isdigit():
        return None
    return req


def usable(host_ids, use):
    """The host's GPU indices the run may use: ``use`` is ``all`` or a comma list."""
    if use == "all":
        return list(host_ids)
    wanted = [int(x) for x in use.split(",") if x.strip()]
    return [i for i in wanted if i in set(host_ids)]


def plural(n, word="GPU"):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def resolve(req, host_ids):
    """(ids, shared, problem) for one request on a host whose GPU indices are ``host_ids``:
    ``ids`` the task's GPUs (empty: the host has none it may use, the task runs on CPU),
    ``shared`` whether another task uses one of them, ``problem`` a phrase (without the host's
    name) when the request cannot be met."""
    use = usable(host_ids, req["use"])
    if req["need"] and req["use"] != "all":
        missing = [i for i in req["use"].split(",") if i and int(i) not in set(host_ids)]
        if missing:
            return [], False, "has %s (%s), not GPU %s that devices.gpus asks for" % (
                plural(len(host_ids)), ",".join(str(i) for i in host_ids) or "none", ",".join(missing))
    take = req["take"]
    if take.isdigit():
        want = int(take)
        end = req["offset"] + want
        if end > len(use):
            return [], False, "has %s; its GPU tasks need %d" % (plural(len(use)), end)
        return use[req["offset"]:end], False, None
    if not use:
        return [], False, None
    if take == "all":
        shared = req["tasks"] > 1
    else:
        rest = use[req["offset"]:]
        if not rest:
            return [], False, "has %s, all taken by tasks with a GPU count; none left for the auto tasks" % (
                plural(len(use)))
        n, place = req["n"], req["place"]
        if n <= len(rest):  # disjoint: floor division, the remainder to the first tasks
            base, extra = divmod(len(rest), n)
            start = place * base + min(place, extra)
            ids = rest[start:start + base + (1 if place < extra else 0)]
            return ids, False, None
        # round-robin: a GPU is shared by the tasks whose places differ by a multiple of the GPUs
        count = len(rest)
        shared = place + count < n or place - count >= 0
        return [rest[place % count]], shared, _nccl(req, True)
    return use, shared, _nccl(req, shared)


def _nccl(req, shared):
    if shared and req["coll"] == "nccl":
        return "would share a GPU between tasks, and NCCL refuses two ranks on one GPU (Duplicate GPU detected)"
    return None


def memory_env(mem, shared, env):
    """TF_FORCE_GPU_ALLOW_GROWTH=true for ``devices.gpu_memory`` growth, or auto on a shared GPU,
    unless ``env`` has it (a MiB limit is ``complete``'s ``limit_var``)."""
    if mem == "growth" or (mem == "auto" and shared):
        if GROWTH_VAR not in env:
            return {GROWTH_VAR: "true"}
    return {}


def complete(env, host_ids, marker, limit_var):
    """(env, problem): ``env`` with the request in ``marker`` made for a host with GPU indices
    ``host_ids``: CUDA_VISIBLE_DEVICES (unless ``env`` sets it), the memory variables, and the
    marker removed. An env without the marker comes back unchanged."""
    out = dict(env)
    req = parse_request(out.pop(marker, ""))
    if req is None:
        return out, None
    ids, shared, problem = resolve(req, host_ids)
    if problem:
        return out, problem
    if ids:
        out.setdefault(CUDA_VAR, ",".join(str(i) for i in ids))
        out.setdefault(ORDER_VAR, ORDER)
        out.update({k: v for k, v in memory_env(req["mem"], shared, out).items()})
        if req["mem"].isdigit():
            out.setdefault(limit_var, req["mem"])
    return out, None


def parse_list(text):
    """``nvidia-smi -L``'s lines -> [(index, name, uuid)]: ``GPU 0: NVIDIA A100-SXM4-40GB (UUID:
    GPU-...)``; MIG lines (indented ``MIG ...``) and anything else are skipped."""
    out = []
    for line in (text or "").splitlines():
        if not line.startswith("GPU "):
            continue
        head, _, rest = line.partition(": ")
        try:
            index = int(head[4:])
        except ValueError:
            continue
        name, _, uuid = rest.rpartition(" (UUID: ")
        if not _:
            name, uuid = rest, ""
        out.append((index, name.strip(), uuid.rstrip(")").strip()))
    return out


def host_gpus(timeout=10.0):
    """This host's GPUs from ``nvidia-smi -L``: [(index, name, uuid)]; [] when nvidia-smi is
    missing, fails or times out (no NVIDIA GPU this run can use)."""
    import subprocess

    try:
        proc = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    return parse_list(proc.stdout.decode("utf-8", "replace"))


# What a task's GPUs hold and how busy they are (launcher/supervise/gpuwatch.py samples the local tasks, the
# task wrapper, ``--gpu-watch``, its own task on an ssh host): the queries and their parsing.
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
GPUS_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
              "--format=csv,noheader,nounits"]


def _int(text):
    try:
        return int(float(text.strip()))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_apps(text):
    """``pid, used_memory`` lines -> {pid: MiB} (a pid listed on several GPUs: the sum)."""
    out = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 2:
            continue
        pid, mib = _int(parts[0]), _int(parts[1])
        if pid is not None and mib is not None:
            out[pid] = out.get(pid, 0) + mib
    return out


def parse_gpus(text):
    """``index, utilization.gpu, ...`` lines -> {index: utilisation % or None}."""
    out = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 2:
            continue
        index = _int(parts[0])
        if index is not None:
            out[index] = _int(parts[1])
    return out


def figures(pids, ids, apps, utils):
    """(MiB the processes ``pids`` hold, utilisation % of the busiest of GPUs ``ids`` or None)."""
    busy = [utils[i] for i in ids if utils.get(i) is not None]
    return sum(apps.get(pid, 0) for pid in pids), (max(busy) if busy else None)


def query(timeout=5.0):
    """Both queries: ({pid: MiB}, {index: util}), or None when nvidia-smi is missing, fails or
    times out."""
    import subprocess

    try:
        apps = subprocess.run(APPS_QUERY, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=timeout)
        gpus = subprocess.run(GPUS_QUERY, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if apps.returncode != 0 or gpus.returncode != 0:
        return None
    return parse_apps(apps.stdout.decode("utf-8", "replace")), parse_gpus(gpus.stdout.decode("utf-8", "replace"))


def watched_ids(visible, host):
    """The GPU indices a task's CUDA_VISIBLE_DEVICES (``visible``: its value, or None when unset)
    names among ``host``'s GPUs [(index, name, uuid)]: [] for none (-1, or a host without GPUs),
    every GPU of the host when unset; UUIDs are matched to their index."""
    if not host:
        return []
    if visible is None:
        return [g[0] for g in host]
    out = []
    for part in visible.split(","):
        part = part.strip()
        if not part:
            continue
        if part.lstrip("-").isdigit():
            if int(part) < 0:
                break  # CUDA stops at the first invalid index: -1 hides every GPU
            if any(g[0] == int(part) for g in host):
                out.append(int(part))
            continue
        match = [g[0] for g in host if g[2] == part or (part.startswith("GPU-") and g[2].startswith(part))]
        if match:
            out.append(match[0])
    return out


# The line the wrapper writes for its task's figures (``taskwrap: GPU figures [MiB, util]``):
# the ssh backend reads it off the task's output (launcher/backends/ssh/task.py) and records it.
FIGURES_LINE = "GPU figures"


def figures_line(mib, util):
    return "taskwrap: %s [%d, %s]\n" % (FIGURES_LINE, mib, "null" if util is None else int(util))


def parse_figures_line(line):
    """(MiB, util or None) from a wrapper's figures line, or None when ``line`` is not one."""
    head = "taskwrap: %s [" % FIGURES_LINE
    if not line.startswith(head) or len(line) > 80 or not line.rstrip().endswith("]"):
        return None
    parts = [p.strip() for p in line.rstrip()[len(head):-1].split(",")]
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    if parts[1] == "null":
        return int(parts[0]), None
    return (int(parts[0]), int(parts[1])) if parts[1].isdigit() else None


# The line the wrapper writes once it has made a task's request (``taskwrap: GPUs given 0,1``, or
# ``none``): which of its host's GPUs the task got; the ssh backend records it (``status``).
GIVEN_LINE = "GPUs given"


def given_line(ids):
    return "taskwrap: %s %s\n" % (GIVEN_LINE, ",".join(str(i) for i in ids) or "none")


def parse_given_line(line):
    """The GPU indices of a wrapper's given line ([] for none), or None when ``line`` is not one."""
    head = "taskwrap: %s " % GIVEN_LINE
    if not line.startswith(head) or len(line) > 200:
        return None
    rest = line[len(head):].strip()
    if rest == "none":
        return []
    parts = rest.split(",")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None
