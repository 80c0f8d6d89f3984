"""The cluster spec (cluster.yaml): models, loading, and validation with one-line errors.

The YAML is parsed only here, at the edge. The models are frozen pydantic models so the
rest of tfcluster works on validated, immutable values. Every problem becomes one line
``FILE:LINE: field.path: what is wrong; the fix``.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import SpecError
from .export.options import KubernetesOptions, VertexOptions

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# Cluster strategies run a TF cluster over tasks and hosts; single-host strategies run one task.
CLUSTER_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
SINGLE_HOST_STRATEGIES = ("mirrored", "central_storage", "one_device", "default", "tpu")
STRATEGIES = CLUSTER_STRATEGIES + SINGLE_HOST_STRATEGIES
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by tfcluster for every task; a user value would silently be overwritten.
RESERVED_ENV = ("TF_CONFIG",)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Host(_Model):
    """A machine tasks run on: how the launcher reaches it, and what other tasks dial."""

    name: str
    ssh: Optional[str] = None
    address: Optional[str] = None
    port: Optional[int] = Field(default=None, ge=1, le=65535, strict=True)
    user: Optional[str] = None
    key: Optional[str] = None
    # ssh backend: ProxyJump hop(s) like "bastion" or "me@jump:2222,other" (also read from ~/.ssh/config).
    proxy_jump: Optional[str] = None
    # ssh backend: the interpreter that runs the task wrapper and preflight here (default: ssh.python).
    python: Optional[str] = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a valid host name; use letters, digits, '.', '_' or '-'")
        return v

    @property
    def ssh_target(self) -> str:
        return self.ssh or self.name

    @property
    def dial_address(self) -> str:
        """The address other tasks use to reach this host (defaults to the SSH host part)."""
        if self.address:
            return self.address
        target = self.ssh_target.rsplit("@", 1)[-1]
        return target


class TaskGroup(_Model):
    """``N`` or ``{count: N, hosts: [names], ports: [..]}`` for one task type."""

    count: int = Field(ge=0, strict=True)
    hosts: Optional[tuple[str, ...]] = None
    ports: Optional[tuple[int, ...]] = None
    # Elastic runs (launcher/elastic.py): with no spare host left, the group may go on with fewer
    # workers, never below min. None: every worker is needed.
    min: Optional[int] = Field(default=None, ge=1, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        return {"count": value}

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: Optional[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
        if v is None:
            return v
        for p in v:
            if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
                raise ValueError(f"port {p!r} is out of range; use a whole number from 1 to 65535")
        return v

    @model_validator(mode="after")
    def _ports_match_count(self) -> "TaskGroup":
        if self.ports is not None and len(self.ports) != self.count:
            raise ValueError(
                f"{len(self.ports)} ports listed for {self.count} tasks; list exactly one port per task"
            )
        if self.hosts is not None and self.count and not self.hosts:
            raise ValueError("hosts is empty; name at least one host or drop the key")
        if self.min is not None and self.min > self.count:
            raise ValueError(f"min {self.min} is above count {self.count}; set min to at most {self.count}")
        return self


class Tasks(_Model):
    chief: TaskGroup = TaskGroup(count=0)
    worker: TaskGroup = TaskGroup(count=0)
    ps: TaskGroup = TaskGroup(count=0)
    evaluator: TaskGroup = TaskGroup(count=0)

    def group(self, task_type: str) -> TaskGroup:
        return getattr(self, task_type)

    def count(self, task_type: str) -> int:
        return self.group(task_type).count


class Ports(_Model):
    base: int = Field(default=23456, ge=1, le=65535, strict=True)


class Restart(_Model):
    """How the supervisor reacts to failures (see launcher.policy)."""

    max_restarts: int = Field(default=0, ge=0, strict=True)
    # Seconds to wait before relaunch attempt n: backoff * 2**(n-1), capped at max_backoff.
    backoff: float = Field(default=0.0, ge=0)
    max_backoff: float = Field(default=30.0, ge=0)
    # Exit codes that are never retried (a Python error, bad usage). Signals (128+N) and
    # codes outside this list are retryable, like Kubeflow's ExitCode policy.
    permanent_exit_codes: tuple[int, ...] = tuple(range(1, 128))
    # Once an attempt is up, pre-start the next attempt's processes; they import TensorFlow and
    # wait (TFCLUSTER_STANDBY=1) until a failure promotes them with SIGUSR1. Needs an entrypoint
    # that honours TFCLUSTER_STANDBY (python -m worker does) and the local backend.
    warm_standby: bool = False


class Elastic(_Model):
    """``elastic:`` -- hosts that come and go (launcher/elastic.py): a host whose connection died
    and that does not answer again within ``host_wait`` seconds is lost; its tasks move onto a
    spare host (one listed under ``hosts:`` that no task uses) and the group resumes from the last
    backup, without spending ``restart.max_restarts``."""

    host_wait: float = Field(default=60.0, ge=0)
    # A lost host that answers again without a break for this many seconds is usable again (a
    # flapping host never is): a spare again, or grow's target.
    settle: float = Field(default=30.0, ge=0)
    # A group shrunk below tasks.worker.count stops gracefully (SIGTERM: the workers save the
    # step they agree on) and restarts bigger once a host is usable again.
    grow: bool = True


class Watchdog(_Model):
    """Timeouts that turn a silent cluster into a reported failure."""

    # Seconds every task has to open its TF port (or print our worker's ready marker).
    startup_timeout: float = Field(default=300.0, gt=0)
    # Seconds without any progress (output or heartbeat) before a live task counts as hung; 0 = off.
    hang_timeout: float = Field(default=0.0, ge=0)
    # Seconds between SIGTERM and SIGKILL when stopping tasks.
    stop_grace: float = Field(default=5.0, ge=0)


class Devices(_Model):
    """``devices:`` -- what each task uses: ``gpus: all | N | [0, 2]`` (CUDA_VISIBLE_DEVICES) and
    ``cpus: N`` (N logical CPU devices, so mirrored/central_storage run N replicas without GPUs)."""

    gpus: Any = "all"
    cpus: Optional[int] = Field(default=None, ge=1, strict=True)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if v == "all":
            return v
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        if isinstance(v, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
            if len(set(v)) != len(v):
                raise ValueError(f"{list(v)} lists a GPU twice; list each GPU index once")
            return tuple(v)
        raise ValueError(f"{v!r} is not valid; use all, a number of GPUs (2), or a list of GPU indices ([0, 2])")

    @property
    def cuda_visible_devices(self) -> Optional[str]:
        """The CUDA_VISIBLE_DEVICES value, or None to leave every GPU visible."""
        if self.gpus == "all":
            return None
        ids = range(self.gpus) if isinstance(self.gpus, int) else self.gpus
        return ",".join(str(i) for i in ids) or "-1"  # -1: no GPU at all


class Tpu(_Model):
    """``tpu:`` -- which TPU ``strategy: tpu`` connects to (TPUClusterResolver's arguments)."""

    name: str = "local"  # "local" = a TPU VM's own TPU; else the Cloud TPU's name
    zone: Optional[str] = None
    project: Optional[str] = None


# ---------------------------------------------------------------- state: (statesync)


class State(_Model):
    """``state:`` -- the state dir on ssh hosts (checkpoints, backups, final model) and how the
    hosts see the chief's backup after a restart."""

    # Path on every host (relative to the remote home) or a gs:// URL
    # (default: <ssh.remote_dir>/<name>/state).
    dir: Optional[str] = None
    # auto: preflight writes a marker through the chief's host and looks for it through the
    # others (shared if all see it, else copy); shared: NFS or gs://; copy: before every
    # attempt tfcluster copies the chief's latest backup to every other host.
    sync: Literal["auto", "shared", "copy"] = "auto"
    # After a successful run, bring back under runs/<name>/state/: the final model (and the
    # TensorBoard logs), or those and the checkpoints, or nothing.
    fetch: Literal["model", "checkpoints", "none"] = "model"

    @field_validator("dir")
    @classmethod
    def _dir(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.strip():
            raise ValueError("empty path; give a directory on the hosts or remove the key")
        if v is not None and "://" in v and not v.startswith("gs://"):
            raise ValueError(f"'{v}': the only URL scheme supported is gs:// (GCS); give a path or a gs:// URL")
        return v

    @model_validator(mode="after")
    def _gcs_is_shared(self) -> "State":
        if self.is_url and self.sync == "copy":
            raise ValueError(f"sync: copy with dir {self.dir}: a gs:// dir is shared storage; set sync: shared "
                             "or auto")
        return self

    @property
    def is_url(self) -> bool:
        return bool(self.dir) and "://" in str(self.dir)


class Spec(_Model):
    """The generic part of cluster.yaml. Each registered backend adds its own options block as a
    field (``spec.ssh``, ``spec.docker``, ...): the class ``parse_spec`` builds is ``spec_model()``."""

    name: str
    strategy: Literal[STRATEGIES]  # type: ignore[valid-type]
    # A name in launcher.backends.REGISTRY.
    backend: str = "local"
    entrypoint: Union[str, tuple[str, ...]]
    hosts: tuple[Host, ...] = ()
    tasks: Tasks
    ports: Ports = Ports()
    env: dict[str, str] = Field(default_factory=dict)
    restart: Restart = Restart()
    # None: not asked for; membership changes are still handled when hosts: lists spares.
    elastic: Optional[Elastic] = None
    watchdog: Watchdog = Watchdog()
    state: State = State()
    # Where run records go, relative to the spec file.
    run_dir: str = "runs"
    # Working directory of local tasks, relative to the spec file.
    workdir: str = "."
    devices: Devices = Devices()
    tpu: Optional[Tpu] = None
    # Read only by `tfcluster export` (launcher/export/options.py).
    kubernetes: KubernetesOptions = KubernetesOptions()
    vertex: VertexOptions = VertexOptions()

    @model_validator(mode="before")
    @classmethod
    def _single_task_default(cls, data: Any) -> Any:
        # Single-host strategies run one task: ``tasks:`` may be left out.
        # (A misspelt strategy gets its own error, not a second one about tasks.)
        if isinstance(data, dict) and "tasks" not in data and data.get("strategy", CLUSTER_STRATEGIES[0]) not in CLUSTER_STRATEGIES:
            return {**data, "tasks": {"worker": 1}}
        return data

    @property
    def single_host(self) -> bool:
        """One task on one host, no TF cluster (no ``cluster`` in TF_CONFIG, no TF server port)."""
        return self.strategy in SINGLE_HOST_STRATEGIES

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        from .backends import backend_names

        names = [repr(n) for n in backend_names()]
        if v not in backend_names():
            choices = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
            raise ValueError(f"{v!r} is not valid; use one of {choices}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"'{v}' is not a valid run name; use letters, digits, '.', '_' or '-' (it names files and containers)"
            )
        return v

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: Union[str, tuple[str, ...]]) -> Union[str, tuple[str, ...]]:
        if isinstance(v, str):
            try:
                argv = shlex.split(v)
            except ValueError as exc:
                raise ValueError(f"cannot split the command ({exc}); check its quotes") from None
        else:
            argv = list(v)
        if not argv or not argv[0].strip():
            raise ValueError("empty command; give the command every task runs, e.g. 'python -m worker'")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not _ENV_RE.match(key):
                raise ValueError(f"'{key}' is not a valid environment variable name")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by tfcluster for each task; remove it from env")
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, (int, float)):
                value = str(value)
            elif value is None:
                value = ""
            elif not isinstance(value, str):
                raise ValueError(f"{key}: value must be a string or number, not {type(value).__name__}")
            out[key] = value
        return out

    @property
    def argv(self) -> tuple[str, ...]:
        if isinstance(self.entrypoint, str):
            return tuple(shlex.split(self.entrypoint))
        return tuple(self.entrypoint)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)


