"""The run record's events about hosts, and the backends' own (record/events.py holds those of the
run, its attempts and its tasks, and ``KINDS``, which maps every kind to its class): elastic host
changes (host_lost, replan, host_added, host_wait, host_preempted, discovery), a host's fork
server (zygote_ended), the ssh state dir (state_sync, state_copy, state_fetch), Slurm's allocation
(slurm_submitted, slurm_running, slurm_cancelled) and the GPUs (gpu_usage, task_gpus). Each is a
frozen dataclass of record/eventbase.py's ``RecordEvent``; readers reach them as
``launcher.record.events``' names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional, Union

from launcher.record.eventbase import JSON, Count, Event, RecordEvent, Seconds


@dataclass(frozen=True, kw_only=True)
class HostLost(RecordEvent):
    """A host lost (plan/hostloss.py's ``HostLoss``): ``cause`` (its ``LossKind``'s value), ``since``
    (when the loss began, epoch seconds) and ``how`` (its words). ``suspect``: the host's session
    was lost or it does not answer; it is used again once it answers for ``settle`` s without a
    break. ``spare``: the host held no task of the plan, only warm standbys (a hot spare): no
    training was lost, nothing is replanned, and it is not chosen for a move until it answers
    again. launcher/record/hosts.py's ``loss_of`` reads it back typed."""

    KIND: ClassVar[str] = Event.HOST_LOST
    host: str
    how: str = ""
    suspect: bool = False
    attempt: Optional[Count] = None
    settle: Optional[Seconds] = None
    spare: bool = False
    cause: Optional[str] = None
    since: Optional[float] = None


@dataclass(frozen=True, kw_only=True)
class Replan(RecordEvent):
    KIND: ClassVar[str] = Event.REPLAN
    plan: Optional[Count] = None  # 2, 3, ...: plan-N.json
    attempt: Optional[Count] = None  # the attempt it begins
    file: str = ""
    lost: list[str] = field(default_factory=list)
    old_hosts: list[str] = field(default_factory=list)
    new_hosts: list[str] = field(default_factory=list)
    moved: dict[str, dict[str, str]] = field(default_factory=dict)  # key -> {"from": host, "to": host}
    dropped: list[str] = field(default_factory=list)
    added: dict[str, str] = field(default_factory=dict)  # grow: key -> host
    tasks: Optional[list[str]] = None  # the group after it
    hosts: Optional[list[str]] = None  # the hosts the new plan uses, sorted
    back: list[str] = field(default_factory=list)  # grow: the hosts of ``added`` that held no task before
    how: dict[str, str] = field(default_factory=dict)  # each lost host: how it was lost, as said
    suspect: list[str] = field(default_factory=list)  # the lost hosts whose loss may pass (LossKind.suspect)
    then: str = ""  # what the group does next, in words


@dataclass(frozen=True, kw_only=True)
class HostAdded(RecordEvent):
    KIND: ClassVar[str] = Event.HOST_ADDED
    host: str
    attempt: Optional[Count] = None
    settle: Optional[Seconds] = None
    spare: bool = True


@dataclass(frozen=True, kw_only=True)
class HostWait(RecordEvent):
    """Fewer than ``tasks.worker.min`` workers can run: the run waits for ``hosts`` until ``until``
    (the time, elastic.host_wait = ``wait`` s after the wait began); ``have`` workers could run,
    ``need`` (the min) must. ``attempt``: the attempt that waits (None: before the first, at the
    preflight). The wait ends with the next attempt's start (or a replan, or the outcome)."""
    KIND: ClassVar[str] = Event.HOST_WAIT
    hosts: list[str] = field(default_factory=list)
    have: Count = 0
    need: Count = 0
    until: Seconds = 0.0
    wait: Seconds = 0.0
    attempt: Optional[Count] = None


