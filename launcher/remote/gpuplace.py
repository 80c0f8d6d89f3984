"""Which of its host's GPUs a task gets: the arithmetic, in one place, stdlib only.

The plan (launcher/plan/gpus.py) runs it where it knows a host's GPUs (the local backend, from
``nvidia-smi -L`` at plan time); elsewhere the plan gives each GPU task a request (the
``TFCLUSTER_GPUS`` marker, ``format_request``) and the task wrapper (taskwrap.py ``--gpus VAR``,
uploaded next to this file) completes it on the host with the indices ``nvidia-smi -L`` lists
there (``complete``; asking nvidia-smi is gpuquery.py's). Both call ``resolve``, so a task gets
the same GPUs either way. The two lines the wrapper writes about its task's GPUs (given, figures)
are made and read here too.

A request (the marker's fields, space-separated ``key=value``):

* ``take``: ``auto`` (the host's usable placement units shared out by ``shares``: every trainer
  the same count, leftovers to the evaluator or idle; more trainers than units: round-robin,
  shared), ``all`` (every usable GPU), or ``N`` (its own N, disjoint from its
  neighbours', by ``offset``);
* ``place=I/N``: the task's place among its host's ``auto`` tasks, trainers first;
* ``trainers``: how many of those N places are trainers (the workers, and the chief where it
  trains: TensorFlow needs them equal, ``shares``); the rest are the evaluator's;
* ``cap``: the most GPUs a trainer gets (0: no cap): one_device's 1, or the smallest host's share
  where the plan knew every host or the ssh preflight saw every host's GPUs;
* ``offset``: GPUs the host's ``N``-tasks before it take (for an auto task: all the N-tasks take);
* ``tasks``: the host's GPU tasks (``all`` with more than one shares);
* ``use``: ``all`` or the comma list of GPU indices ``devices.gpus`` lets the run use (``need``
  marks a ``devices.gpus`` count or list: the host must have those GPUs);
* ``mem``: ``devices.gpu_memory`` (auto, growth, all, or MiB); ``coll``: the collective
  implementation (``nccl`` refuses a shared GPU; ``pick``: auto, for a multi_worker_mirrored
  trainer, NCCL where it owns its GPUs, decided where the request is made).
Imports nothing; Python 3.6+.
"""

GROWTH_VAR = "TF_FORCE_GPU_ALLOW_GROWTH"
CUDA_VAR = "CUDA_VISIBLE_DEVICES"
# CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi (whose indices the plan uses)
# by PCI bus. With this, CUDA_VISIBLE_DEVICES=1 is nvidia-smi's GPU 1.
ORDER_VAR, ORDER = "CUDA_DEVICE_ORDER", "PCI_BUS_ID"


def format_request(take, place=0, n=1, offset=0, tasks=1, use="all", need=False, mem="auto", coll="auto",
                   trainers=None, cap=0):
    """The marker's text for one task's request (``trainers``: None, every auto place is one)."""
    return "take=%s place=%d/%d trainers=%d cap=%d offset=%d tasks=%d use=%s need=%d mem=%s coll=%s" % (
        take, place, n, n if trainers is None else trainers, cap, offset, tasks, use, 1 if need else 0, mem, coll)


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
               "mem": out.get("mem", "auto"), "coll": out.get("coll", "auto"),
               "trainers": int(out.get("trainers", str(n))), "cap": int(out.get("cap", "0"))}
    except (KeyError, ValueError):
        return None
    if req["take"] not in ("auto", "all") and not req["take"].isdigit():
        return None
    return req


def _index(unit):
    """A placement unit's GPU index: the unit itself (an int) or its first field (index, name, uuid)."""
    return unit if isinstance(unit, int) else unit[0]


def usable(host_ids, use):
    """The host's placement units the run may use: ``use`` is ``all`` or a comma list of GPU
    indices (``devices.gpus``); a unit is a GPU index or an (index, name, uuid) of gpuquery.py's ``parse_list``
    (a MIG device carries its GPU's index)."""
    if use == "all":
        return list(host_ids)
    wanted = [int(x) for x in use.split(",") if x.strip()]
    return [u for i in wanted for u in host_ids if _index(u) == i]


