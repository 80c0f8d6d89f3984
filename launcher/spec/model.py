"""The cluster spec's models (cluster.yaml as frozen pydantic values) and where a field sits in the YAML.

A leaf: it imports nothing from the rest of tfcluster. The backends import it for their options
blocks (``OptionsModel``) and for ``Spec``/``Host``; the loader (launcher/spec/load.py), above the
backends, composes the options blocks into the Spec class and runs the backend rules.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
# Cluster strategies run a TF cluster over tasks and hosts; single-host strategies run one task.
CLUSTER_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
SINGLE_HOST_STRATEGIES = ("mirrored", "central_storage", "one_device", "default", "tpu")
STRATEGIES = CLUSTER_STRATEGIES + SINGLE_HOST_STRATEGIES
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by tfcluster for every task; a user value would silently be overwritten.
RESERVED_ENV = ("TF_CONFIG",)
# A container image reference (lowercase): docker.image, and the --image of compose and export.
IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")


# ---------------------------------------------------------------- JSON Schema of the shorthands
# The models read several values in more than one form (``worker: 2`` for ``{count: 2}``, ``auto``
# or a number, ...) through before-validators, which pydantic's generated schema cannot see. Each
# such field declares the forms it accepts (``WithJsonSchema``), so ``tfcluster schema`` accepts
# every spec the loader accepts, and an editor completes and checks them.

_UINT = {"type": "integer", "minimum": 0}
_POSINT = {"type": "integer", "minimum": 1}


def _count_shorthand(schema: dict[str, Any]) -> None:
    """A task group is its mapping or, as a shorthand, its count."""
    body = {k: schema.pop(k) for k in list(schema) if k not in ("title", "description")}
    schema["anyOf"] = [{**_UINT, "description": "the count alone: `worker: 2` is `worker: {count: 2}`"}, body]


def _tasks_needed_by_cluster_strategies(schema: dict[str, Any]) -> None:
    """``tasks:`` may be left out for the single-host strategies (it is ``{worker: 1}``)."""
    schema["required"] = [r for r in schema.get("required", []) if r != "tasks"]
    schema["if"] = {"properties": {"strategy": {"enum": list(CLUSTER_STRATEGIES)}}, "required": ["strategy"]}
    schema["then"] = {"required": ["tasks"]}


class Export(str):
    """What ``tfcluster export`` does with a top-level key of the spec, declared on the key itself
    (``name: Annotated[str, EXPORTED]``) so that a new key comes with its answer; launcher/export/common.py
    asks ``export_verdicts`` and tests/unit/export/test_export_errors.py fails for a key without one."""


EXPORTED = Export("exported")  # the export writes it into the engine's job (or checks its values there)
LOCAL_ONLY = Export("local only")  # it only concerns tfcluster on this machine: ignored by the export
NOT_EXPORTED = Export("not exported")  # set, an engine cannot express it: the export refuses it, one line


def export_verdicts(model: type[BaseModel]) -> dict[str, Optional[Export]]:
    """Each top-level key of ``model`` (a Spec class) and its ``Export`` verdict (None: it has none)."""
    return {name: next((m for m in info.metadata if isinstance(m, Export)), None)
            for name, info in model.model_fields.items()}


class OptionsModel(BaseModel):
    """The base of every block of cluster.yaml, the backends' and export's options blocks too:
    frozen, and a key it does not know is an error. A field's docstring is its description (in
    ``tfcluster schema`` and the generated spec reference)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, use_attribute_docstrings=True)