@dataclass(frozen=True, kw_only=True)
class HostPreempted(RecordEvent):
    KIND: ClassVar[str] = Event.HOST_PREEMPTED
    host: str


@dataclass(frozen=True, kw_only=True)
class ZygoteEnded(RecordEvent):
    """A host's fork server (launcher/remote/zygote.py) ended (``code``: its wrapper's exit, where
    known): started again (``restart``: the n-th time this run) or not (``cold``: why the host's
    tasks start cold from now on). ``said``: the one-line note (launcher/backends/zygotes.py
    Restarts), as said in the console. Tasks it forked before are not touched: each has its own
    waiter."""

    KIND: ClassVar[str] = Event.ZYGOTE_ENDED
    host: str
    code: Optional[int] = None
    restart: Optional[Count] = None
    cold: str = ""
    said: str = ""


@dataclass(frozen=True, kw_only=True)
class ZygoteWarm(RecordEvent):
    """A host's fork server kept warm past the run (``ssh.keep_warm``: launcher/remote/zygotehost.py):
    ``reused``, one an earlier run kept (``pid``), else one started to be kept; without ``pid``, it
    could not be kept (``said`` says why: the run's server is then its own, ending with the run).
    ``said``: the one line the console says."""

    KIND: ClassVar[str] = Event.ZYGOTE_WARM
    host: str
    pid: Optional[Count] = None
    reused: bool = False
    said: str = ""


@dataclass(frozen=True, kw_only=True)
class DiscoveryAnswer(RecordEvent):
    KIND: ClassVar[str] = Event.DISCOVERY
    ok: bool = True
    problem: Optional[str] = None  # (a failed answer: no added, no gone)
    added: Optional[list[str]] = None
    gone: Optional[list[str]] = None
    kept: Optional[list[str]] = None  # a failed answer: the host list kept (the last good one)
    settle: Optional[Seconds] = None  # elastic.settle: how long a host found must answer to be used


@dataclass(frozen=True, kw_only=True)
class StateSyncMode(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_SYNC
    mode: str = ""
    why: str = ""
    fetch: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class StateCopy(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_COPY
    source: str = ""
    to: list[str] = field(default_factory=list)
    attempt: Optional[Count] = None
    bytes: Optional[Count] = None
    seconds: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class StateFetch(RecordEvent):
    KIND: ClassVar[str] = Event.STATE_FETCH
    source: str = ""
    areas: list[str] = field(default_factory=list)
    bytes: Optional[Count] = None
    seconds: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class SlurmSubmitted(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_SUBMITTED
    job: str = ""
    nodes: Optional[Count] = None
    tasks_per_node: Optional[Count] = None


@dataclass(frozen=True, kw_only=True)
class SlurmRunning(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_RUNNING
    job: str = ""
    nodes: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    waited: Optional[Seconds] = None


@dataclass(frozen=True, kw_only=True)
class SlurmCancelled(RecordEvent):
    KIND: ClassVar[str] = Event.SLURM_CANCELLED
    job: str = ""


@dataclass(frozen=True, kw_only=True)
class GpuUsage(RecordEvent):
    """Per task, ``[MiB used, utilisation %]`` (either None where nvidia-smi did not say)."""

    KIND: ClassVar[str] = Event.GPU_USAGE
    tasks: dict[str, list[Optional[Union[int, float]]]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TaskGpus(RecordEvent):
    """The GPUs a task got where it started: ``gpus`` as that machine numbers them; ``visible`` its
    CUDA_VISIBLE_DEVICES where that names UUIDs (a MIG device, a host's UUID limit), "" otherwise;
    ``collective`` the all-reduce set there for it (the ssh wrapper decides collective auto on the
    host: ``nccl``), "" where none was set (TensorFlow's AUTO: RING)."""

    KIND: ClassVar[str] = Event.TASK_GPUS
    task: str
    gpus: list[Union[int, str]] = field(default_factory=list)
    visible: str = ""
    collective: str = ""