def plural(n, word="GPU"):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def shares(count, trainers, others=0, cap=0):
    """THE arithmetic of ``auto``: ``count`` placement units of one host (GPUs, or MIG devices)
    shared out among its auto GPU tasks, ``trainers`` of them first (the workers, and the chief
    where it trains), then ``others`` (the evaluator). Pure; every backend calls it (the plan for
    local and docker, the ssh task wrapper on its host, slurm for its step counts).

    TensorFlow's rule: every trainer gets the same count. ParameterServerStrategy refuses
    unequal workers (``_set_num_gpus`` in tensorflow/python/distribute/
    parameter_server_strategy_v2.py raises "Mismatched number of GPUs per worker");
    MultiWorkerMirroredStrategy's docstring (collective_all_reduce_strategy.py): "All workers
    need to use the same number of devices, otherwise the behavior is undefined."

    So: each other task is kept one unit where the trainers still get one each, the trainers get
    the largest equal share of the rest (at most ``cap`` when cap > 0), and what is left over
    goes to the others (the evaluator needs no equal share), else stays idle: a remainder never
    goes to the first trainers. Fewer units than trainers: one each, round-robin (shared).

    Returns (places, idle): per place (trainers first) a (positions, shared) pair, positions
    being indices into the host's units, shared whether another place uses one of them; idle,
    the positions no place got."""
    n = trainers + others
    if n == 0 or count <= 0:
        return [((), False)] * n, tuple(range(max(count, 0)))
    got = []
    if count < max(trainers, 1):  # round-robin over the units, one each
        got = [(p % count,) for p in range(n)]
    else:
        if trainers:
            share = (count - others) // trainers if count - others >= trainers else count // trainers
            if cap > 0:
                share = min(share, cap)
        else:
            share = 0
        got = [tuple(range(p * share, (p + 1) * share)) for p in range(trainers)]
        rest = list(range(share * trainers, count))
        if others:
            if len(rest) >= others:  # the leftover to the others, evenly (the first one the remainder)
                base, extra = divmod(len(rest), others)
                at = 0
                for o in range(others):
                    size = base + (1 if o < extra else 0)
                    got.append(tuple(rest[at:at + size]))
                    at += size
            else:  # too few left: the others share round-robin (what is left, else every unit)
                pool = rest or list(range(count))
                got += [(pool[o % len(pool)],) for o in range(others)]
    users = {}
    for positions in got:
        for x in positions:
            users[x] = users.get(x, 0) + 1
    places = [(positions, any(users[x] > 1 for x in positions)) for positions in got]
    idle = tuple(x for x in range(count) if x not in users)
    return places, idle


# The kinds of ``PlacementProblem``: fewer usable GPUs than the tasks' counts need, GPUs devices.gpus names
# that the host lacks, more than one MIG device for a task, none left for the auto tasks, NCCL's
# one rank per GPU.
SHORT, MISSING, MIG, TAKEN, NCCL = "short", "missing", "mig", "taken", "nccl"


class PlacementProblem(str):
    """Why a request cannot be met on a host: the phrase (the str itself, without the host's
    name) and its ``kind`` (SHORT, MISSING, MIG, TAKEN, NCCL), which the planner's line is chosen
    by (launcher/plan/gpurefusal.py), never the phrase's words."""

    def __new__(cls, text, kind):
        made = str.__new__(cls, text)
        made.kind = kind
        return made