def spec_model() -> type[Spec]:
    """Spec plus one field per registered backend's options block (``ssh:`` -> ``spec.ssh``, an
    instance of that backend's ``Options``); the backends own the blocks' keys and rules."""
    from .backends import REGISTRY, backend_classes

    key = tuple(REGISTRY.items())
    if key not in _SPEC_MODELS:
        from pydantic import create_model


        fields: dict[str, Any] = {}
        for cls in backend_classes():
            if cls.options_key and cls.Options is not None:
                try:
                    default = cls.Options()
                except ValidationError:  # a block with required keys: absent unless given
                    fields[cls.options_key] = (Optional[cls.Options], None)
                else:
                    fields[cls.options_key] = (cls.Options, default)
        _SPEC_MODELS[key] = create_model("Spec", __base__=Spec, __module__=__name__, **fields)
    return _SPEC_MODELS[key]


_SPEC_MODELS: dict[tuple, type[Spec]] = {}  # per registry content (tests register backends)


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus where it came from (relative paths resolve against ``base_dir``)."""

    spec: Spec
    path: Path

    @property
    def base_dir(self) -> Path:
        return self.path.parent


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' appears twice (first on line {seen[key] + 1}); keep one", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read, parse and validate a cluster spec; raise SpecError with one line per problem."""
    path = Path(path)
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{shown}: file not found; pass the path of your cluster.yaml") from None
    except IsADirectoryError:
        raise SpecError(f"{shown}: is a directory; pass the path of your cluster.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{shown}: cannot read ({exc})") from None
    return LoadedSpec(parse_spec(text, shown), path.resolve())


