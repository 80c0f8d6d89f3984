"""The ssh backend's state dir (``state:`` in the spec): shared or copied, and fetched at the end.

* ``detect``: in preflight, with ``state.sync: auto``, the chief's host agent writes a marker
  file into its state dir and every other host's agent looks for it (over the agents' channels:
  no extra remote shell); shared if every host sees it, else ``copy``. The console and the run
  record say which and why.
* ``prepare_attempt`` (``copy``, MultiWorkerMirroredStrategy): before every attempt -- so also
  before ``up`` resumes an earlier run of the same name -- the chief's latest complete backup
  (``statedir.RESUME_AREAS``) is streamed as a tar from the chief's host to every other
  host's state dir over the connections already open (``remote/statesync.py``): one channel on
  the chief's host packs, the launcher relays the bytes to one channel per other host, each
  receiver extracts into a temp dir and renames it into place only when size and sha256 match
  the sender's. A host whose copy fails fails the attempt with one line naming it.
  Under ParameterServerStrategy only the chief reads checkpoints, so nothing is copied.
* ``collect``: after a successful run the final model (``state.fetch: model``; with
  ``checkpoints`` also the checkpoints) comes back from the chief's host into the run's local
  ``runs/<name>/state/``, through the same verified unpack.

This module keeps the decisions and what they leave (the mode, where the newest backup is, the
copies made); statecheck.py holds the marker check, statecopy.py the copy (and the channels the
fetch shares), statefetch.py the fetch.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from launcher.contract import statedir
from launcher.plan.build import Plan
from launcher.record import events as ev
from launcher.remote import statesync as sync_lib
from launcher.backends.ssh import statecheck, statecopy, statefetch

if TYPE_CHECKING:  # pragma: no cover
    from launcher.notices import Notices
    from launcher.spec.model import State
    from launcher.backends.ssh.pool import HostPool

# Seconds without progress on a copy channel = that host's copy failed (a cut link): twice
# ssh.lease, the silence after which remote tasks count the launcher as gone, at least 10.
_MIN_IO_TIMEOUT = 10.0
MWMS = "multi_worker_mirrored"


def state_dir(cfg: "State", default: str) -> str:
    """The state dir on the hosts: state.dir, else ``default`` (under ssh.remote_dir)."""
    return cfg.dir or default


class StateSync:
    def __init__(self, pool: "HostPool", cfg: "State", console: "Notices", record, run_id: str) -> None:
        self.pool = pool  # the hosts and their connections
        self.console = console
        self.record = record  # the run record, or None (no run: down, the supervisor)
        self.run_id = run_id
        self.cfg = cfg  # the spec's state:
        self.mode: Optional[str] = None  # "shared" | "copy", once decided
        self.plan: Optional[Plan] = None
        # Where the newest backup is: the host of the chief of the last attempt that started (the
        # chief writes the backups; the others got a copy at its start), and that attempt's
        # training hosts (each holds that copy). None before the first attempt.
        self.writer: Optional[str] = None
        self.last_group: list[str] = []
        self.copies: list[dict] = []  # one entry per copy: size, seconds, hosts
        self.assumed = False  # "shared" decided with one host only: checked again once there are more
        self.io_timeout = max(_MIN_IO_TIMEOUT, 2 * pool.opts.lease)

    # ------------------------------------------------------------------ preflight

    def state_dir(self, default: str) -> str:
        return state_dir(self.cfg, default)

    def chief_host(self) -> str:
        assert self.plan is not None
        return self.plan.task(self.plan.success_task).host

    def marker_hosts(self, plan: Plan) -> Optional[tuple[str, list[str]]]:
        """Where ``detect`` will look for the marker (state.sync auto over two hosts or more):
        (the chief's host, every host), for the preflight to fold the write and the checks into
        its own exchanges; else None."""
        if self.mode is not None or not plan.tasks or self.cfg.sync != "auto" or self.cfg.is_url:
            return None
        hosts = sorted({t.host for t in plan.tasks})
        return (plan.task(plan.success_task).host, hosts) if len(hosts) >= 2 else None

    def detect(self, plan: Plan, names: list[str], sessions: dict,
               marked: Optional[tuple[dict[str, bool], list[str]]] = None) -> list[str]:
        """Decide shared or copy (once, in preflight); problem lines, or []. ``marked``: which
        hosts saw the marker (or the problem lines), as the preflight's own exchanges found it
        (``marker_hosts``); else asked here over the agents' channels."""
        if self.mode is not None or not plan.tasks:
            return []
        self.plan = plan
        hosts = sorted({t.host for t in plan.tasks})
        if self.cfg.sync != "auto":
            self.mode, why = self.cfg.sync, "state.sync"
        elif self.cfg.is_url:
            self.mode, why = "shared", "a gs:// dir"
        elif len(hosts) < 2:
            self.mode, why = "shared", "one host"
            # A group that started smaller than its count (a worker group with a min) may grow
            # onto other hosts: asked again then (``recheck``), before the copy would be needed.
            self.assumed = True
        else:
            seen, problems = marked or statecheck.markers(self.pool, self.chief_host(), hosts, sessions, self.run_id)
            if problems:
                return problems
            blind = [h for h in hosts if not seen.get(h)]
            chief = self.chief_host()
            if blind:
                self.mode = "copy"
                why = f"{', '.join(blind)} cannot see a file written through {chief}"
            else:
                self.mode, why = "shared", f"every host sees a file written through {chief}"
        self.console.info(f"state dir {self.pool.hosts[self.chief_host()].state_dir}: {self.mode} ({why})")
        if self.record is not None:
            self.record.write(ev.StateSyncMode(mode=self.mode, why=why, fetch=self.cfg.fetch))
        return statecheck.placement_problems(plan, self.mode, self.chief_host())

    # ------------------------------------------------------------------ before each attempt

    def use(self, plan: Plan) -> None:
        """A new plan (elastic: hosts moved, the group shrunk or grown): its tasks' hosts from the
        next attempt on. Where the newest backup is does not change with it (``writer``)."""
        self.plan = plan

    def training_hosts(self) -> list[str]:
        """The plan's chief and worker hosts, sorted (where the backup is needed)."""
        return sorted({t.host for t in self.plan.tasks if t.type in ("chief", "worker")}) if self.plan else []

    def source(self) -> str:
        """The host to copy the latest backup from: the last attempt's chief host while it
        answers, else one of that attempt's hosts still here (the plan's chief's first), else
        the chief's. Never merely the new plan's chief: after a move, a shrink or a grow that
        can be a host that just joined, with an old backup or none, and the group would resume
        from that (step 0 or an old step: every step since lost)."""
        chief, group = self.chief_host(), self.training_hosts()
        candidates = [self.writer] if self.writer else []
        candidates += sorted((h for h in self.last_group if h in group), key=lambda h: h != chief)
        for host in dict.fromkeys(candidates):
            if host in self.pool.hosts and not self.pool.is_lost(host) and not self.pool.connect([host]):
                return host
        return chief

    def recheck(self) -> None:
        """The run started on one host (state dir "shared": nothing to tell) and its plan now
        has more (a group that started small grew): is the state dir shared with them? The same
        marker test as ``detect``, over one short command per host on the connections open."""
        if not self.assumed or self.plan is None or len(self.training_hosts()) < 2:
            return
        import shlex

        self.assumed = False
        chief = self.chief_host()
        marker = statecheck.marker_name(self.run_id)
        path = {h: shlex.quote(f"{self.pool.hosts[h].state_dir.rstrip('/')}/{marker}") for h in self.training_hosts()}
        code, out = self.pool.run_on(chief, f"mkdir -p {shlex.quote(self.pool.hosts[chief].state_dir)} && "
                                     f": > {path[chief]}", None, 30.0)
        try:
            blind = [h for h in self.training_hosts() if h != chief
                     and self.pool.run_on(h, f"test -e {path[h]}", None, 30.0)[0] != 0]
        finally:
            self.pool.run_on(chief, f"rm -f {path[chief]}", None, 30.0)
        if code != 0:
            blind = [h for h in self.training_hosts() if h != chief]  # (copy: the safe answer)
        if not blind:
            return
        self.mode = "copy"
        why = f"{', '.join(blind)} cannot see a file written through {chief} (the group grew onto {'them' if len(blind) > 1 else 'it'})"
        self.console.info(f"state dir {self.pool.hosts[chief].state_dir}: copy ({why})")
        if self.record is not None:
            self.record.write(ev.StateSyncMode(mode=self.mode, why=why, fetch=self.cfg.fetch))

    def prepare_attempt(self, number: int) -> None:
        self.recheck()
        if self.mode != "copy" or self.plan is None or self.plan.strategy != MWMS:
            return
        chief = self.chief_host()
        group = self.training_hosts()
        src = self.source()
        targets = [h for h in group if h != src]
        if not targets:
            self.writer, self.last_group = chief, group
            return
        areas = [sync_lib.LATEST + a for a in statedir.RESUME_AREAS]
        started = time.monotonic()
        size = self._copy(src, targets, areas)
        self.writer, self.last_group = chief, group
        took = time.monotonic() - started
        self.copies.append({"attempt": number, "bytes": size, "seconds": round(took, 3), "to": targets})
        self.console.info(f"state: copied {src}'s latest backup ({statecopy.mb(size)}) to {', '.join(targets)} "
                            f"in {took:.1f} s")
        if self.record is not None:
            self.record.write(ev.StateCopy(attempt=number, source=src, to=list(targets), bytes=size,
                                            seconds=round(took, 3)))

    def _copy(self, src: str, targets: list[str], areas: list[str]) -> int:
        """``areas`` of ``src``'s state dir into each target's (statecopy.py); the bytes copied."""
        return statecopy.copy(self.pool, src, targets, areas, self.io_timeout)

    # ------------------------------------------------------------------ after success

    def collect(self) -> None:
        """Bring the final model and the TensorBoard logs (and, with state.fetch: checkpoints,
        the checkpoints) here."""
        if self.cfg.fetch == "none" or self.plan is None or self.record is None:
            return
        # The TensorBoard logs too (the chief's train/; small), for `tfcluster tensorboard`.
        areas = [statedir.FINAL_MODEL, statedir.TENSORBOARD] + (
            [statedir.CHECKPOINTS] if self.cfg.fetch == "checkpoints" else [])
        src = self.chief_host()
        present, size, took = statefetch.fetch(self.pool, src, areas, self.record.state_dir, self.io_timeout,
                                               self.console)
        self.record.write(ev.StateFetch(source=src, areas=list(present), bytes=size, seconds=round(took, 3)))