def resolve(req, host_ids):
    """(ids, shared, problem) for one request on a host whose placement units are ``host_ids``
    (GPU indices, or gpuquery.py's ``parse_list``'s (index, name, uuid)): ``ids`` the task's units (empty: the
    host has none it may use, the task runs on CPU), ``shared`` whether another task uses one of
    them, ``problem`` a phrase (without the host's name) when the request cannot be met."""
    use = usable(host_ids, req["use"])
    if req["need"] and req["use"] != "all":
        have = set(_index(u) for u in host_ids)
        missing = [i for i in req["use"].split(",") if i and int(i) not in have]
        if missing:
            return [], False, PlacementProblem("has %s (%s), not GPU %s that devices.gpus asks for" % (
                plural(len(have)), ",".join(str(i) for i in sorted(have)) or "none", ",".join(missing)), MISSING)
    take = req["take"]
    mig = any(is_mig(u) for u in use)
    if take.isdigit():
        want = int(take)
        if mig and want > 1:
            return [], False, PlacementProblem(
                "has MIG devices, and CUDA gives a process one MIG device; a task cannot use %d: set "
                "devices.gpus_per_task: 1 or auto" % want, MIG)
        end = req["offset"] + want
        if end > len(use):
            return [], False, PlacementProblem("has %s; its GPU tasks need %d" % (plural(len(use)), end), SHORT)
        return use[req["offset"]:end], False, None
    if not use:
        return [], False, None
    if take == "all":
        shared = req["tasks"] > 1
    else:
        rest = use[req["offset"]:]
        if not rest:
            return [], False, PlacementProblem(
                "has %s, all taken by tasks with a GPU count; none left for the auto tasks" % plural(len(use)), TAKEN)
        n, place = req["n"], req["place"]
        trainers = min(req.get("trainers", n), n)
        cap = 1 if mig else req.get("cap", 0)  # a MIG device is a unit, one per task
        places, _idle = shares(len(rest), trainers, n - trainers, cap)
        positions, shared = places[place] if place < len(places) else ((), False)
        ids = [rest[x] for x in positions]
        return ids, shared, _nccl(req, shared and place < trainers)
    return use, shared, _nccl(req, shared)


def _nccl(req, shared):
    if shared and req["coll"] == "nccl":
        return PlacementProblem("would share a GPU between tasks, and NCCL refuses two ranks on one GPU (Duplicate GPU "
                       "detected)", NCCL)
    return None


def memory_env(mem, shared, env):
    """TF_FORCE_GPU_ALLOW_GROWTH=true for ``devices.gpu_memory`` growth, or auto on a shared GPU,
    unless ``env`` has it (a MiB limit is ``complete``'s ``limit_var``)."""
    if mem == "growth" or (mem == "auto" and shared):
        if GROWTH_VAR not in env:
            return {GROWTH_VAR: "true"}
    return {}


def is_mig(unit):
    """A placement unit that is a MIG device (its UUID ``MIG-...``)."""
    return not isinstance(unit, int) and str(unit[2]).startswith("MIG-")


def within(units, limit):
    """(units, by_uuid): the host's placement units a CUDA_VISIBLE_DEVICES value ``limit`` leaves
    (None: no limit), in the limit's order, and whether it named them by UUID. CUDA's reading:
    a comma list of indices or UUIDs (``GPU-...``, ``MIG-...``; a unique prefix names one), read
    up to the first entry that names no device; a negative index hides every GPU. An index of a
    GPU in MIG mode names its MIG devices; a ``GPU-`` UUID names a whole GPU only."""
    if limit is None:
        return list(units), False
    out, by_uuid = [], False
    for part in limit.split(","):
        part = part.strip()
        if part.lstrip("-").isdigit():
            if int(part) < 0:
                break
            match = [u for u in units if _index(u) == int(part)]
        elif part:
            by_uuid = True
            match = [u for u in units if not isinstance(u, int) and u[2]
                     and (u[2] == part or u[2].startswith(part))]
            if len(match) > 1 and not any(u[2] == part for u in match):
                match = []  # an ambiguous prefix names none
            match = [u for u in match if u[2] == part] or match
        else:
            match = []
        if not match:
            break
        out += [u for u in match if u not in out]
    return out, by_uuid


def visible_value(units, by_uuid):
    """The CUDA_VISIBLE_DEVICES value naming ``units``: their indices, or their UUIDs where the
    limit named UUIDs or a unit is a MIG device (CUDA names a MIG device only by its UUID)."""
    return ",".join(str(u[2]) if not isinstance(u, int) and (by_uuid or is_mig(u)) else str(_index(u))
                    for u in units)


