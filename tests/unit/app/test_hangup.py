"""The signals that stop a foreground ``up`` (launcher/app/up.py's ``_supervise``), at unit speed: the
real supervisor over scripted tasks (tests/support/fakes.py), the signal sent to this process
while it runs. A closed terminal (SIGHUP) stops every task as one Ctrl-C does, with SIGTERM and
the grace to save, never with the SIGKILL of a second Ctrl-C (the tmux window's close, with stand-in
tasks that save: tests/integration/test_terminal_closed.py)."""

from __future__ import annotations

import io
import os
import signal
import textwrap
import threading

import pytest

import launcher.record.events as ev
from launcher.app.up import _supervise, hangup_reason, plan_for
from launcher.record.states import Outcome
from launcher.record.writer import RunRecord
from launcher.loader.load import parse_spec
from launcher.supervise.loop import Supervisor
from launcher.supervise.membership import HostsGiven
from launcher.ui.console import Console
from tests.support.fakes import RUN_FOREVER, Counter, ScriptedTasks, scripted
from tests.support.records import read_records

SPEC = """\
    name: s
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 2}
    restart: {max_restarts: 2}
    watchdog: {stop_grace: 30}
"""


def run_with_signal(tmp_path, *signals: int):
    """(the run's result, its events) of ``_supervise`` in the foreground, ``signals`` sent to this
    process once both tasks have started."""
    spec = parse_spec(textwrap.dedent(SPEC))
    plan = plan_for(spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    backend = scripted(ScriptedTasks({}, default=RUN_FOREVER))
    sup = Supervisor(plan, backend, record, spec.restart, spec.watchdog, poll_interval=0.0, clock=Counter(),
                     given=HostsGiven(spec=spec))
    console = Console(out=io.StringIO(), err=io.StringIO(), color=False)
    console.listen(record, sup.view)
    tasks, start = backend.tasks, backend.tasks.start

    def start_then_signal(request, on_line):
        handle = start(request, on_line)
        if len(tasks.started) == 2:
            for sig in signals:  # (handled on this thread, the main one, before start returns)
                os.kill(os.getpid(), sig)
        return handle

    tasks.start = start_then_signal
    result = _supervise(sup, spec, plan, record, console, foreground=True, panel=False)
    return result, read_records(record.dir)


def ends(events) -> list[int]:
    return sorted(e["code"] for e in events if isinstance(e, (ev.Stopped, ev.Exit)))


@pytest.fixture
def guarded():
    """A SIGHUP or SIGINT that reached no handler of ``_supervise``'s would end the test process:
    a handler of the test's own below it (which ``_supervise`` puts back after), the originals
    restored after."""
    assert threading.current_thread() is threading.main_thread()
    caught: list[int] = []
    before = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
              for sig in (signal.SIGHUP, signal.SIGINT)}
    try:
        yield caught
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_sighup_stops_every_task_gracefully_and_says_why(tmp_path, guarded):
    result, events = run_with_signal(tmp_path, signal.SIGHUP)
    assert result.outcome == Outcome.INTERRUPTED
    assert result.reason == hangup_reason("SIGHUP")
    assert ends(events) == [143, 143]  # SIGTERM only: they saved
    assert not guarded  # (_supervise's handler took it, and put the test's back after)
    assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL


def test_sighup_twice_is_still_graceful_and_ctrl_c_twice_kills_at_once(tmp_path, guarded):
    result, events = run_with_signal(tmp_path / "hup", signal.SIGHUP, signal.SIGHUP)
    assert result.reason == hangup_reason("SIGHUP") and ends(events) == [143, 143]
    result, events = run_with_signal(tmp_path / "int", signal.SIGINT, signal.SIGINT)
    assert result.outcome == Outcome.INTERRUPTED and 137 in ends(events)
    assert not guarded
