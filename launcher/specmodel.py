"""The cluster spec's models (cluster.yaml as frozen pydantic values) and where a field sits in the YAML.

A leaf: it imports nothing from the rest of tfcluster. The backends import it for their options
blocks (``OptionsModel``) and for ``Spec``/``Host``; the loader (launcher/spec.py), above the
backends, composes the options blocks into the Spec class and runs the backend rules.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


class Export(str):
    """What ``tfcluster export`` does with a top-level key of the spec, declared on the key itself
    (``name: Annotated[str, EXPORTED]``) so that a new key comes with its answer; launcher/export/common.py
    asks ``export_verdicts`` and tests/unit/test_export_errors.py fails for a key without one."""


EXPORTED = Export("exported")  # the export writes it into the engine's job (or checks its values there)
LOCAL_ONLY = Export("local only")  # it only concerns tfcluster on this machine: ignored by the export
NOT_EXPORTED = Export("not exported")  # set, an engine cannot express it: the export refuses it, one line


def export_verdicts(model: type[BaseModel]) -> dict[str, Optional[Export]]:
    """Each top-level key of ``model`` (a Spec class) and its ``Export`` verdict (None: it has none)."""
    return {name: next((m for m in info.metadata if isinstance(m, Export)), None)
            for name, info in model.model_fields.items()}


class OptionsModel(BaseModel):
    """The base of every block of cluster.yaml, the backends' and export's options blocks too:
    frozen, and a key it does not know is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Host(OptionsModel):
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
    # At most this many of the run's tasks on this host (None: no limit; a host's GPU count still
    # bounds its gpus_per_task: N tasks).
    slots: Optional[int] = Field(default=None, ge=1, strict=True)

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

    count: int = Field(ge=0, strict=True)
    hosts: Optional[tuple[str, ...]] = None
    ports: Optional[tuple[int, ...]] = None
    # Elastic runs (launcher/elastic.py): with no spare host left, the group may go on with fewer
    # workers, never below min. None: every worker is needed.
    min: Optional[int] = Field(default=None, ge=1, strict=True)
    # GPUs each task of this group gets, overriding devices.gpus_per_task and the role's default
    # (ps and the parameter_server chief: none): N, or 0 for none (CUDA_VISIBLE_DEVICES=-1).
    gpus: Optional[int] = Field(default=None, ge=0, strict=True)

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
    chief: TaskGroup = TaskGroup(count=0)
    worker: TaskGroup = TaskGroup(count=0)
    ps: TaskGroup = TaskGroup(count=0)
    evaluator: TaskGroup = TaskGroup(count=0)

    def group(self, task_type: str) -> TaskGroup:
        return getattr(self, task_type)

    def count(self, task_type: str) -> int:
        return self.group(task_type).count


class Ports(OptionsModel):
    base: int = Field(default=23456, ge=1, le=65535, strict=True)


class Restart(OptionsModel):
    """How the supervisor reacts to failures (see launcher.policy)."""

    max_restarts: int = Field(default=0, ge=0, strict=True)
    # Seconds to wait before relaunch attempt n: backoff * 2**(n-1), capped at max_backoff.
    backoff: float = Field(default=0.0, ge=0)
    max_backoff: float = Field(default=30.0, ge=0)
    # Exit codes that are never retried (a Python error, bad usage). Signals (128+N) and
    # codes outside this list are retryable, like Kubeflow's ExitCode policy.
    permanent_exit_codes: tuple[int, ...] = tuple(range(1, 128))
    # Once an attempt is up, pre-start the next attempt's processes; they import TensorFlow and
    # wait (TFCLUSTER_STANDBY=1) until a failure promotes them (launcher/standby.py). auto: on
    # where it is safe (a backend that can, restarts allowed, tfcluster's worker as entrypoint);
    # true: also for an entrypoint of one's own that honours TFCLUSTER_STANDBY.
    warm_standby: Any = "auto"

    @field_validator("warm_standby", mode="before")
    @classmethod
    def _warm_standby(cls, v: Any) -> Any:
        if v == "auto" or isinstance(v, bool):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (on for tfcluster's worker where the backend can), "
                         "true (also for an entrypoint of your own that honours TFCLUSTER_STANDBY) or false")


class Elastic(OptionsModel):
    """``elastic:`` -- hosts that come and go (launcher/elastic.py): a host whose task's SSH session
    or connection was lost is *suspect* until it has answered for ``settle`` seconds without a
    break; its tasks move onto a spare host at once (one listed under ``hosts:`` that no task
    uses), or the group shrinks to ``tasks.worker.min``, or (neither) waits up to ``host_wait``
    seconds for the host to settle and restarts on it. None of it spends
    ``restart.max_restarts``; ``max_host_losses`` bounds it instead."""

    # No spare and no tasks.worker.min: how long the group waits for a suspect host to settle
    # (answer for `settle` s without a break) before the run ends naming it.
    host_wait: float = Field(default=60.0, ge=0)
    # A suspect host that answers again without a break for this many seconds is usable again (a
    # flapping host never is): a spare again, or grow's target, or the host the group waits for.
    settle: float = Field(default=30.0, ge=0)
    # A group shrunk below tasks.worker.count stops gracefully (SIGTERM: the workers save the
    # step they agree on) and restarts bigger once a host is usable again.
    grow: bool = True
    # Host losses (a session lost, a host not answering, preempted, gone from discovery) a run
    # takes in all; the next one ends it in one line: hosts that keep dropping cannot loop forever.
    max_host_losses: int = Field(default=10, ge=0)