def complete(env, host_ids, marker, limit_var, coll_var=None):
    """(env, problem): ``env`` with the request in ``marker`` made for a host with placement units
    ``host_ids`` (GPU indices, or gpuquery.py's ``parse_list``'s tuples): CUDA_VISIBLE_DEVICES, the memory
    variables, and the marker removed. A CUDA_VISIBLE_DEVICES already in ``env`` (the host's, or
    the launcher's) is the limit: the task gets a subset of it, named as it names them (indices or
    UUIDs). A request with ``coll=pick`` (a multi_worker_mirrored trainer under collective auto)
    sets ``coll_var`` to nccl where the task owns whole GPUs (launcher/plan/gpus.py
    collective_choice: the same rule). An env without the marker comes back unchanged."""
    out = dict(env)
    req = parse_request(out.pop(marker, ""))
    if req is None:
        return out, None
    units, by_uuid = within(host_ids, out.get(CUDA_VAR))
    ids, shared, problem = resolve(req, units)
    if problem:
        return out, problem
    if ids:
        out[CUDA_VAR] = visible_value(ids, by_uuid)
        out.setdefault(ORDER_VAR, ORDER)
        out.update({k: v for k, v in memory_env(req["mem"], shared, out).items()})
        if req["mem"].isdigit():
            out.setdefault(limit_var, req["mem"])
        if coll_var and req["coll"] == "pick" and not shared and not any(is_mig(u) for u in ids):
            out.setdefault(coll_var, "nccl")
    elif CUDA_VAR in out:
        out[CUDA_VAR] = "-1"  # the limit leaves none: CPU, said as such
    return out, None


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
# ``none``): which of its host's GPUs the task got, then, where they are not plain indices, the
# CUDA_VISIBLE_DEVICES it set (``visible=MIG-...``: a MIG device, or UUIDs where the host's limit
# named UUIDs), and the all-reduce it set (``collective=nccl``: collective auto decided on the
# host); the ssh backend records it (a task_gpus event: ``status``).
GIVEN_LINE = "GPUs given"
_UUID_CHARS = frozenset("0123456789abcdefABCDEF-GPUMI")


def given_line(ids, visible=None, collective=""):
    text = "taskwrap: %s %s" % (GIVEN_LINE, ",".join(str(i) for i in ids) or "none")
    if visible and any(p.strip().startswith(("GPU-", "MIG-")) for p in visible.split(",")):
        text += " visible=" + ",".join(p.strip() for p in visible.split(","))
    collective = (collective or "").strip().lower()
    if collective.isalpha() and len(collective) <= 10:  # (a spec's env may set any value: said only if a word)
        text += " collective=" + collective
    return text + "\n"


def _uuid_like(part):
    """A CUDA_VISIBLE_DEVICES entry the given line may carry: a GPU-/MIG- UUID (or its prefix),
    hex and dashes only, bounded (the line comes from another machine)."""
    return part.startswith(("GPU-", "MIG-")) and len(part) <= 64 and all(c in _UUID_CHARS for c in part)


def parse_given_line(line):
    """(GPU indices ([] for none), its CUDA_VISIBLE_DEVICES where the line says it ("" otherwise),
    the collective it set ("" none)) of a wrapper's given line, or None when ``line`` is not one."""
    head = "taskwrap: %s " % GIVEN_LINE
    if not line.startswith(head) or len(line) > 2000:
        return None
    first, *more = line[len(head):].split() or [""]
    if first == "none":
        ids = []
    elif first and all(p.isdigit() for p in first.split(",")):
        ids = [int(p) for p in first.split(",")]
    else:
        return None
    visible, collective = "", ""
    for part in more:
        key, _, value = part.partition("=")
        if key == "visible" and value and all(_uuid_like(v) for v in value.split(",")):
            visible = value
        elif key == "collective" and value.isalpha() and value.islower() and len(value) <= 10:
            collective = value  # (anything else after the indices: not read)
    return ids, visible, collective
