"""The spec's rules that one field's model cannot check alone, each problem a ``(loc, message)``
pair that the loader turns into ``FILE:LINE: field: problem; fix``.

``check_bounds``: on the YAML's data, before the models see it, the task counts and what a task is
started with against the bounds (a count of 100,000,000 would be planned task by task).
``check_rules``: on the validated Spec, the rules that span fields (topology per strategy, host
references, what the backend can do) and the backend's own ``check_spec``. Above the backends: it
asks the registry what each backend can do.
"""

from __future__ import annotations

import difflib

from launcher.backends import backend_class, backend_classes
from launcher.bounded import listing
from launcher.bounded import shown as shown_value
from launcher.spec.model import TASK_TYPES, Spec
from launcher.spec.yamlread import ARG_STRLEN, ARG_TOTAL, SPEC_TASKS


# The rules the loader applies that `tfcluster schema` (JSON Schema) cannot express: a value the schema
# accepts may still be refused by one of these, and by nothing else (tests/unit/spec/test_schema_types.py
# checks it on every key; docs/concepts/spec.md lists them). (name, pattern of its message, reason).
SCHEMA_BLIND: tuple[tuple[str, str, str], ...] = (
    ("task counts per strategy", r"evaluators; at most one|chiefs; a cluster has at most one|runs one task on one "
     r"host|has no parameter servers|no workers; multi_worker_mirrored|parameter_server needs",
     "how many tasks of each type a spec may have depends on its strategy (one field against another)"),
    ("a task group's own keys", r"ports listed for \d+ tasks|hosts is empty; name at least one|min \d+ is above count",
     "a group's ports, hosts and min are checked against its count"),
    ("keys for another strategy", r"devices\.cpus|only strategy tpu uses a TPU|only multi_worker_mirrored runs "
     r"collectives", "devices.cpus, tpu: and collective: are read by one strategy only"),
    ("what the backend can do", r"backend \w+ cannot |only workers can be fewer|backend ssh needs hosts|"
     r"node\(s\) x \d+ task\(s\) per node", "min, elastic:, discovery: and the hosts depend on the backend's "
     "capabilities and sizes"),
    ("names of hosts", r"unknown host|is defined twice|cannot be combined with ssh\.sync",
     "a name must be one of hosts: (ssh.supervisor, tasks.<type>.hosts), and each host's name once"),
    ("GPUs", r"devices\.gpus 0 lets no task|lists a GPU twice", "a group's gpus against devices.gpus; "
     "a GPU index once in a list (JSON Schema's uniqueItems sees 1 and 1.0 as one, but not the loader's order)"),
    ("a shell command line", r"empty command|cannot split the command",
     "entrypoint as a string is split like a shell: a command of quotes only ('' or \"\") is empty"),
    ("a gs:// state dir is shared", r"a gs:// dir is shared storage", "state.sync: copy against a gs:// state.dir"),
    ("Slurm's own options", r"is not an option; give each|tfcluster sets [-\w]+ itself",
     "slurm.sbatch/srun items are read as sbatch/srun parse them (an option, or the value of the one before; "
     "the options tfcluster sets itself refused by any spelling)"),
    ("a client certificate and its key", r"give cert and key together",
     "docker.tls.cert and docker.tls.key are given together (one field against the other)"),
)


