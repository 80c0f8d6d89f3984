"""``up``'s ``open`` and ``probe`` stages: the run's record and backend, then the preflight until
the plan is stable.

The backend's preflight (``Hosts.probe``) only reports what it found (launcher/plan/hostreport.py);
launcher/plan/preflight.py's ``step`` says what that gives: start, probe another plan (said in
a line where it needs saying), wait for hosts, or the error. A worker group with
``tasks.worker.min`` below its min waits here up to elastic.host_wait, probing again about every
second: the wait is said once, recorded as the run record's ``host_wait`` events (one as it
begins, one each time the hosts waited for change) and, on a terminal, counted down from them
as the panel and ``status`` draw them; after the wait, one line naming the hosts.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Optional

from launcher.app.stages import Opened, Planned, Probed, Waits, starts_small_here
from launcher.errors import LaunchError
from launcher.plan.build import Plan
from launcher.plan.hostreport import Absent
from launcher.plan.preflight import Refused, ProbeAgain, Seen, StartWith, WaitForHosts, step
from launcher.record import events as ev
from launcher.record.hosts import waiting_line
from launcher.record.layout import runs_dir

if TYPE_CHECKING:  # pragma: no cover
    from launcher.app.sinks import RunConsole

# Plans probed one after another without a wait (hosts absent, sessions dropped, a placement by
# GPUs, a container's machine): a preflight that has not settled after these is a bug, said so.
REPLANS = 8


def open_run(planned: Planned, console: "RunConsole", run_id: Optional[str] = None, detached: bool = False) -> Opened:
    """The run record (nothing on disk until ``allocate``) and the backend, for ``planned``."""
    from launcher.backends import backend_class
    from launcher.record.writer import RunRecord

    spec = planned.loaded.spec
    record = RunRecord(runs_dir(planned.loaded), planned.plan, run_id=run_id, on_problem=console.error, share=spec.share)
    if detached:
        record.launcher_info["detached"] = True
    try:
        backend = backend_class(spec.backend).from_spec(planned.loaded, record, console)
    except BaseException:
        record.close()
        raise
    return Opened(planned, record, backend)


def close(opened: Opened) -> None:
    """What ``open`` opened, let go: the backend's connections, clients and allocation, the record."""
    try:
        opened.backend.close()
    finally:
        opened.record.close()


def probe(opened: Opened, console: "RunConsole", waits: Waits = Waits()) -> Probed:
    """Probe the plan, ask launcher/plan/preflight.py what the report gives, and probe again
    until the plan is stable (or the wait for hosts runs out: one line)."""
    spec = opened.planned.loaded.spec
    seen = Seen(opened.planned.plan, small=starts_small_here(spec))
    plan = seen.full
    wait: Optional[_HostWait] = None
    replans = 0
    with contextlib.ExitStack() as stack:
        while True:
            seen, got = step(spec, seen, plan, opened.backend.hosts.probe(plan))
            if isinstance(got, StartWith):
                return Probed(opened, got)
            if isinstance(got, Refused):
                raise got.error()
            if isinstance(got, ProbeAgain):
                replans += 1
                if got.plan == plan or replans > REPLANS:
                    raise LaunchError(f"internal: the preflight did not settle on a plan after {replans} probes; "
                                      "please report this with the lines above")
                if got.line:
                    console.info(got.line)
                plan = got.plan
                continue
            first = wait is None
            if wait is None:
                wait = _HostWait(opened, console, waits, seen.full)
            wait.note(got)
            if first:
                stack.enter_context(console.countdown(wait.left_text))
            wait.pause(got)
            replans = 0
            plan = seen.full


class _HostWait:
    """The wait below tasks.worker.min: said once, recorded, counted down; the pause between
    probes; one line when elastic.host_wait runs out."""

    def __init__(self, opened: Opened, console: "RunConsole", waits: Waits, full: Plan) -> None:
        from launcher.plan.elastic import options

        self.spec = opened.planned.loaded.spec
        self.record = opened.record
        self.waits = waits
        self.full = full
        self.wait = options(self.spec).host_wait
        self.deadline = waits.clock() + self.wait
        self.until = waits.wall() + self.wait  # (the record's clock: the deadline as status reads it)
        self.hosts: list[str] = []
        self.shown: Optional[ev.HostWait] = None  # (read by the countdown's thread: replaced, never changed)
        self.console = console

    def left_text(self) -> str:
        assert self.shown is not None  # (noted before the countdown starts)
        return waiting_line(self.shown, self.until - (self.deadline - self.waits.clock()))

    def note(self, got: WaitForHosts) -> None:
        """Hosts still short after a probe: the first time said and recorded; the hosts waited
        for recorded again when they change."""
        hosts = sorted(a.host for a in got.absent)
        if self.shown is None:
            self.console.info(f"{', '.join(hosts)} not answering: {got.why}; waiting up to elastic.host_wait="
                              f"{self.wait:g} s for hosts (until "
                              f"{time.strftime('%H:%M:%S', time.localtime(self.until))})")
        if hosts != self.hosts:
            self.hosts = hosts
            self.shown = self._event(hosts)
            self.record.write_early(self.shown)

    def pause(self, got: WaitForHosts) -> None:
        """The pause before the next probe, or the one line once elastic.host_wait is over."""
        left = self.deadline - self.waits.clock()
        if left <= 0:
            raise self._ended(got.absent, got.why)
        self.waits.pause(min(1.0, left))

    def _event(self, hosts: list[str]) -> ev.HostWait:
        """The wait as the record's event: the hosts waited for, the workers that could start
        without them."""
        have = sum(1 for t in self.full.tasks if t.type == "worker" and t.host not in hosts)
        return ev.HostWait(hosts=list(hosts), have=have, need=self.spec.tasks.worker.min or 0, until=self.until,
                           wait=self.wait)

    def _ended(self, absent: tuple[Absent, ...], why: str) -> LaunchError:
        hosts = sorted(a.host for a in absent)
        said = "; ".join(a.text for a in sorted(absent, key=lambda a: a.host))
        return LaunchError(f"{', '.join(hosts)} not answering after elastic.host_wait={self.wait:g} s: {why} ({said}); "
                           f"bring {'them' if len(hosts) > 1 else 'it'} back, list more hosts under hosts: (spares), "
                           "or lower tasks.worker.min")
