"""What a start asks of a backend (``StartRequest``), what it answers of the process it made
(``ProcessInfo``), both typed (``Tasks.start(request, on_line)``, ``TaskHandle.info()``), and a run
as ``tfcluster down`` reads it back from its record (``RecordedRun``, ``from_record``).

A request says everything the backend decides a start by: the task (its command may be the
standby stub's), the variables the supervisor adds to the plan's, whether it is a warm standby
(``standby``: it waits for its promotion, launcher/supervise/standby.py) and whether the host's
warm parent may fork it (``fork``: the fork server, launcher/remote/zygote.py, where the backend
keeps one, ``Capabilities.fork``). No backend reads a flag of the supervisor's out of the
environment: the variables the task itself reads (TFCLUSTER_STANDBY, TFCLUSTER_STANDBY_ENV) are
added by the backend from the request (``StartRequest.told``), for the task and the stub alone.

``ProcessInfo`` is what the run record keeps of a started task (launcher.json's ``tasks`` entry,
a start event's ``process``): ``to_json`` writes the shape every tfcluster wrote (a local task's
``{"pid", "pgid", "start_time"}``, ssh's ``ssh_host``/``remote_pidfile``/``remote_run_dir``, ...),
so ``tfcluster down`` reads records of older and newer versions alike. Each backend has its own
kind of it; generic code asks ``local_pid()`` and ``local_group()`` (a process and a process group
on this machine, where the task has one), never a key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from launcher.contract import envnames
from launcher.plan.build import PlannedTask

if TYPE_CHECKING:  # pragma: no cover
    from launcher.notices import Notices


@dataclass(frozen=True)
class StartRequest:
    """One start of one task. ``env``: the variables the supervisor adds to the plan's (the
    attempt's number, the run's id), which win over the plan's. ``standby``: a warm standby of
    the next attempt, which waits for ``Tasks.promote`` (the backend keeps its promotion file
    and tells the task ``told``'s two variables). ``fork``: the host's warm parent (the fork
    server) may fork the task, where the backend keeps one and the command can use it; decided
    once per run from ``Capabilities.fork`` and restart.warm_standby (supervise/standby.py's
    ``forks``). A promotion is asked with the request of the cold start the standby stands for
    (``standby`` False)."""

    task: PlannedTask
    env: Mapping[str, str] = field(default_factory=dict)
    standby: bool = False
    fork: bool = False

    @property
    def key(self) -> str:
        return self.task.key

    def told(self, promotion: Optional[str] = None) -> dict[str, str]:
        """What the task is told besides the plan's environment: ``env``, and for a standby the
        protocol's variables, which the task (tfcluster's worker, the standby stub) reads:
        TFCLUSTER_STANDBY=1 and, where the backend keeps one, TFCLUSTER_STANDBY_ENV naming its
        promotion file (``promotion``, as the task sees the path)."""
        out = dict(self.env)
        if self.standby:
            out[envnames.STANDBY] = "1"
            if promotion is not None:
                out[envnames.STANDBY_ENV] = promotion
        return out


@dataclass(frozen=True)
class ProcessInfo:
    """What the run record keeps of one started task for ``tfcluster down`` and the events; a
    backend's own kind adds its fields. ``to_json``: the record's shape, its fields by name."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def local_pid(self) -> Optional[int]:
        """The task's process on this machine (its wrapper; a Slurm step's srun), or None where the
        task runs elsewhere (a host over ssh, a container)."""
        return None

    def local_group(self) -> Optional[int]:
        """The process group on this machine that holds the task (what the GPU watch matches
        nvidia-smi's processes against, what ``down`` stops), or None."""
        return None


@dataclass(frozen=True)
class LocalProcess(ProcessInfo):
    """A task that is a process group of this machine (the local backend's wrapper; the slurm
    backend's srun): its leader's pid, the group, and the leader's start time (clock ticks after
    boot, ``procinfo.start_time``; None where /proc did not say), which with the pid proves the
    process the same one later (``down``)."""

    pid: int
    pgid: int
    start_time: Optional[int]

    def local_pid(self) -> Optional[int]:
        return self.pid

    def local_group(self) -> Optional[int]:
        return self.pgid


def from_record(entry: Mapping[str, Any]) -> Optional[LocalProcess]:
    """A launcher.json task entry (of any version: checked by record/reader.py's TASK_FIELDS) as
    the local process it names, or None where it names none (a host over ssh, a container)."""
    pid, pgid = entry.get("pid"), entry.get("pgid")
    if not isinstance(pid, int) or not isinstance(pgid, int) or isinstance(pid, bool) or isinstance(pgid, bool):
        return None
    start = entry.get("start_time")
    return LocalProcess(pid=pid, pgid=pgid, start_time=start if isinstance(start, int) else None)


@dataclass(frozen=True)
class RecordedRun:
    """A run as ``tfcluster down`` finds it on disk: its directory and launcher.json
    (``run_id``, the launcher's ``pid``, and ``tasks``: key -> TaskHandle.info()'s ``to_json``;
    ``process.from_record`` reads a local process back from one)."""

    dir: Path
    info: Mapping[str, Any] = field(default_factory=dict)
    # The uid that owns the record's launcher.json (the file itself): the only user whose processes
    # it can name (``procinfo.not_own``'s ``owner``); None: not known, and not checked.
    owner: Optional[int] = None
    # One line per process, container or job the record names that ``down`` could not prove the
    # run's own and so left alone (a record is data, not orders); ``down`` exits non-zero if any.
    refused: list[str] = field(default_factory=list, compare=False)

    @property
    def run_id(self) -> str:
        """The run's id: its record dir's name. A record's own ``run_id`` that says otherwise is
        not believed (a copied or planted record would otherwise point ``down`` at another run)."""
        return self.dir.name

    def refuse(self, console: "Notices", line: str) -> None:
        """Leave something the record names alone, saying why in one line."""
        self.refused.append(line)
        console.error(line)

    @property
    def tasks(self) -> Mapping[str, Mapping[str, Any]]:
        return self.info.get("tasks") or {}

    @property
    def allocation(self) -> Mapping[str, Any]:
        """What the backend recorded with ``RunRecord.allocated(...)`` (e.g. a job id): launcher.json's
        ``allocation``, else (a record of an older tfcluster) the backend's own ``<backend>.json``."""
        from launcher.record.reader import read_allocation

        return self.info.get("allocation") or read_allocation(self.dir, str(self.info.get("backend") or ""))