def check_bounds(data: dict) -> list[tuple[tuple, str]]:
    """The task counts and what a task is started with (its command line, its environment),
    against SPEC_TASKS and the kernel's limits, checked on the YAML's data before the models see
    it (a count of 100,000,000 would be planned task by task). A value of the wrong type is left
    to the models' own message."""
    problems: list[tuple[tuple, str]] = []
    tasks = data.get("tasks")
    total = 0
    if isinstance(tasks, dict):
        for task_type, group in tasks.items():
            count = group.get("count") if isinstance(group, dict) else group
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
                if count > SPEC_TASKS:
                    problems.append((("tasks", task_type), f"{count:,} tasks, above the bound of {SPEC_TASKS:,} "
                                     "tasks a spec may ask for; set a smaller count"))
        if total > SPEC_TASKS and not problems:
            problems.append((("tasks",), f"{total:,} tasks in all, above the bound of {SPEC_TASKS:,} tasks a "
                             "spec may ask for; set smaller counts"))
    used = 0
    entry = data.get("entrypoint")
    parts = [entry] if isinstance(entry, str) else list(entry) if isinstance(entry, list) else []
    for i, part in enumerate(parts):
        if not isinstance(part, str):
            continue
        loc = ("entrypoint",) if isinstance(entry, str) else ("entrypoint", i)
        size = len(part.encode("utf-8", "surrogatepass")) + 1
        used += size
        if "\0" in part:
            problems.append((loc, "holds a NUL character (\\x00), which no command line can carry; remove it"))
        elif size > ARG_STRLEN:
            problems.append((loc, f"{size - 1:,} bytes, above the kernel's bound of {ARG_STRLEN:,} bytes for one "
                             "argument (MAX_ARG_STRLEN); put long input in a file the command reads"))
    env = data.get("env")
    if isinstance(env, dict):
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float)) or isinstance(value, bool):
                continue
            text = f"{key}={value}"
            size = len(text.encode("utf-8", "surrogatepass")) + 1
            used += size
            if "\0" in text:
                problems.append((("env", key), "holds a NUL character (\\x00), which no environment can carry; "
                                 "remove it"))
            elif size > ARG_STRLEN:
                problems.append((("env", key), f"{size - 1:,} bytes as KEY=value, above the kernel's bound of "
                                 f"{ARG_STRLEN:,} bytes for one variable (MAX_ARG_STRLEN); put long values in a "
                                 "file the task reads"))
    if used > ARG_TOTAL and not problems:
        problems.append((("env",) if isinstance(env, dict) else ("entrypoint",),
                         f"the command line and env: together are {used:,} bytes, above the bound of "
                         f"{ARG_TOTAL:,} (half the kernel's usual ARG_MAX, the rest is for TF_CONFIG and the "
                         "inherited environment); put long values in a file the task reads"))
    problems += _nul_strings(data, skip={"entrypoint", "env"} if problems else set())
    return problems


def _nul_strings(data: dict, skip: set) -> list[tuple[tuple, str]]:
    """A NUL in any string of the spec, a key or a value (a path, a user, an image, a name): refused
    where it is, before anything uses it (a NUL cannot pass to a command, a file name or Compose).
    Each mapping or list is walked once, however often YAML aliases repeat it."""
    problems: list[tuple[tuple, str]] = []
    seen: set[int] = set()
    stack: list[tuple[tuple, object]] = [((k,), v) for k, v in data.items() if k not in skip]
    stack += [((k,), k) for k in data if isinstance(k, str) and "\0" in k]
    while stack and len(problems) < 20:
        loc, value = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                problems.append((loc, "holds a NUL character (\\x00), which no name, path or command can carry; "
                                 "remove it"))
        elif isinstance(value, (dict, list)) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(k, str) and "\0" in k:
                    stack.append((loc + (k,), k))
                stack.append((loc + (k,), v))
    return sorted(problems, key=lambda p: [str(x) for x in p[0]])


