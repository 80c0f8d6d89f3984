"""What a run does when things go wrong: ``restart:`` (failures), ``elastic:`` and ``discovery:``
(hosts that come and go), ``watchdog:`` (a silent cluster), ``state:`` (the checkpoints and backups a
restart resumes from)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, Strict, WithJsonSchema, field_validator, model_validator

from launcher.spec.model.base import NONBLANK, Flag, OptionsModel, Seconds, UInt, Whole


class Restart(OptionsModel):
    """``restart:`` -- how the supervisor reacts to failures (see launcher.supervise.policy)."""

    max_restarts: UInt = 0
    """Whole-group restarts after a failure (0: none); under parameter_server also the budget of
    single-worker relaunches."""
    backoff: Seconds = Field(default=0.0, ge=0)
    """Seconds to wait before relaunch attempt n: backoff * 2**(n-1), capped at `max_backoff`."""
    max_backoff: Seconds = Field(default=30.0, ge=0)
    """The cap of the wait between attempts, in seconds."""
    permanent_exit_codes: tuple[Whole, ...] = tuple(range(1, 128))
    """Exit codes that are never retried (a Python error, bad usage; default 1-127). Signals (128+N) and
    codes outside this list are retryable, like Kubeflow's ExitCode policy."""
    preemption_exit_codes: tuple[Whole, ...] = (42,)
    """Exit codes that mean the task saved for a preemption and asks to be restarted, which restart the
    group without spending `max_restarts` (a preemption, not a failure): TensorFlow's
    `PreemptionCheckpointHandler` exits 42 once its save is written (its `TerminationConfig`'s
    `exit_fn` may choose another: list it here). A code here is never permanent."""
    max_preemptions: UInt = 20
    """Restarts after a preemption's exit a run takes in all; the next one ends it in one line."""
    warm_standby: Annotated[Any, WithJsonSchema({"enum": ["auto", True, False]})] = "auto"
    """Once an attempt is up, pre-start the next attempt's processes; they import TensorFlow and wait
    (TFCLUSTER_STANDBY=1) until a failure promotes them. auto: on where it is safe (a backend that can,
    restarts allowed, and an entrypoint that is tfcluster's worker or any `python SCRIPT` / `python -m
    MODULE`: those wait under tfcluster's standby stub, which runs the script once promoted, unchanged);
    true: also for another command that honours TFCLUSTER_STANDBY itself; false: off (every restart
    starts cold)."""

    @field_validator("warm_standby", mode="before")
    @classmethod
    def _warm_standby(cls, v: Any) -> Any:
        if v == "auto" or isinstance(v, bool):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (on for tfcluster's worker and Python scripts where the "
                         "backend can), true (also for another command that honours TFCLUSTER_STANDBY) or false")


class Elastic(OptionsModel):
    """``elastic:`` -- hosts that come and go (launcher/plan/elastic.py): a host whose task's SSH session
    or connection was lost is *suspect* until it has answered for ``settle`` seconds without a
    break; its tasks move onto a spare host at once (one listed under ``hosts:`` that no task
    uses), or the group shrinks to ``tasks.worker.min``, or (neither) waits up to ``host_wait``
    seconds for the host to settle and restarts on it. None of it spends
    ``restart.max_restarts``; ``max_host_losses`` bounds it instead."""

    host_wait: Seconds = Field(default=60.0, ge=0)
    """No spare and no `tasks.worker.min`: how long (seconds) the group waits for a suspect host to settle
    before the run ends naming it. At `up`, fewer hosts answering than `tasks.worker.min` needs: how
    long it waits for them."""
    settle: Seconds = Field(default=30.0, ge=0)
    """A suspect host that answers again without a break for this many seconds is usable again (a
    flapping host never is): a spare again, or grow's target, or the host the group waits for."""
    grow: Flag = True
    """A group shrunk below `tasks.worker.count` stops gracefully (the workers save the step they agree
    on) and restarts bigger once a host is usable again."""
    max_host_losses: UInt = 10
    """Host losses (a session lost, a host not answering, preempted, gone from discovery) a run takes in
    all; the next one ends it in one line."""


