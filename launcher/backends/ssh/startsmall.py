"""The ssh preflight of a worker group with ``tasks.worker.min``: it starts with the hosts that
answer (launcher/plan/startsmall.py's ``start_small`` says with which plan). A listed host that does
not answer within ``ssh.connect_timeout`` is not an error but a host the group grows onto later;
below ``min`` the preflight waits up to ``elastic.host_wait`` for hosts to answer, then ends in one
line naming them. A host that must hold a chief, ps or evaluator is not elastic: its error is the
usual one."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Optional, Union

from launcher.errors import LaunchError
from launcher.record import events as ev
from launcher.record.hosts import waiting_line
from launcher.plan.build import Plan
from launcher.plan.elastic import options, spare_hosts
from launcher.plan.startsmall import HostReport, start_small
from launcher.spec.model import Spec
from launcher.backends.ssh import probe as ssh_probe

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool


def hosts_there(pool: "HostPool", spec: Spec, plan: Plan, say: Callable[[str], None],
                clock: Callable[[], float] = time.monotonic,
                pause: Callable[[float], None] = time.sleep,
                countdown: Optional[Callable[[Callable[[], str]], ContextManager]] = None,
                record: Optional[Callable[[ev.HostWait], None]] = None) -> tuple[Plan, dict[str, str]]:
    """Connect to the plan's hosts and the spares (in parallel, each within ssh.connect_timeout):
    (the plan to start with, {absent host: its one-line problem}). Raises the usual unreachable
    error where a chief, ps or evaluator host does not answer, and one line when fewer than
    tasks.worker.min workers have hosts after elastic.host_wait. ``countdown(text)``: a context
    in which ``text()`` is shown as a line that counts down (Notices.countdown: the console draws it on a terminal);
    ``record(event)``: the wait, as the run record's ``host_wait`` events (one as it begins, one
    each time the hosts waited for change), which that line is drawn from, as the panel and
    ``status`` draw theirs."""
    names = sorted({t.host for t in plan.tasks})
    spares = spare_hosts(spec, names)
    problems = pool.connect([*names, *spares])
    if not problems:
        return plan, {}
    change = _start_plan(spec, plan, names, problems)
    if not isinstance(change, str):
        return change, dict(problems)
    opts = options(spec)
    deadline = clock() + opts.host_wait
    absent = sorted(problems)
    say(f"{', '.join(absent)} not answering: {change}; waiting up to elastic.host_wait={opts.host_wait:g} s "
        f"for hosts (until {time.strftime('%H:%M:%S', time.localtime(time.time() + opts.host_wait))})")
    until = time.time() + opts.host_wait  # (the record's clock: the deadline as status reads it)
    shown = [_wait_event(spec, plan, absent, until, opts.host_wait)]  # (read by the countdown's thread: replaced)
    (record or _unrecorded)(shown[0])

    def left_text() -> str:
        return waiting_line(shown[0], until - (deadline - clock()))  # (now, as the record's clock reads it)

    with (countdown or _no_countdown)(left_text):
        while True:
            left = deadline - clock()
            if left <= 0:
                why = "; ".join(problems[h] for h in absent)
                raise LaunchError(f"{', '.join(absent)} not answering after elastic.host_wait={opts.host_wait:g} s: "
                                  f"{change} ({why}); bring {'them' if len(absent) > 1 else 'it'} back, list more "
                                  "hosts under hosts: (spares), or lower tasks.worker.min")
            pause(min(1.0, left))
            problems = pool.connect(absent)  # the ones that answer now are the plan's again
            change = _start_plan(spec, plan, names, problems)
            if not isinstance(change, str):
                return change, dict(problems)
            if sorted(problems) != absent:
                absent = sorted(problems)
                shown[0] = _wait_event(spec, plan, absent, until, opts.host_wait)
                (record or _unrecorded)(shown[0])


def _wait_event(spec: Spec, plan: Plan, absent: list[str], until: float, wait: float) -> ev.HostWait:
    """The wait below tasks.worker.min as the record's event: the hosts waited for, the workers
    that could start without them."""
    have = sum(1 for t in plan.tasks if t.type == "worker" and t.host not in absent)
    return ev.HostWait(hosts=list(absent), have=have, need=spec.tasks.worker.min or 0, until=until, wait=wait)


def _unrecorded(_event: ev.HostWait) -> None:
    pass


def _start_plan(spec: Spec, plan: Plan, names: list[str], problems: dict[str, str]) -> Union[Plan, str]:
    """The plan without the hosts of ``problems``, or why fewer than min workers can start (a few
    words); the usual unreachable error where one of them holds a chief, ps or evaluator."""
    change = start_small(spec, plan, HostReport(small=True, absent=problems))
    if change is None:  # not elastic: the usual error
        ssh_probe.unreachable_error(names, {h: p for h, p in problems.items() if h in names})
    return change


@contextlib.contextmanager
def _no_countdown(_text: Callable[[], str]) -> Iterator[None]:
    yield


# The preflight's lines for a host whose sessions died under it (probe.py): a host shutting down
# (its sessions end while its sshd still answers), or a link that dropped.
_DROPPED = ("the connection closed during preflight", "preflight could not run",
            "the reachability probe gave no answer")


def dropped_hosts(lines: tuple[str, ...], plan: Plan) -> list[str]:
    """The hosts whose sessions the preflight lost, where that is all that went wrong and they hold
    only workers; else [] (the error stands as it is)."""
    hosts = {t.host for t in plan.tasks}
    gone: set[str] = set()
    for line in lines:
        if line == "no task was started" or line.startswith("nothing was started:"):
            continue
        host = next((h for h in hosts if any(line.startswith(f"host {h}: {what}") for what in _DROPPED)), None)
        if host is None:
            return []
        gone.add(host)
    if any(t.host in gone and t.type != "worker" for t in plan.tasks):
        return []
    return sorted(gone)