def parse_spec(text: str, shown: str = "cluster.yaml") -> Spec:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError(f"{shown}{line}: YAML syntax error: {problem}; fix the indentation or quoting there") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{shown}: YAML syntax error: {exc}") from None
    if data is None:
        raise SpecError(f"{shown}: the file is empty; start from the example cluster.yaml in the README")
    if not isinstance(data, dict):
        raise SpecError(
            f"{shown}:1: the top level must be a mapping (name:, strategy:, tasks:, ...), not a {_yaml_type(data)}"
        )
    if "tasks" in data and isinstance(data["tasks"], dict):
        if "master" in data["tasks"]:
            line = _line_of(root, ("tasks", "master"))
            raise SpecError(f"{shown}{line}: tasks.master: the legacy role 'master' is not supported; use chief")
    try:
        spec = spec_model().model_validate(data)
    except ValidationError as exc:
        errs = sorted(exc.errors(), key=lambda e: _line_number(root, _clean_loc(e["loc"])))
        raise SpecError(*[_format_error(err, root, shown) for err in errs]) from None
    problems = check_rules(spec)
    if problems:
        raise SpecError(*[f"{shown}{_line_of(root, loc)}: {_dotted(loc)}: {msg}" for loc, msg in problems])
    return spec


# ---------------------------------------------------------------- cross-field rules


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
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append((("hosts", i, "name"), f"host '{name}' is defined twice; give each host a unique name"))
    for task_type in TASK_TYPES:
        group = t.group(task_type)
        for j, name in enumerate(group.hosts or ()):
            if name not in names:
                hint = _suggest(name, names)
                known = f"defined hosts: {', '.join(names)}" if names else "no hosts are defined; add them under hosts:"
                problems.append(((("tasks", task_type, "hosts", j)), f"unknown host '{name}'{hint}; {known}"))
    from .backends import backend_class, backend_classes

    backend = backend_class(spec.backend)
    if spec.restart.warm_standby and not backend.capabilities.warm_standby:
        able = [cls.name for cls in backend_classes() if cls.capabilities.warm_standby]
        who = f"the {' and '.join(able)} backend{'s' if len(able) > 1 else ''}" if able else "no backend"
        problems.append((("restart", "warm_standby"), f"only {who} support{'' if len(able) > 1 else 's'} warm "
                         f"standby; set it to false for backend {spec.backend}"))
    for task_type in TASK_TYPES:
        if task_type != "worker" and t.group(task_type).min is not None:
            problems.append((("tasks", task_type, "min"), f"only workers can be fewer than count; a lost {task_type}'s "
                             "host is replaced by a spare: remove min"))
    if t.worker.min is not None and not backend.capabilities.elastic:
        able = [cls.name for cls in backend_classes() if cls.capabilities.elastic]
        problems.append((("tasks", "worker", "min"), f"backend {spec.backend} cannot go on with fewer workers; min "
                         f"works with backend {' and '.join(able) or 'none'}; remove min"))
    if spec.elastic is not None and not backend.capabilities.elastic:
        able = [cls.name for cls in backend_classes() if cls.capabilities.elastic]
        problems.append((("elastic",), f"backend {spec.backend} cannot move tasks to other hosts; elastic: works "
                         f"with backend {' and '.join(able) or 'none'}; remove elastic:"))
    problems += backend.check_spec(spec)
    return problems