class Discovery(OptionsModel):
    """``discovery:`` -- a command that prints the hosts that exist now (launcher/discovery.py),
    run when tfcluster plans and every ``every`` seconds during a run."""

    command: str = Field(min_length=1)
    every: float = Field(default=30.0, gt=0)
    timeout: float = Field(default=10.0, gt=0)


class Watchdog(OptionsModel):
    """Timeouts that turn a silent cluster into a reported failure."""

    # Seconds every task has to open its TF port (or print our worker's ready marker).
    startup_timeout: float = Field(default=300.0, gt=0)
    # Seconds without any progress (output or heartbeat) before a live task counts as hung; 0 = off.
    hang_timeout: float = Field(default=0.0, ge=0)
    # Seconds between SIGTERM and SIGKILL when stopping tasks.
    stop_grace: float = Field(default=5.0, ge=0)


class Devices(OptionsModel):
    """``devices:`` -- what each task uses: ``gpus: all | N | [0, 2]`` (which of a host's GPUs the
    run may use), ``gpus_per_task: auto | N | all`` and ``gpu_memory: auto | growth | all | MiB``
    (each GPU task's share and its memory setting: launcher/gpus.py), ``cpus: N`` (N logical CPU
    devices, so mirrored/central_storage run N replicas without GPUs); ``threads: auto | N | 0``
    (each task's TF/OpenMP thread budget: launcher/threads.py)."""

    gpus: Any = "all"
    gpus_per_task: Any = "auto"
    gpu_memory: Any = "auto"
    cpus: Optional[int] = Field(default=None, ge=1, strict=True)
    # auto (issue 22's contract); its inter-op pool is never below 2 (threads.INTEROP_MIN: with
    # one, parameter_server tasks hung).
    threads: Any = "auto"

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
    timeout: Optional[float] = Field(default=None, gt=0)


class Tpu(OptionsModel):
    """``tpu:`` -- which TPU ``strategy: tpu`` connects to (TPUClusterResolver's arguments)."""

    name: str = "local"  # "local" = a TPU VM's own TPU; else the Cloud TPU's name
    zone: Optional[str] = None
    project: Optional[str] = None


# ---------------------------------------------------------------- state: (statesync)


class State(OptionsModel):
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


class Spec(OptionsModel):
    """The generic part of cluster.yaml. Each registered backend adds its own options block as a
    field (``spec.ssh``, ``spec.docker``, ...), and export its ``kubernetes:``/``vertex:`` blocks: the
    class ``parse_spec`` builds is ``spec_model()`` (launcher/spec.py, the loader). Each key says what
    ``tfcluster export`` does with it (``Export``)."""

    name: Annotated[str, EXPORTED]
    strategy: Annotated[Literal[STRATEGIES], EXPORTED]  # type: ignore[valid-type]
    # A name in launcher.backends.REGISTRY (the loader, launcher/spec.py, checks it).
    backend: Annotated[str, LOCAL_ONLY] = "local"
    entrypoint: Annotated[Union[str, tuple[str, ...]], EXPORTED]
    hosts: Annotated[tuple[Host, ...], NOT_EXPORTED] = ()
    tasks: Annotated[Tasks, EXPORTED]
    ports: Annotated[Ports, EXPORTED] = Ports()
    env: Annotated[dict[str, str], EXPORTED] = Field(default_factory=dict)
    restart: Annotated[Restart, EXPORTED] = Restart()
    # None: not asked for; membership changes are still handled when hosts: lists spares.
    elastic: Annotated[Optional[Elastic], NOT_EXPORTED] = None
    # Hosts found by a command (in addition to hosts:); launcher/discovery.py.
    discovery: Annotated[Optional[Discovery], NOT_EXPORTED] = None
    watchdog: Annotated[Watchdog, EXPORTED] = Watchdog()
    state: Annotated[State, EXPORTED] = State()
    # Where run records go, relative to the spec file.
    run_dir: Annotated[str, LOCAL_ONLY] = "runs"
    # Working directory of local tasks, relative to the spec file.
    workdir: Annotated[str, LOCAL_ONLY] = "."
    devices: Annotated[Devices, EXPORTED] = Devices()
    # (its settings reach every task as TFCLUSTER_COLLECTIVE* in the environment the export writes)
    collective: Annotated[Collective, EXPORTED] = Collective()
    tpu: Annotated[Optional[Tpu], NOT_EXPORTED] = None

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
