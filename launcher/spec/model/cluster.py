"""cluster.yaml's top level (``Spec``), and a validated spec with the file it came from (``LoadedSpec``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from launcher.spec.model.base import (
    CLUSTER_STRATEGIES,
    ENV_RE,
    EXPORTED,
    LOCAL_ONLY,
    NAME_RE,
    NONBLANK,
    NOT_EXPORTED,
    RESERVED_ENV,
    SINGLE_HOST_STRATEGIES,
    STRATEGIES,
    OptionsModel,
)
from launcher.spec.model.devices import Collective, Devices, Tpu
from launcher.spec.model.recovery import Discovery, Elastic, Restart, State, Watchdog
from launcher.spec.model.tasks import Host, Ports, TaskCounts


def _tasks_needed_by_cluster_strategies(schema: dict[str, Any]) -> None:
    """``tasks:`` may be left out for the single-host strategies (it is ``{worker: 1}``)."""
    schema["required"] = [r for r in schema.get("required", []) if r != "tasks"]
    schema["if"] = {"properties": {"strategy": {"enum": list(CLUSTER_STRATEGIES)}}, "required": ["strategy"]}
    schema["then"] = {"required": ["tasks"]}


class Spec(OptionsModel):
    """The generic part of cluster.yaml. Each registered backend adds its own options block as a
    field (``spec.ssh``, ``spec.docker``, ...), and export its ``kubernetes:``/``vertex:`` blocks: the
    class ``parse_spec`` builds is ``spec_model()`` (launcher/loader/load.py, the loader). Each key says what
    ``tfcluster export`` does with it (``Export``)."""

    model_config = ConfigDict(json_schema_extra=_tasks_needed_by_cluster_strategies, title="cluster.yaml")

    name: Annotated[str, EXPORTED] = Field(json_schema_extra={"pattern": NAME_RE.pattern})
    """The run's name: names run records (runs/<name>/), containers and the state dir."""
    strategy: Annotated[Literal[STRATEGIES], EXPORTED]  # type: ignore[valid-type]
    """The tf.distribute strategy. Cluster strategies (multi_worker_mirrored, parameter_server) run a TF
    cluster over tasks and hosts; the others (mirrored, central_storage, one_device, default, tpu) run
    one task."""
    backend: Annotated[str, LOCAL_ONLY] = "local"
    """Where the tasks run: one of the registered backends (local, ssh, docker, slurm)."""
    # The schema refuses what it can see of an empty command ('', [], a blank first word); how a
    # string splits like a shell (quotes) is the loader's alone (docs/concepts/spec.md, "Types").
    entrypoint: Annotated[Union[str, tuple[str, ...]], EXPORTED, WithJsonSchema({"anyOf": [
        {"type": "string", "pattern": NONBLANK},
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "prefixItems": [{"type": "string", "pattern": NONBLANK}]}]})]
    """The command every task runs: a string (split like a shell) or an argv list, e.g.
    `tfcluster-worker --epochs 3`."""
    hosts: Annotated[tuple[Host, ...], NOT_EXPORTED] = ()
    """The machines (ssh backend; local runs everything here); hosts no task uses are spares."""
    tasks: Annotated[TaskCounts, EXPORTED]
    """How many tasks of each type; may be left out for the single-host strategies (`{worker: 1}`)."""
    ports: Annotated[Ports, EXPORTED] = Ports()
    """Where the TF ports start."""
    env: Annotated[dict[str, str], EXPORTED] = Field(default_factory=dict, json_schema_extra={
        "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
        "propertyNames": {"pattern": ENV_RE.pattern, "not": {"enum": list(RESERVED_ENV)}}})
    """Extra environment for every task (numbers and booleans become strings; TF_CONFIG is tfcluster's)."""
    keras: Annotated[Literal["auto", 2, 3], EXPORTED] = "auto"
    """What `import keras` is in a task that runs a Python script or module. auto: tf_keras under
    multi_worker_mirrored and parameter_server, whose training Keras 3 cannot run (its `model.fit` fails
    on their distributed datasets), with `tf.keras` tf_keras too (TF_USE_LEGACY_KERAS=1); a script that
    uses what only Keras 3 has (`keras.ops`, `keras.random`, another backend) is refused before any task
    starts; elsewhere the installed Keras. 2: tf_keras under every strategy. 3: the installed Keras 3,
    `tf.keras` included, under every strategy (a custom training loop only, under those two). An
    export carries TF_USE_LEGACY_KERAS; the `import keras` alias is tfcluster's task stub's."""
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
    share: Annotated[Literal["private", "group"], LOCAL_ONLY] = "private"
    """Who besides you may read what a run writes: its record (plan, events, logs), its state dir
    (checkpoints, the final model), and on hosts its run, work and supervisor dirs. private: dirs
    0700 and files 0600, whatever the umask; group: 0750 and 0640, for a team that shares them on
    purpose. Either way no other user may be able to write a dir on the way to them: a run whose
    dir someone else could swap is refused (docs/concepts/trust.md)."""
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
        if not NAME_RE.fullmatch(v):
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
            if not isinstance(key, str) or not ENV_RE.fullmatch(key):
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
    """A validated spec plus where it came from (relative paths resolve against ``base_dir``) and
    the file's text as it was read (what ``compare`` derives its configurations' specs from: the
    file is read once, and what runs is what was validated)."""

    spec: Spec
    path: Path
    text: str = ""

    @property
    def base_dir(self) -> Path:
        return self.path.parent