class Host(OptionsModel):
    """A machine tasks run on: how the launcher reaches it, and what other tasks dial."""

    name: str = Field(json_schema_extra={"pattern": _NAME_RE.pattern})
    """The host's name in this spec (what `tasks.<type>.hosts` and the errors name); also the SSH target
    when `ssh` is not given."""
    ssh: Optional[str] = None
    """SSH target: `user@host`, `host` or an alias of ~/.ssh/config (default: `name`)."""
    address: Optional[str] = None
    """The address other tasks dial to reach this host's tasks (default: the host part of the SSH target)."""
    port: Optional[int] = Field(default=None, ge=1, le=65535, strict=True)
    """SSH port (default: 22, or the one ~/.ssh/config gives)."""
    user: Optional[str] = None
    """SSH user (default: the one in `ssh`, ~/.ssh/config, or yours)."""
    key: Optional[str] = None
    """Private key file for SSH (default: ssh-agent, ~/.ssh/config's IdentityFile, the usual keys)."""
    proxy_jump: Optional[str] = None
    """ssh backend: ProxyJump hop(s), like `bastion` or `me@jump:2222,other` (also read from ~/.ssh/config)."""
    python: Optional[str] = None
    """ssh backend: the interpreter that runs the task wrapper and preflight on this host (default: `ssh.python`)."""
    slots: Optional[int] = Field(default=None, ge=1, strict=True)
    """At most this many of the run's tasks on this host (none: no limit; a host's GPU count still bounds
    its `gpus_per_task: N` tasks)."""

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


class TaskGroup(OptionsModel):
    """``N`` or ``{count: N, hosts: [names], ports: [..]}`` for one task type."""

    model_config = ConfigDict(json_schema_extra=_count_shorthand)

    count: int = Field(ge=0, strict=True)
    """How many tasks of this type."""
    hosts: Optional[tuple[str, ...]] = None
    """The hosts (by name) this group's tasks go on, round-robin (ssh backend; default: all hosts)."""
    ports: Optional[tuple[int, ...]] = Field(default=None, json_schema_extra={"items": {"type": "integer", "minimum": 1,
                                                                                        "maximum": 65535}})
    """One TF port per task, in task order (default: `ports.base` plus the task's place on its host)."""
    min: Optional[int] = Field(default=None, ge=1, strict=True)
    """Elastic runs: with no spare host left, the group may go on with fewer workers, never below this
    (none: every worker is needed)."""
    gpus: Optional[int] = Field(default=None, ge=0, strict=True)
    """GPUs each task of this group gets, overriding `devices.gpus_per_task` and the role's default (ps
    and the parameter_server chief: none); 0: none (CUDA_VISIBLE_DEVICES=-1)."""

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


class Tasks(OptionsModel):
    """``tasks:`` -- how many tasks of each type (a count, or a mapping with the count)."""

    chief: TaskGroup = TaskGroup(count=0)
    """The chief: at most one (multi_worker_mirrored: optional, worker 0 is the chief without one;
    parameter_server: exactly one, the coordinator)."""
    worker: TaskGroup = TaskGroup(count=0)
    """The workers that train."""
    ps: TaskGroup = TaskGroup(count=0)
    """Parameter servers (parameter_server only: at least one)."""
    evaluator: TaskGroup = TaskGroup(count=0)
    """At most one evaluator: scores every checkpoint, outside the TF cluster."""

    def group(self, task_type: str) -> TaskGroup:
        return getattr(self, task_type)

    def count(self, task_type: str) -> int:
        return self.group(task_type).count


class Ports(OptionsModel):
    """``ports:`` -- where the tasks' TF ports start."""

    base: int = Field(default=23456, ge=1, le=65535, strict=True)
    """The first TF port on each host; a host's n-th task gets base + n."""


class Restart(OptionsModel):
    """``restart:`` -- how the supervisor reacts to failures (see launcher.supervise.policy)."""

    max_restarts: int = Field(default=0, ge=0, strict=True)
    """Whole-group restarts after a failure (0: none); under parameter_server also the budget of
    single-worker relaunches."""
    backoff: float = Field(default=0.0, ge=0)
    """Seconds to wait before relaunch attempt n: backoff * 2**(n-1), capped at `max_backoff`."""
    max_backoff: float = Field(default=30.0, ge=0)
    """The cap of the wait between attempts, in seconds."""
    permanent_exit_codes: tuple[int, ...] = tuple(range(1, 128))
    """Exit codes that are never retried (a Python error, bad usage; default 1-127). Signals (128+N) and
    codes outside this list are retryable, like Kubeflow's ExitCode policy."""
    warm_standby: Annotated[Any, WithJsonSchema({"enum": ["auto", True, False]})] = "auto"
    """Once an attempt is up, pre-start the next attempt's processes; they import TensorFlow and wait
    (TFCLUSTER_STANDBY=1) until a failure promotes them. auto: on where it is safe (a backend that can,
    restarts allowed, tfcluster's worker as entrypoint); true: also for an entrypoint of one's own
    that honours TFCLUSTER_STANDBY; false: off."""

    @field_validator("warm_standby", mode="before")
    @classmethod
    def _warm_standby(cls, v: Any) -> Any:
        if v == "auto" or isinstance(v, bool):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (on for tfcluster's worker where the backend can), "
                         "true (also for an entrypoint of your own that honours TFCLUSTER_STANDBY) or false")