# ---------------------------------------------------------------- error formatting


def _format_error(err: dict, root: Optional[yaml.Node], shown: str) -> str:
    loc = _clean_loc(err["loc"])
    typ = err["type"]
    # A bare count (``worker: -1``) is reported at the task type, where the user wrote it.
    if len(loc) == 3 and loc[0] == "tasks" and loc[2] == "count" and not isinstance(_node_at(root, loc[:2]), yaml.MappingNode):
        loc = loc[:2]
    where = f"{shown}{_line_of(root, loc)}"
    path = _dotted(loc)
    value = err.get("input")
    if typ == "extra_forbidden":
        key = str(loc[-1])
        parent = loc[:-1]
        valid = _fields_at(parent)
        hint = _suggest(key, valid)
        listing = f"; valid keys: {', '.join(valid)}" if valid else ""
        return f"{where}: {path}: unknown key '{key}'{hint}{listing}"
    if typ == "missing":
        return f"{where}: {path}: required key is missing; add {_missing_hint(loc)}"
    if typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"{where}: {path}: {value!r} is not valid; use one of {expected}"
    if typ in ("int_type", "int_parsing", "int_from_float", "greater_than_equal", "less_than_equal", "greater_than"):
        return f"{where}: {path}: {_number_rule(loc, err)} (got {value!r})"
    if typ in ("float_type", "float_parsing"):
        return f"{where}: {path}: must be a number of seconds (got {value!r})"
    if typ in ("string_type",):
        return f"{where}: {path}: must be a string (got {value!r})"
    if typ in ("dict_type", "model_type", "model_attributes_type"):
        return f"{where}: {path}: must be a mapping of keys, not {_yaml_type(value)}"
    if typ in ("tuple_type", "list_type"):
        return f"{where}: {path}: must be a list, not {_yaml_type(value)}"
    if typ == "value_error":
        msg = str(err.get("ctx", {}).get("error", err["msg"]))
        return f"{where}: {path}: {msg}"
    return f"{where}: {path}: {err['msg']}"