class Discovery(OptionsModel):
    """``discovery:`` -- a command that prints the hosts that exist now (launcher/loader/discovery.py),
    run when tfcluster plans and every ``every`` seconds during a run."""

    command: str = Field(min_length=1)
    """Shell command (run in the spec's directory) that prints the hosts: a YAML/JSON list of `hosts:`
    entries, or lines `name address [ssh-target]`."""
    every: Seconds = Field(default=30.0, gt=0)
    """Seconds between runs of the command during a run."""
    timeout: Seconds = Field(default=10.0, gt=0)
    """Seconds one run of the command may take; then it is killed (its whole process group)."""


class Watchdog(OptionsModel):
    """``watchdog:`` -- timeouts that turn a silent cluster into a reported failure."""

    startup_timeout: Seconds = Field(default=300.0, gt=0)
    """Seconds every task has to open its TF port (or print the reference worker's ready marker)."""
    hang_timeout: Union[Literal["auto"], Annotated[float, Strict(), Field(ge=0)]] = "auto"
    """When the group counts as stopped: seconds without progress, `auto`, or 0 (off). Progress is a
    Python task's count of TensorFlow function calls completed (a training, evaluation or predict
    step), not its output: printing is not progress. `auto`: a task that counts is stuck once it has
    not progressed for max(120 s, 3 x the longest gap between its rises seen so far in this
    attempt); its clock starts at its first step (until then `startup_timeout` applies, from when every
    task is up); tasks that count nothing (parameter servers, the evaluator, a Python task that never
    imports TensorFlow, a command that is not Python) are never called hung by it. Seconds: that
    limit instead of auto's, and a task that counts nothing is hung after that long without output.
    On a stall every task's stacks are taken and the task that stopped the others is named
    (docs/hangs.md)."""
    stopped_timeout: Seconds = Field(default=2.0, ge=0)
    """Seconds a task's process may stay stopped by a signal (state T: SIGSTOP, SIGTSTP; a debugger's
    stop is not one) before it counts as failed, or 0 (never). Its wrapper looks every 0.5 s; a task
    whose death fails the group fails it ("process is stopped (SIGSTOP?)"), a parameter_server worker
    or the evaluator is killed and restarted alone. A stopped task holds its peers in their
    collectives, and TensorFlow's own heartbeats end the group 8-11 s later anyway. Not on docker
    without tfcluster's wrapper in the image."""
    straggler_after: Seconds = Field(default=60.0, ge=0)
    """Seconds a task must stay behind the others before it is named a straggler, or 0 (never): six
    windows of a sixth of it each must agree, and so must its catching up, so that one slow stretch
    (a 25 s pause in a callback, under the default) is none. Shorter for short runs (a CI smoke
    test), longer where steps vary (docs/hangs.md, "Stragglers")."""
    stop_grace: Seconds = Field(default=5.0, ge=0)
    """Seconds between SIGTERM and SIGKILL when stopping tasks. A task that has said its agreed
    save is written (the reference worker's `tfcluster-preempted`) gets 0.5 s more, not the rest:
    what is left is its process's teardown."""
    printed_progress: Flag = False
    """Also take a line a task prints on stdout or stderr as its progress when it is a progress record
    (`tfcluster-step global_step=N ...`, the format of docs/concepts/goodput.md): for a script that
    prints them and cannot write them to TFCLUSTER_CONTROL_FD, the descriptor tfcluster gives every
    task for them. This trusts everything the tasks print, and what they log from their data: a line
    that looks like a record moves the panel, `status`, the goodput and `compare` as a real one would.
    Beats and the standby protocol are only ever read from the descriptor, and a line stays in the
    task's log as printed. Default false: progress comes from the descriptor alone."""


class State(OptionsModel):
    """``state:`` -- the state dir on ssh hosts (checkpoints, backups, final model) and how the
    hosts see the chief's backup after a restart."""

    dir: Optional[str] = Field(None, json_schema_extra={"pattern": NONBLANK})
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
