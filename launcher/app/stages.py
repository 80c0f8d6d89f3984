"""``up``'s stages before anything starts, and the values the stages hand on.

``tfcluster up`` is a list of stages, each a function from a typed value to the next (after
SkyPilot's explicit stage list)::

    load      path        -> Read        the spec file, read once and checked
    discover  Read        -> Discovered  hosts: plus what discovery.command prints now
    plan      Discovered  -> Planned     the plan from the spec (waiting for room, below)
    (elsewhere: the CLI hands the command to the machine the run lives on, ssh.supervisor)
    open      Planned     -> Opened      the run record (not on disk yet) and the backend
    probe     Opened      -> Probed      the preflight until the plan is stable (probing.py)
    allocate  Probed      -> Allocated   the record on disk, the hosts allocated
    record    Allocated   -> Recorded    the plan the tasks start with, in the record
    supervise Recorded    -> RunResult   the supervisor to the run's end

launcher/app/up.py chains them: a foreground ``up``, the detached supervisor (``up
--supervise``), ``up --dry-run`` (to the probe) and ``tfcluster compare`` (from the plan, for a
spec it derived) each run the stages they need; no flag travels through them to choose.
This module holds the first three (the spec alone, nothing started) and the values.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from launcher.errors import LaunchError, SpecError
from launcher.loader.load import LoadedSpec, load_spec
from launcher.plan.build import NoRoom, Plan, build_plan
from launcher.plan.elastic import fitting_now
from launcher.plan.preflight import StartWith

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.base import Backend
    from launcher.loader.load import Spec
    from launcher.notices import Notices


@dataclass(frozen=True)
class Read:
    """``load``: the spec as its file says (read once), and the path as the user typed it."""

    loaded: LoadedSpec
    shown: str


@dataclass(frozen=True)
class Discovered:
    """``discover``: the spec with the hosts discovery.command printed (``loaded``), and the spec
    as its file says (``read``: the hosts it lists, which discovery never drops; what the command
    runs again from). A spec without discovery: the same spec twice."""

    read: LoadedSpec
    loaded: LoadedSpec

    @property
    def spec(self) -> "Spec":
        return self.loaded.spec

    @property
    def static_hosts(self) -> Optional[list[str]]:
        """The hosts the file lists, where discovery adds to them (None: no discovery)."""
        return [h.name for h in self.read.spec.hosts] if self.read.spec.discovery is not None else None


@dataclass(frozen=True)
class Planned:
    """``plan``: the spec (as discovered) and the plan from it, placed by its backend."""

    discovered: Discovered
    plan: Plan

    @property
    def loaded(self) -> LoadedSpec:
        return self.discovered.loaded


@dataclass(frozen=True)
class Opened:
    """``open``: the run's record (written from ``allocate`` on) and its backend, both to close
    on the way out."""

    planned: Planned
    record: Any  # launcher/record/writer.py's RunRecord
    backend: "Backend"


@dataclass(frozen=True)
class Probed:
    """``probe``: what the preflight gave (launcher/plan/preflight.py's ``StartWith``: the plan the
    run starts with, None for the allocation's; the hosts left out; why the group is smaller)."""

    opened: Opened
    start: StartWith


@dataclass(frozen=True)
class Allocated:
    """``allocate``: the record on disk and the plan the tasks start with."""

    probed: Probed
    plan: Plan


@dataclass(frozen=True)
class Recorded:
    """``record``: the plan in the record; what the supervisor is given."""

    allocated: Allocated

    @property
    def plan(self) -> Plan:
        return self.allocated.plan


@dataclass(frozen=True)
class Waits:
    """The clock and pause the waiting stages use (a scripted one in tests)."""

    clock: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep
    wall: Callable[[], float] = time.time


# ------------------------------------------------------------------ the stages


def load(path: str) -> Read:
    """The spec at ``path``, read and checked once (one-line errors naming the field)."""
    return Read(load_spec(path), path)


def warnings(read: Read, say: "Notices") -> None:
    """The spec's warnings (files that would shadow its entrypoint, secrets in its arguments), said;
    then what its own script would fail at in every task, refused (launcher/loader/scriptcheck.py:
    TF_CONFIG written by the script, Keras 3 alone where ``keras`` is tf_keras)."""
    from launcher.loader.notes import warnings as noted
    from launcher.loader.scriptcheck import check_script

    for line in noted(read.loaded):
        say.info(line)
    check_script(read.loaded)


def discover(read: Read) -> Discovered:
    """The hosts discovery.command prints now, added to ``hosts:`` (the file as it was read)."""
    from launcher.loader.discovery import with_discovered

    return Discovered(read.loaded, with_discovered(read.loaded))


def as_found(loaded: LoadedSpec) -> Discovered:
    """A spec taken as it is, without running its discovery (``compare``'s derived specs, the
    commands that look at a run)."""
    return Discovered(loaded, loaded)


def plan(discovered: Discovered, gpus: bool = True) -> Planned:
    """The plan from the spec alone (``plan_for``)."""
    return Planned(discovered, plan_for(discovered.spec, gpus=gpus))


def plan_for(spec: "Spec", gpus: bool = True) -> Plan:
    """The plan from the spec alone (``tfcluster validate``/``plan``, ``up``): the backend's
    static placement, placeholders when it knows its nodes only after allocating.
    ``gpus=False``: without the hosts' GPUs (no GPU refusals, each task's request unmade): for the
    commands that look at a run rather than start one (status, down, logs...), which must work
    when a GPU is gone."""
    from launcher.backends import backend_class

    cls = backend_class(spec.backend)

    def place(shape):
        placement = cls.place(shape)
        return placement if gpus else replace(placement, gpus={})

    try:
        return build_plan(spec, place(spec))
    except SpecError:
        # A group with tasks.worker.min starts with the room the hosts known now have (slots:
        # discovery has not found every host yet) and grows as hosts appear.
        smaller = fitting_now(spec, place) if starts_small_here(spec) else None
        if smaller is None:
            raise
        return smaller


def starts_small_here(spec: "Spec") -> bool:
    """The spec's worker group starts with the hosts there (launcher/plan/elastic.py's
    starts_small): it has a min, and its backend moves tasks with elastic on."""
    from launcher.backends import backend_class, placed_hosts
    from launcher.plan.elastic import elastic_enabled, starts_small

    elastic = backend_class(spec.backend).capabilities.elastic and elastic_enabled(spec, placed_hosts(spec))
    return starts_small(spec, elastic)


def plan_with_room(discovered: Discovered, say: "Notices", waits: Waits = Waits()) -> Planned:
    """``up``'s plan stage: where hosts come from discovery.command and a worker group has a min,
    the hosts it lists now may have no room for even ``min`` workers (hosts[].slots, a typed
    ``NoRoom``). Then the run waits up to elastic.host_wait, running the command again every
    discovery.every s (from the file as read: it is not read again), and ends in one line if
    the room never comes."""
    from launcher.loader.discovery import with_discovered
    from launcher.plan.elastic import options

    spec = discovered.spec
    try:
        return plan(discovered)
    except NoRoom as exc:
        if spec.discovery is None or not starts_small_here(spec):
            raise
        problem = exc.lines[0]
    opts = options(spec)
    deadline = waits.clock() + opts.host_wait
    say.info(f"discovery.command lists room for fewer than tasks.worker.min={spec.tasks.worker.min} workers; "
             f"waiting up to elastic.host_wait={opts.host_wait:g} s for hosts, running it every "
             f"{spec.discovery.every:g} s")
    while True:
        left = deadline - waits.clock()
        if left <= 0:
            raise LaunchError(f"no room for tasks.worker.min={spec.tasks.worker.min} workers on the hosts "
                              f"discovery.command listed within elastic.host_wait={opts.host_wait:g} s ({problem}); "
                              "start more hosts, raise hosts[].slots, or lower tasks.worker.min")
        waits.pause(min(spec.discovery.every, left))
        again = Discovered(discovered.read, with_discovered(discovered.read))
        try:
            return plan(again)
        except NoRoom as exc:
            problem = exc.lines[0]