def check_rules(spec: Spec) -> list[tuple[tuple, str]]:
    """Rules that span fields: topology per strategy, host references. Returns (loc, message)."""
    problems: list[tuple[tuple, str]] = []
    t = spec.tasks
    chief, worker, ps, evaluator = (t.count(x) for x in TASK_TYPES)
    if evaluator > 1:
        problems.append((("tasks", "evaluator"), f"{evaluator} evaluators; at most one evaluator is allowed"))
    if chief > 1:
        problems.append((("tasks", "chief"), f"{chief} chiefs; a cluster has at most one chief"))
    if spec.single_host:
        if (chief, worker, ps, evaluator) != (0, 1, 0, 0):
            problems.append((("tasks",), f"strategy {spec.strategy} runs one task on one host; for several hosts "
                             "use multi_worker_mirrored (or set tasks: {worker: 1})"))
    elif spec.devices.cpus is not None:
        problems.append((("devices", "cpus"), f"{spec.strategy} runs one replica per task on CPU (TF splits only "
                         "GPUs across a worker's replicas); drop devices.cpus or use strategy: mirrored"))
    if spec.tpu is not None and spec.strategy != "tpu":
        problems.append((("tpu",), "only strategy tpu uses a TPU; remove tpu: or set strategy: tpu"))
    if spec.strategy == "multi_worker_mirrored":
        if ps:
            problems.append(
                (("tasks", "ps"), "multi_worker_mirrored has no parameter servers; set ps: 0 or use strategy: parameter_server")
            )
        if chief + worker == 0:
            problems.append((("tasks", "worker"), "no workers; multi_worker_mirrored needs at least one worker or chief"))
    elif spec.strategy == "parameter_server":
        if chief != 1:
            if chief == 0:
                problems.append((("tasks", "chief"), "parameter_server needs exactly one chief (the coordinator); set chief: 1"))
        if ps < 1:
            problems.append((("tasks", "ps"), "parameter_server needs at least one ps; set ps: 1 or more"))
        if worker < 1:
            problems.append((("tasks", "worker"), "parameter_server needs at least one worker; set worker: 1 or more"))

    names = [h.name for h in spec.hosts]
    known: set[str] = set()  # (sets: 10,000 hosts are 10,000 look-ups, not 50 million comparisons)
    for i, name in enumerate(names):
        if name in known:
            problems.append((("hosts", i, "name"), f"host '{name}' is defined twice; give each host a unique name"))
        known.add(name)
    unknown = 0
    for task_type in TASK_TYPES:
        group = t.group(task_type)
        for j, name in enumerate(group.hosts or ()):
            if name not in known:
                unknown += 1  # (a close match among 20,000 names costs; the first few get one)
                hint = suggest(name, names) if unknown <= 5 else ""
                defined = f"defined hosts: {listing(names, 'hosts')}" if names else \
                    "no hosts are defined; add them under hosts:"
                problems.append(((("tasks", task_type, "hosts", j)), f"unknown host {shown_value(name)}{hint}; "
                                 f"{defined}"))
    backend = backend_class(spec.backend)
    # restart.warm_standby: true on a backend that keeps no standby is not refused: the run is
    # the same, with cold restarts, and `plan` says so in one line (launcher/supervise/standby.py).
    for task_type in TASK_TYPES:
        if task_type != "worker" and t.group(task_type).min is not None:
            problems.append((("tasks", task_type, "min"), f"only workers can be fewer than count; a lost {task_type}'s "
                             "host is replaced by a spare: remove min"))
    if not backend.capabilities.elastic:  # the keys only an elastic backend honours
        for loc, given, cannot, key in ((("tasks", "worker", "min"), t.worker.min is not None,
                                         "go on with fewer workers", "min"),
                                        (("discovery",), spec.discovery is not None, "use hosts that come and go",
                                         "discovery:"),
                                        (("elastic",), spec.elastic is not None, "move tasks to other hosts",
                                         "elastic:")):
            if given:
                problems.append((loc, f"backend {spec.backend} cannot {cannot}; {key} works with backend "
                                 f"{' and '.join(_able('elastic')) or 'none'}; remove {key}"))
    for task_type in TASK_TYPES:
        if t.group(task_type).gpus and spec.devices.gpus == 0:
            problems.append((("tasks", task_type, "gpus"), f"devices.gpus 0 lets no task use a GPU; drop "
                             f"tasks.{task_type}.gpus or set devices.gpus"))
    problems += _unequal_trainers(spec)
    if spec.strategy != "multi_worker_mirrored" and spec.collective != type(spec.collective)():
        problems.append((("collective",), f"only multi_worker_mirrored runs collectives (all-reduce), not "
                         f"{spec.strategy}; remove collective:"))
    problems += backend.check_spec(spec)
    return problems


def _unequal_trainers(spec: Spec) -> list[tuple[tuple, str]]:
    """A group's ``gpus:`` that gives the chief (where it trains, in multi_worker_mirrored) another
    count than each worker: MultiWorkerMirroredStrategy needs the same devices on every worker
    (its docstring: otherwise "the behavior is undefined"; launcher/plan/gpus.py trains)."""
    from launcher.plan.gpus import take_of, trains

    t = spec.tasks
    if spec.single_host or not (t.count("chief") and t.count("worker")) or not trains(spec.strategy, "chief"):
        return []
    (chief, c_src), (worker, w_src) = take_of(spec, "chief"), take_of(spec, "worker")
    if chief == worker or spec.devices.gpus == 0:
        return []
    where = "chief" if t.group("chief").gpus is not None else "worker"
    if t.group(where).gpus is None:
        return []
    other = "worker" if where == "chief" else "chief"
    mine, theirs = (chief, worker) if where == "chief" else (worker, chief)
    return [(("tasks", where, "gpus"), f"gives the {where} {mine} GPU(s) and the {other} {theirs} "
             f"({w_src if where == 'chief' else c_src}); {spec.strategy} needs the same count on every task that "
             f"trains (TensorFlow: otherwise undefined); set tasks.{other}.gpus: {mine} too, or drop tasks.{where}.gpus")]


def _able(capability: str) -> list[str]:
    """The backends with ``capability`` (a ``Capabilities`` field), for a refusal that names them."""
    return [cls.name for cls in backend_classes() if getattr(cls.capabilities, capability)]


def suggest(word: str, options: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options`` to a misspelt ``word``, or nothing."""
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""

