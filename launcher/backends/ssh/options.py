"""``ssh:`` -- the options block of ``backend: ssh`` (validated here, opaque to spec.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, WithJsonSchema, field_validator

from launcher.spec.model import Flag, OptionsModel, Seconds


class SSHOptions(OptionsModel):
    """``ssh:`` -- how ``backend: ssh`` connects, verifies hosts and runs tasks remotely."""

    connect_timeout: Seconds = Field(default=10.0, gt=0)
    """Seconds to wait for TCP connect + SSH handshake per host."""
    # true/false are read as on/off (the before-validator below); the schema says so.
    gce_metadata: Annotated[Literal["auto", "on", "off"],
                            WithJsonSchema({"enum": ["auto", "on", "off", True, False]})] = "auto"
    """Watch GCE's preemption notice on each host (the metadata server's instance/preempted flag,
    GCE_METADATA_HOST honoured): on TRUE the host's tasks get the graceful SIGTERM at once and the host
    counts as preempted. auto: on where the host is a GCE VM (its DMI product name) or GCE_METADATA_HOST is
    set in the tasks' env; on/off (or true/false): always/never."""

    known_hosts: Optional[str] = None
    """known_hosts file that host keys are checked against (default ~/.ssh/known_hosts plus any
    UserKnownHostsFile from ssh_config). Unknown or changed keys are refused unless
    `trust_on_first_use`."""
    trust_on_first_use: Flag = False
    """True: unknown host keys are accepted once and appended to known_hosts. A changed key
    is always refused."""
    config: Optional[str] = None
    """An ssh_config file to read aliases, User, Port, IdentityFile, ProxyJump from (default ~/.ssh/config)."""
    keep_warm: Seconds = Field(default=0.0, ge=0, le=86400)
    """Seconds each host's fork server (the one TensorFlow import its tasks and standbys are forked from)
    stays after the run, so that the next `up` of the same spec on that host forks at once instead of
    importing again. 0 (default): it ends with the run. Only the same user's runs with the same interpreter,
    imports, environment (but for each task's own variables) and workdir use it; it ends once no run has
    used it for this long, and holds no task or GPU while it waits (docs/concepts/worker.md)."""
    lease: Seconds = Field(default=15.0, gt=0)
    """Remote tasks are stopped when the launcher has not been heard from for this many seconds."""
    python: str = "python3"
    """Interpreter on the hosts for the task wrapper and preflight (an absolute path is put first on PATH)."""
    remote_dir: str = ".tfcluster"
    """Remote base dir (relative to the remote home) for per-run dirs, pid files and state."""
    workdir: Optional[str] = None
    """Remote working directory of tasks (default: the synced copy if sync is set, else the remote home)."""
    sync: tuple[str, ...] = ()
    """Local paths (relative to workdir) uploaded into the remote workdir before setup; ["."] = everything."""
    setup: tuple[str, ...] = ()
    """Shell commands run once per host (in the remote workdir) before any task starts."""
    setup_timeout: Seconds = Field(default=600.0, gt=0)
    """Seconds the `setup` commands may take on each host."""
    require: tuple[str, ...] = ("tensorflow",)
    """Python modules every host must import (same versions everywhere), checked in preflight."""
    probe_timeout: Seconds = Field(default=3.0, gt=0)
    """Seconds each host gets to connect to each task port during the reachability probe."""
    preflight_timeout: Seconds = Field(default=60.0, gt=0)
    """Seconds each host's preflight agent gets to answer (Python, ssh.require, workdir, ports) and, on top
    of the reachability probe's own deadline, to report it. A host that does not answer in time is named;
    raise this for hosts that start Python slowly (an overloaded machine)."""
    supervisor: Optional[str] = None
    """A host (by name) that runs the run's supervisor and keeps its record, so the machine that ran `up` can
    disconnect; status/logs/attach/down/runs reach it over SSH. Default: here."""

    @field_validator("gce_metadata", mode="before")
    @classmethod
    def _gce_metadata(cls, v: Any) -> Any:
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v
