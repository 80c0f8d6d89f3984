"""``tfcluster down``: stop a run from its record, by pid and start time, never by name.

If the run's launcher is alive it gets SIGTERM and tears its tasks down itself (letting them
save on the way out); what it leaves behind the run's backend stops directly (its ``Hosts.down``).
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Optional

from launcher.backends import RecordedRun, backend_class
from launcher.bounded import shown
from launcher.contract import envnames
from launcher.app.results import DownResult
from launcher.notices import Notices
from launcher.errors import NoRun
from launcher.plan.build import Plan
from launcher.system.procinfo import is_same, not_own, wait_gone
from launcher.record.events import Event, RunOutcome
from launcher.record.layout import EVENTS_FILE, LATEST, LAUNCHER_FILE, runs_dir
from launcher.record.reader import latest_run, read_launcher
from launcher.record.states import Outcome
from launcher.spec.model import LoadedSpec


def down(loaded: LoadedSpec, plan: Plan, console: Notices, run_id: Optional[str] = None,
         timeout: float = 60.0) -> DownResult:
    """Stop run ``run_id`` (default: the latest): its launcher asked first, then what it left
    behind by the record's ids; the result says whether anything was still running."""
    spec = loaded.spec
    root = runs_dir(loaded)
    run_dir = (root / spec.name / run_id) if run_id else latest_run(root, spec.name)
    if run_dir is None or not (run_dir / LAUNCHER_FILE).is_file():
        where = root / spec.name / (run_id or LATEST)
        raise NoRun(f"no run record at {where}; nothing to stop (check the spec path or --run)")
    info = read_launcher(run_dir, required=True) or {}
    pid, started = info.get("pid"), info.get("start_time")
    recorded = RecordedRun(run_dir, info)
    stopped_any = False
    supervised = pid == os.getpid()
    if pid is not None and pid != os.getpid() and is_same(pid, started):
        why = not_the_supervisor(run_dir, info)
        if why is not None:  # a record is data, not orders: a pid it names is signalled only once proven
            recorded.refuse(console, f"not signalling process {pid}, which run {run_dir.name}'s launcher.json names: "
                                     f"{why}")
        else:
            supervised = True
            console.info(f"asking launcher {pid} of run {run_dir.name} to stop (SIGTERM)")
            os.kill(pid, signal.SIGTERM)
            stopped_any = True
            if not wait_gone(pid, started, timeout):
                console.error(f"launcher {pid} did not stop within {timeout:g} s; killing it (its tasks follow)")
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid, started, 5)
    # What the launcher left behind (or all of it, if the launcher was gone): the backend
    # finds it by the ids in the record.
    backend = backend_class(spec.backend).from_spec(loaded, None, console)
    try:
        stopped_any = backend.hosts.down(recorded, console) or stopped_any
    finally:
        backend.close()
    if not supervised:
        _record_stop(run_dir, console)
    return DownResult(run_dir.name, stopped_any, refused=tuple(recorded.refused))


def not_the_supervisor(run_dir: Path, info: dict) -> Optional[str]:
    """Why the live process launcher.json names cannot be proven to be this run's supervisor
    (None: proven). It must run on this host, have started when the record says, run the command
    line the record says (records that keep it), and carry the run's mark: TFCLUSTER_SUPERVISOR
    in its environment (``up --detach`` sets it) or, a launcher run in a terminal, this run's
    events.jsonl open (procinfo.not_own)."""
    host = info.get("host")
    if host is not None and host != socket.gethostname():
        return f"it runs on {shown(host, 60)}, not here; run `tfcluster down` there"
    return not_own(info["pid"], info.get("start_time"), (envnames.SUPERVISOR, run_dir.name),
                   cmd=info.get("cmdline"), holds=run_dir / EVENTS_FILE)


def _record_stop(run_dir, console: Notices) -> None:
    """A run whose supervisor died without an outcome gets one now, so ``status`` and ``runs``
    say it was stopped rather than "supervisor lost" forever."""
    from launcher.record.reader import RecordDamaged, read_events
    from launcher.record.run import fold_run
    from launcher.record.status import last_sign_of_life
    from launcher.record.writer import append_event

    try:
        events = read_events(run_dir, strict=True)
    except RecordDamaged as exc:
        console.error(exc.lines[0])
        return
    if any(e.kind == Event.OUTCOME for e in events):
        return
    run = fold_run(events)
    ended = last_sign_of_life(run_dir, run.last)  # the run's end, not this `down`'s (status, runs)
    try:
        append_event(run_dir, RunOutcome(outcome=Outcome.STOPPED, attempts=run.attempts,
                                         reason="the supervisor was lost; what was left was stopped by tfcluster down",
                                         ended=round(ended, 3) if ended is not None else None))
    except OSError as exc:
        console.error(f"cannot write {run_dir / EVENTS_FILE}: {exc.strerror}; the run stays 'supervisor lost'")