def _number_rule(loc: tuple, err: dict) -> str:
    ctx = err.get("ctx", {})
    last = loc[-1] if loc else ""
    if last == "count" or (len(loc) == 2 and loc[0] == "tasks"):
        return "task count must be a whole number >= 0"
    if last in ("base", "port"):
        return "port must be a whole number from 1 to 65535"
    if "ge" in ctx:
        return f"must be a whole number >= {ctx['ge']}"
    if "le" in ctx:
        return f"must be a whole number <= {ctx['le']}"
    return "must be a whole number"


def _missing_hint(loc: tuple) -> str:
    hints = {
        ("name",): "name: my-run",
        ("strategy",): "strategy: multi_worker_mirrored (or " + ", ".join(STRATEGIES[1:]) + ")",
        ("entrypoint",): "entrypoint: python -m worker (the command every task runs)",
        ("tasks",): "tasks: {worker: 2}",
    }
    return hints.get(loc, f"{loc[-1]}: ..." if loc else "it")


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's union/function markers so the loc is a path into the YAML."""
    out = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part.startswith("function-")):
            continue
        if part in ("str", "tuple[str, ...]"):
            continue
        out.append(part)
    return tuple(out)


def _dotted(loc: tuple) -> str:
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _fields_at(loc: tuple) -> list[str]:
    model: Any = spec_model()
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_of(field.annotation)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}).keys())


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _suggest(word: str, options: list[str]) -> str:
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _yaml_type(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):
        return f"string {value!r}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"


def _node_at(root: Optional[yaml.Node], loc: tuple) -> Optional[yaml.Node]:
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
    return node


def _line_number(root: Optional[yaml.Node], loc: tuple) -> int:
    text = _line_of(root, loc)
    return int(text[1:]) if text else 0


def _line_of(root: Optional[yaml.Node], loc: tuple) -> str:
    """``:LINE`` of the deepest YAML node along loc (the key itself for mapping entries)."""
    node = root
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if getattr(k, "value", None) == str(part):
                    line = k.start_mark.line
                    nxt = v
                    break
            if nxt is None:
                break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    if line is None and root is not None and loc and isinstance(root, yaml.MappingNode):
        return ""
    return f":{line + 1}" if line is not None else ""
