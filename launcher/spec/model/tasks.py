"""``hosts:``, ``tasks:`` and ``ports:``: the machines, the tasks of each type on them, their TF ports."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from launcher.spec.model.base import NAME_RE, UINT, OptionsModel, PosInt, Port, UInt, Whole


def _count_shorthand(schema: dict[str, Any]) -> None:
    """A task group is its mapping or, as a shorthand, its count."""
    body = {k: schema.pop(k) for k in list(schema) if k not in ("title", "description")}
    schema["anyOf"] = [{**UINT, "description": "the count alone: `worker: 2` is `worker: {count: 2}`"}, body]


class Host(OptionsModel):
    """A machine tasks run on: how the launcher reaches it, and what other tasks dial."""

    name: str = Field(json_schema_extra={"pattern": NAME_RE.pattern})
    """The host's name in this spec (what `tasks.<type>.hosts` and the errors name); also the SSH target
    when `ssh` is not given."""
    ssh: Optional[str] = None
    """SSH target: `user@host`, `host` or an alias of ~/.ssh/config (default: `name`)."""
    address: Optional[str] = None
    """The address other tasks dial to reach this host's tasks (default: the host part of the SSH target)."""
    port: Optional[Port] = None
    """SSH port (default: 22, or the one ~/.ssh/config gives)."""
    user: Optional[str] = None
    """SSH user (default: the one in `ssh`, ~/.ssh/config, or yours)."""
    key: Optional[str] = None
    """Private key file for SSH (default: ssh-agent, ~/.ssh/config's IdentityFile, the usual keys)."""
    proxy_jump: Optional[str] = None
    """ssh backend: ProxyJump hop(s), like `bastion` or `me@jump:2222,other` (also read from ~/.ssh/config)."""
    python: Optional[str] = None
    """ssh backend: the interpreter that runs the task wrapper and preflight on this host (default: `ssh.python`)."""
    slots: Optional[PosInt] = None
    """At most this many of the run's tasks on this host (none: no limit; a host's GPU count still bounds
    its `gpus_per_task: N` tasks)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
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

    count: UInt
    """How many tasks of this type."""
    hosts: Optional[tuple[str, ...]] = None
    """The hosts (by name) this group's tasks go on: dealt round-robin, a host's tasks numbered
    consecutively (ssh backend; default: all hosts)."""
    ports: Optional[tuple[Whole, ...]] = Field(default=None, json_schema_extra={"items": {"type": "integer", "minimum": 1,
                                                                                        "maximum": 65535}})
    """One TF port per task, in task order (default: `ports.base` plus the task's place on its host)."""
    min: Optional[PosInt] = None
    """Elastic runs: with no spare host left, the group may go on with fewer workers, never below this
    (none: every worker is needed); at `up` it starts with the hosts that answer (at least this many
    workers) and grows as hosts appear. Setting it turns elastic membership on."""
    gpus: Optional[UInt] = None
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
    def _ports(cls, v: Optional[tuple[Whole, ...]]) -> Optional[tuple[Whole, ...]]:
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


class TaskCounts(OptionsModel):
    """``tasks:`` -- how many tasks of each type (a count, or a mapping with the count)."""

    # "Tasks" in the schema, as before: the class is named apart from the backends' Tasks seam.
    model_config = ConfigDict(title="Tasks")

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

    base: Port = 23456
    """The first TF port on each host; a host's n-th task gets base + n."""