class Elastic(OptionsModel):
    """``elastic:`` -- hosts that come and go (launcher/plan/elastic.py): a host whose task's SSH session
    or connection was lost is *suspect* until it has answered for ``settle`` seconds without a
    break; its tasks move onto a spare host at once (one listed under ``hosts:`` that no task
    uses), or the group shrinks to ``tasks.worker.min``, or (neither) waits up to ``host_wait``
    seconds for the host to settle and restarts on it. None of it spends
    ``restart.max_restarts``; ``max_host_losses`` bounds it instead."""

    host_wait: float = Field(default=60.0, ge=0)
    """No spare and no `tasks.worker.min`: how long (seconds) the group waits for a suspect host to settle
    before the run ends naming it."""
    settle: float = Field(default=30.0, ge=0)
    """A suspect host that answers again without a break for this many seconds is usable again (a
    flapping host never is): a spare again, or grow's target, or the host the group waits for."""
    grow: bool = True
    """A group shrunk below `tasks.worker.count` stops gracefully (the workers save the step they agree
    on) and restarts bigger once a host is usable again."""
    max_host_losses: int = Field(default=10, ge=0)
    """Host losses (a session lost, a host not answering, preempted, gone from discovery) a run takes in
    all; the next one ends it in one line."""


class Discovery(OptionsModel):
    """``discovery:`` -- a command that prints the hosts that exist now (launcher/spec/discovery.py),
    run when tfcluster plans and every ``every`` seconds during a run."""

    command: str = Field(min_length=1)
    """Shell command (run in the spec's directory) that prints the hosts: a YAML/JSON list of `hosts:`
    entries, or lines `name address [ssh-target]`."""
    every: float = Field(default=30.0, gt=0)
    """Seconds between runs of the command during a run."""
    timeout: float = Field(default=10.0, gt=0)
    """Seconds one run of the command may take; then it is killed (its whole process group)."""


