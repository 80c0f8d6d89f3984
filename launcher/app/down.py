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
from launcher.errors import LaunchError, NoRun
from launcher.plan.build import Plan
from launcher.system.procinfo import file_id, is_same, not_own, wait_gone
from launcher.record.events import Event, RunOutcome
from launcher.record.layout import EVENTS_FILE, LATEST, LAUNCHER_FILE, name_dir
from launcher.record.reader import named_run, read_launcher
from launcher.record.states import Outcome
from launcher.spec.model import LoadedSpec


def down(loaded: LoadedSpec, plan: Plan, console: Notices, run_id: Optional[str] = None,
         timeout: float = 60.0) -> DownResult:
    """Stop run ``run_id`` (default: the latest): its launcher asked first, then what it left
    behind by the record's ids; the result says whether anything was still running."""
    spec = loaded.spec
    run_dir, info, owner = recorded_run(loaded, run_id, "nothing to stop")
    pid, started = info.get("pid"), info.get("start_time")
    recorded = RecordedRun(run_dir, info, owner=owner)
    stopped_any = False
    supervised = pid == os.getpid()
    if pid is not None and pid != os.getpid() and is_same(pid, started):
        why = not_the_supervisor(run_dir, info, owner)
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


def recorded_run(loaded: LoadedSpec, run_id: Optional[str], nothing: str) -> tuple[Path, dict, int]:
    """The run dir ``--run`` names (or ``latest``: only a run of its own folder), its launcher.json
    and the uid that owns it (the file itself: ``procinfo.file_id``); NoRun saying ``nothing``
    where there is no record, LaunchError where whose it is cannot be told."""
    where = name_dir(loaded)
    run_dir = named_run(where, run_id)
    if run_dir is None or not (run_dir / LAUNCHER_FILE).is_file():
        raise NoRun(f"no run record at {where / (run_id or LATEST)}; {nothing} (check the spec path or --run)")
    info = read_launcher(run_dir, required=True) or {}
    found = file_id(run_dir / LAUNCHER_FILE)
    if found is None:
        raise LaunchError(f"run {run_dir.name}: {run_dir / LAUNCHER_FILE} has another name (a hard link) or was "
                          "replaced while read, so whose record it is cannot be told; nothing was signalled")
    return run_dir, info, found[2]


def not_the_supervisor(run_dir: Path, info: dict, owner: int) -> Optional[str]:
    """Why the live process launcher.json names cannot be proven to be this run's supervisor
    (None: proven). It must run on this host, have started when the record says, run as the
    user who owns the record (``owner``), run the command line the record says (records that
    keep it), and carry the run's mark: TFCLUSTER_SUPERVISOR in its environment (``up --detach``
    sets it) or, a launcher run in a terminal, this run's events.jsonl itself open, never a file
    a symlink there points to (procinfo.not_own)."""
    host = info.get("host")
    if host is not None and host != socket.gethostname():
        return f"it runs on {shown(host, 60)}, not here; run `tfcluster down` there"
    return not_own(info["pid"], info.get("start_time"), (envnames.SUPERVISOR, run_dir.name),
                   cmd=info.get("cmdline"), holds=run_dir / EVENTS_FILE, owner=owner)


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
