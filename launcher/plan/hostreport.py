"""What a backend's preflight found of the hosts (``Hosts.probe``), typed: which hosts answered,
their GPUs, which are absent and why, what it refused and why. A preflight only reports; the plans
its findings give are made in launcher/plan/preflight.py, which reads these fields, never the
words of a line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional


class AbsentKind(enum.Enum):
    """Why a host is not in the run at the start (the value is how ``status`` says it)."""

    NOT_ANSWERING = "not answering"
    DROPPED = "dropped its sessions at the start"


@dataclass(frozen=True)
class Absent:
    """A host left out at the start: ``kind``, ``host``, ``since`` (wall-clock time it was first
    found so) and ``text`` (the preflight's one line about it: ``host h2: timed out after 3 s``)."""

    kind: AbsentKind
    host: str
    since: float
    text: str


class ProblemKind(enum.Enum):
    """What a preflight's refusal is about, for the plans it may give (launcher/plan/preflight.py)."""

    GPU = "gpu"  # the plan's GPU placement on a host (a placement by each host's GPUs may fit)
    PORT_IN_USE = "port in use"  # a planned port is taken there (a probe's own agents may still hold it)
    DROPPED = "dropped"  # the host's sessions died during the preflight (a host shutting down)
    OTHER = "other"  # anything else: the one line is the error


@dataclass(frozen=True)
class Problem:
    """One refusal of the preflight: its ``kind``, the ``host`` it is about ("" for none in
    particular), its one line ``text``, and the spec key it names (``key``: for the error's
    position in the spec file) where it names one."""

    kind: ProblemKind
    host: str
    text: str
    key: Optional[tuple] = None


@dataclass(frozen=True)
class SharedMachine:
    """The one machine every task of the run is a container on (docker: the engine's host), as
    the preflight found it: its ``name`` in the plan's placement, its ``cores``, its ``gpus``
    (nvidia-smi -L's placement units there; None: no task asked for one) and the
    CUDA_VISIBLE_DEVICES ``limit`` the run's GPUs come from (None: none)."""

    name: str
    cores: Optional[int] = None
    gpus: Optional[tuple] = None
    limit: Optional[str] = None


@dataclass(frozen=True)
class HostReport:
    """What one preflight of a plan found. ``answered``: the hosts that answered (the plan's and,
    for a group that starts small, its spares). ``gpus``: host -> its GPUs as the host listed
    them (None: not asked). ``absent``: the hosts that did not answer. ``problems``: what it
    refused. ``shared``: the machine every task is a container on, where that is so. ``at``: when
    it looked (wall clock). A report with neither absent hosts of the plan nor problems passed."""

    answered: tuple[str, ...] = ()
    gpus: Mapping[str, Optional[tuple]] = field(default_factory=dict)
    absent: tuple[Absent, ...] = ()
    problems: tuple[Problem, ...] = ()
    shared: Optional[SharedMachine] = None
    at: float = 0.0

    def kinds(self) -> set[ProblemKind]:
        return {p.kind for p in self.problems}