class Watchdog(OptionsModel):
    """``watchdog:`` -- timeouts that turn a silent cluster into a reported failure."""

    startup_timeout: float = Field(default=300.0, gt=0)
    """Seconds every task has to open its TF port (or print the reference worker's ready marker)."""
    hang_timeout: float = Field(default=0.0, ge=0)
    """Seconds without any progress (output or heartbeat) before a live task counts as hung; 0: off."""
    stop_grace: float = Field(default=5.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when stopping tasks."""


class Devices(OptionsModel):
    """``devices:`` -- what each task uses: ``gpus: all | N | [0, 2]`` (which of a host's GPUs the
    run may use), ``gpus_per_task: auto | N | all`` and ``gpu_memory: auto | growth | all | MiB``
    (each GPU task's share and its memory setting: launcher/plan/gpus.py), ``cpus: N`` (N logical CPU
    devices, so mirrored/central_storage run N replicas without GPUs); ``threads: auto | N | 0``
    (each task's TF/OpenMP thread budget: launcher/plan/threads.py)."""

    gpus: Annotated[Any, WithJsonSchema({"anyOf": [
        {"const": "all"}, _UINT, {"type": "array", "items": _UINT, "uniqueItems": True}]})] = "all"
    """Which of a host's GPUs the run may use: all, N (GPUs 0..N-1; 0: none) or a list of indices ([0, 2])."""
    gpus_per_task: Annotated[Any, WithJsonSchema({"anyOf": [{"enum": ["auto", "all"]}, _POSINT]})] = "auto"
    """Each GPU task's GPUs: auto (a host's GPUs divided among its GPU tasks), N (each its own N), or all
    (every GPU task sees every GPU of its host)."""
    gpu_memory: Annotated[Any, WithJsonSchema({"anyOf": [{"enum": ["auto", "growth", "all"]}, _POSINT]})] = "auto"
    """Each GPU task's memory setting: auto (growth when tasks share a GPU), growth, all (TensorFlow's
    default: nearly all of it), or a limit per GPU in MiB."""
    cpus: Optional[int] = Field(default=None, ge=1, strict=True)
    """N logical CPU devices, so mirrored/central_storage run N replicas without GPUs (single-host
    strategies only)."""
    threads: Annotated[Any, WithJsonSchema({"anyOf": [{"const": "auto"}, _UINT]})] = "auto"
    """Each task's TF/OpenMP thread budget: auto (its share of its host's cores; the inter-op pool never
    below 2), N threads per task, or 0 (TensorFlow's own defaults)."""

    @field_validator("threads", mode="before")
    @classmethod
    def _threads(cls, v: Any) -> Any:
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (each task its share of its host's cores), "
                         "a number of threads per task (2), or 0 (leave TensorFlow's defaults)")

    @field_validator("gpus_per_task", mode="before")
    @classmethod
    def _gpus_per_task(cls, v: Any) -> Any:
        if v in ("auto", "all") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (the host's GPUs divided among its GPU tasks), a number "
                         "of GPUs per task (1), or all (every task sees every GPU of its host)")

    @field_validator("gpu_memory", mode="before")
    @classmethod
    def _gpu_memory(cls, v: Any) -> Any:
        if v in ("auto", "growth", "all") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (growth when tasks share a GPU), growth, all "
                         "(TensorFlow's default: nearly all of it), or a limit per GPU in MiB (8000)")

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


class Collective(OptionsModel):
    """``collective:`` -- MultiWorkerMirroredStrategy's all-reduce: ``implementation`` (auto lets
    TensorFlow pick, possibly RING on GPUs) and ``timeout`` (seconds: a hung collective becomes an
    error, which the launcher can retry). The reference worker builds
    ``tf.distribute.experimental.CommunicationOptions`` from them (TFCLUSTER_COLLECTIVE*)."""

    implementation: Literal["auto", "ring", "nccl"] = "auto"
    """The all-reduce: auto (TensorFlow picks), ring or nccl (GPUs; refuses two ranks on one GPU)."""
    timeout: Optional[float] = Field(default=None, gt=0)
    """Seconds after which a hung collective becomes an error the launcher can retry (none: no limit)."""


class Tpu(OptionsModel):
    """``tpu:`` -- which TPU ``strategy: tpu`` connects to (TPUClusterResolver's arguments)."""

    name: str = "local"
    """local: a TPU VM's own TPU; else the Cloud TPU's name."""
    zone: Optional[str] = None
    """The Cloud TPU's zone."""
    project: Optional[str] = None
    """The Cloud TPU's project."""


# ---------------------------------------------------------------- state: (statesync)


class State(OptionsModel):
    """``state:`` -- the state dir on ssh hosts (checkpoints, backups, final model) and how the
    hosts see the chief's backup after a restart."""

    dir: Optional[str] = None
    """Path on every host (relative to the remote home) or a gs:// URL (default:
    `<ssh.remote_dir>/<name>/state`)."""
    sync: Literal["auto", "shared", "copy"] = "auto"
    """auto: preflight writes a marker through the chief's host and looks for it through the others
    (shared if all see it, else copy); shared: NFS or gs://; copy: before every attempt tfcluster
    copies the chief's latest backup to every other host."""
    fetch: Literal["model", "checkpoints", "none"] = "model"
    """After a successful run, bring back under runs/<name>/state/: the final model (and the TensorBoard
    logs), or those and the checkpoints, or nothing."""

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


class Spec(OptionsModel):
    """The generic part of cluster.yaml. Each registered backend adds its own options block as a
    field (``spec.ssh``, ``spec.docker``, ...), and export its ``kubernetes:``/``vertex:`` blocks: the
    class ``parse_spec`` builds is ``spec_model()`` (launcher/spec/load.py, the loader). Each key says what
    ``tfcluster export`` does with it (``Export``)."""

    model_config = ConfigDict(json_schema_extra=_tasks_needed_by_cluster_strategies, title="cluster.yaml")

    name: Annotated[str, EXPORTED] = Field(json_schema_extra={"pattern": _NAME_RE.pattern})
    """The run's name: names run records (runs/<name>/), containers and the state dir."""
    strategy: Annotated[Literal[STRATEGIES], EXPORTED]  # type: ignore[valid-type]
    """The tf.distribute strategy. Cluster strategies (multi_worker_mirrored, parameter_server) run a TF
    cluster over tasks and hosts; the others (mirrored, central_storage, one_device, default, tpu) run
    one task."""
    backend: Annotated[str, LOCAL_ONLY] = "local"
    """Where the tasks run: one of the registered backends (local, ssh, docker, slurm)."""
    entrypoint: Annotated[Union[str, tuple[str, ...]], EXPORTED]
    """The command every task runs: a string (split like a shell) or an argv list, e.g.
    `tfcluster-worker --epochs 3`."""
    hosts: Annotated[tuple[Host, ...], NOT_EXPORTED] = ()
    """The machines (ssh backend; local runs everything here); hosts no task uses are spares."""
    tasks: Annotated[Tasks, EXPORTED]
    """How many tasks of each type; may be left out for the single-host strategies (`{worker: 1}`)."""
    ports: Annotated[Ports, EXPORTED] = Ports()
    """Where the TF ports start."""
    env: Annotated[dict[str, str], EXPORTED] = Field(default_factory=dict, json_schema_extra={
        "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
        "propertyNames": {"pattern": _ENV_RE.pattern, "not": {"enum": list(RESERVED_ENV)}}})
    """Extra environment for every task (numbers and booleans become strings; TF_CONFIG is tfcluster's)."""
    restart: Annotated[Restart, EXPORTED] = Restart()
    """How the supervisor reacts to failures."""
    elastic: Annotated[Optional[Elastic], NOT_EXPORTED] = None
    """Hosts that come and go (ssh); none: not asked for (membership changes are still handled when
    hosts: lists spares)."""
    discovery: Annotated[Optional[Discovery], NOT_EXPORTED] = None
    """Hosts found by a command, in addition to `hosts:`."""
    watchdog: Annotated[Watchdog, EXPORTED] = Watchdog()
    """Timeouts that turn a silent cluster into a reported failure."""
    state: Annotated[State, EXPORTED] = State()
    """The state dir on ssh hosts and how it is kept consistent."""
    run_dir: Annotated[str, LOCAL_ONLY] = "runs"
    """Where run records go, relative to the spec file."""
    workdir: Annotated[str, LOCAL_ONLY] = "."
    """Working directory of local tasks, relative to the spec file."""
    devices: Annotated[Devices, EXPORTED] = Devices()
    """What each task uses: GPUs, logical CPUs, threads."""
    collective: Annotated[Collective, EXPORTED] = Collective()
    """MultiWorkerMirroredStrategy's all-reduce options."""
    tpu: Annotated[Optional[Tpu], NOT_EXPORTED] = None
    """Which TPU `strategy: tpu` connects to."""

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
            raise ValueError("empty command; give the command every task runs, e.g. 'tfcluster-worker'")
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


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec plus where it came from (relative paths resolve against ``base_dir``)."""

    spec: Spec
    path: Path

    @property
    def base_dir(self) -> Path:
        return self.path.parent


# ---------------------------------------------------------------- positions in the YAML


def dotted(loc: tuple) -> str:
    """A field's path as the errors name it: ``tasks.worker.hosts[0]``."""
    parts: list[str] = []
    for p in loc:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def line_of(root: Optional[yaml.Node], loc: tuple) -> str:
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
