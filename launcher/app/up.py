"""Running a spec: the use case under ``tfcluster up``, ``up --detach`` and ``tfcluster compare``,
as a list of stages (launcher/app/stages.py: load, discover, plan, open, probe, allocate, record,
supervise), each a function from a typed value to the next. What the caller runs chooses the
stages: ``prepare`` (load, discover, plan: what every ``up`` starts from), then ``run`` (open
to supervise) or ``dry_run`` (open, probe); ``tfcluster compare`` runs its derived spec from the
plan (``run_spec``); the detached supervisor (launcher/app/detach.py) ``prepare``s and ``run``s
with its hand-over. Between ``prepare`` and ``run`` the CLI hands the command to the machine
where the run lives, where that is another (ssh.supervisor). Nothing here parses argv, and
nothing in ``launcher/`` imports the CLI.

``run`` and ``dry_run`` return a ``RunResult`` (launcher/app/results.py): the run's outcome, id,
record and reason; the CLI shows what is left to show and turns the outcome into the exit code
(launcher/errors.py's ``exit_code_for``).
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from launcher.app import stages
from launcher.app.plannotes import hang_line, short_line, spares_of, standby_line, start_note
from launcher.app.probing import close, open_run, probe
from launcher.app.results import DryRun, RunResult
from launcher.app.sinks import RunConsole
from launcher.app.stages import Allocated, Planned, Probed, Recorded, Waits
from launcher.app.stages import plan_for  # noqa: F401 - the plan from the spec alone: ``from launcher.app.up import plan_for``
from launcher.errors import LaunchError
from launcher.plan.build import Plan, build_plan
from launcher.plan.gputext import asked as gpus_asked, show_gpus
from launcher.plan.kerasplan import keras_line
from launcher.record.layout import SUPERVISOR_LOG, name_dir
from launcher.record.states import Outcome
from launcher.notices import Notices

if TYPE_CHECKING:  # pragma: no cover
    from launcher.loader.load import Spec


@dataclass(frozen=True)
class Show:
    """How the run is shown while it runs: ``quiet`` (the tasks' lines only in their logs),
    ``verbose`` (also the known harmless TensorFlow start-up lines), ``panel`` (the live panel,
    on a terminal)."""

    quiet: bool = False
    verbose: bool = False
    panel: bool = False


def hangup_reason(why: str) -> str:
    """Why a foreground run stopped when its terminal went away (``why``: SIGHUP, or "stdout:
    hung up" when writing to it failed): the outcome's reason, which `status` shows."""
    return f"the terminal of `tfcluster up` went away ({why}); every task was stopped as on Ctrl-C"


# ------------------------------------------------------------------ the pipelines


def prepare(path: str, say: Notices, *, warn: bool = True, waits: Waits = Waits()) -> Planned:
    """load -> discover -> plan: the spec at ``path`` read once (its warnings said, ``warn``), the
    hosts discovery.command prints now, the plan (waiting for room where discovered hosts have
    none yet for tasks.worker.min)."""
    read = stages.load(path)
    if warn:
        stages.warnings(read, say)
    return stages.plan_with_room(stages.discover(read), say, waits)


def dry_run(planned: Planned, console: RunConsole) -> RunResult:
    """``up --dry-run``: open -> probe, nothing started; the plan it would start (the hosts the
    preflight found there, for a group that starts small; placed by their GPUs) for the CLI."""
    opened = open_run(planned, console)
    try:
        probed = probe(opened, console)
    finally:
        close(opened)
    spec, plan = planned.loaded.spec, planned.plan
    now = probed.start.plan or plan
    small = short_line(spec, now, probed.start.short_why)
    note = (f"dry run: preflight passed; would start {len(now.tasks)} tasks on backend {plan.backend}"
            + (f" ({small})" if small else ""))
    return RunResult(Outcome.SUCCEEDED, dry_run=DryRun(plan=now, note=note, spares=tuple(spares_of(spec)),
                                                       standby=standby_line(spec, plan),
                                                       notes=(start_note(spec, now), hang_line(spec, now),
                                                              keras_line(spec))))


def run(planned: Planned, console: RunConsole, show: Show = Show(), *, run_id: Optional[str] = None,
        handover=None, on_record: Optional[Callable[[object], None]] = None) -> RunResult:
    """open -> probe -> allocate -> record -> supervise: the run to its end (``handover``: the
    detached supervisor's, launcher/app/detach.py; ``on_record`` gets the run record once it
    exists: ``tfcluster compare``)."""
    opened = open_run(planned, console, run_id, detached=handover is not None)
    try:
        allocated = allocate(probe(opened, console))
    except BaseException:
        close(opened)  # connections and clients opened for the preflight, the allocation, the record
        raise
    return supervise(record(allocated, on_record), console, show, handover)


def run_spec(loaded, console: RunConsole, on_record: Optional[Callable[[object], None]] = None) -> RunResult:
    """A spec as it is (``tfcluster compare``'s derived specs: no discovery, no wait): plan ->
    ``run``."""
    return run(stages.plan(stages.as_found(loaded)), console, on_record=on_record)


def refuse_if_running(planned: Planned, shown: str) -> None:
    """LaunchError if a run of this spec is still running (``up`` without ``--force``);
    ``shown`` is the spec path as the user typed it, for the commands the message suggests."""
    from launcher.record.status import running_runs

    spec = planned.loaded.spec
    busy = running_runs(name_dir(planned.loaded))
    if busy:
        run = busy[-1]
        raise LaunchError(f"run {run.run_id} of {spec.name} is still running (supervisor pid {run.supervisor_pid}); "
                          f"see `tfcluster status {shown}`, stop it with `tfcluster down {shown}`, "
                          "or start another anyway with --force")


# ------------------------------------------------------------------ the stages after the probe


def allocate(probed: Probed) -> Allocated:
    """The run record written, and the plan the tasks start with: the hosts a workload manager
    gives once the job is allocated; the plan the preflight's findings give where they give one
    (a worker group with a min starts with the hosts there; placed by the hosts' GPUs)."""
    opened = probed.opened
    record_ = opened.record
    try:
        record_.create()
    except OSError as exc:
        raise LaunchError(f"run_dir: cannot write the run record in {record_.dir} ({exc.strerror}); "
                          "fix run_dir in the spec or the directory's permissions") from None
    spec = opened.planned.loaded.spec
    plan = probed.start.plan or build_plan(spec, stoppable(lambda: opened.backend.hosts.allocate(spec)))
    return Allocated(probed, plan)


def record(allocated: Allocated, on_record: Optional[Callable[[object], None]] = None) -> Recorded:
    """The plan the tasks start with, in the record (``on_record`` told of the record)."""
    rec = allocated.probed.opened.record
    rec.set_plan(allocated.plan)
    if on_record is not None:
        on_record(rec)
    return Recorded(allocated)


def supervise(recorded: Recorded, console: RunConsole, show: Show = Show(), handover=None) -> RunResult:
    """The supervisor over the recorded plan until success, failure or interruption, under the
    signals that stop it; the detached supervisor hands over (``handover``) once every task is
    ready."""
    from launcher.supervise.loop import Supervisor
    from launcher.supervise.membership import HostsGiven

    probed = recorded.allocated.probed
    opened, planned = probed.opened, probed.opened.planned
    spec, plan, rec, backend = planned.loaded.spec, recorded.plan, opened.record, opened.backend
    console.quiet_tasks = show.quiet
    console.verbose = show.verbose
    given = HostsGiven(spec=spec, static_hosts=planned.discovered.static_hosts, discovery_cwd=planned.loaded.base_dir,
                       absent=tuple(probed.start.absent), short_why=probed.start.short_why)
    supervisor = Supervisor(plan, backend, rec, spec.restart, spec.watchdog, given=given)
    console.listen(rec, supervisor.view)  # the console says the record's events and task lines as written
    if handover is not None:
        handover.open_log(rec.dir / SUPERVISOR_LOG)
        supervisor.on_ready = lambda: handover.hand_over(rec.run_id, backend.detach_note)
    return _supervise(supervisor, spec, plan, rec, console, foreground=handover is None, panel=show.panel)


def _supervise(supervisor, spec: "Spec", plan: Plan, record, console: RunConsole, *, foreground: bool,
               panel: bool) -> RunResult:
    """The supervisor run to its end under the signals that stop it (Ctrl-C, SIGTERM, and in the
    foreground a closed terminal), the run's first lines said; how it ended, from its record.
    REQUEST_SIGNAL asks it for every live task's stacks (``tfcluster stacks``)."""
    from launcher.supervise.hangwatch import REQUEST_SIGNAL

    previous = {}

    def on_signal(signum: int, _frame) -> None:
        if signum == REQUEST_SIGNAL:
            supervisor.stacks_wanted.set()  # `tfcluster stacks`
        elif signum == signal.SIGHUP:
            supervisor.stop(hangup_reason("SIGHUP"))
        else:
            supervisor.interrupt()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, REQUEST_SIGNAL) + ((signal.SIGHUP,) if foreground else ()):
            if sig == signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # `nohup tfcluster up`: asked to outlive the terminal
            previous[sig] = signal.signal(sig, on_signal)
    if foreground:
        # The terminal closed (SIGHUP may come, or not: a shell that does not pass it on),
        # or a closed pipe: stop as on Ctrl-C, the console from then on silent. Called with
        # the console's lock held: only says stop.
        console.follow(lambda why: supervisor.stop(hangup_reason(why)))
    console.info(
        f"run {record.run_id}: {len(plan.tasks)} tasks ({', '.join(plan.keys)}) on {plan.backend}; "
        f"logs in {record.logs_dir}"
    )
    # Said once: where the tasks' GPUs are, or that a machine with nvidia-smi found none (auto: CPU).
    cpu_said = "no GPU found (" in plan.gpus and "nvidia-smi not found" not in plan.gpus
    if plan.gpus and (show_gpus(plan) or gpus_asked(spec) or cpu_said):
        console.info(plan.gpus)
    if panel:
        console.start_panel(supervisor.view)  # on a terminal only
    try:
        outcome = supervisor.run()
    finally:
        console.unfollow()
        console.end_panel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        record.close()
    return run_result(outcome, supervisor.view.run, record)


def run_result(outcome: Outcome, run, record) -> RunResult:
    """The result of a supervised run: how it ended (``Supervisor.run``'s outcome) and why, from
    its one run fold (record/run.py's RunFacts, as the supervisor's view folded the events it
    wrote). An outcome event that never reached the view (its listener failed) is said so."""
    reason = run.reason if run.outcome else "the run's outcome was not recorded"
    return RunResult(outcome, record.run_id, record.dir, reason)


def stoppable(fn):
    """Run ``fn`` with SIGTERM and SIGHUP raising KeyboardInterrupt like Ctrl-C, so `tfcluster
    down` or a closed terminal while it blocks (a queued allocation) still runs the cleanup."""
    if threading.current_thread() is not threading.main_thread():
        return fn()
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) is not signal.SIG_IGN}  # a detached supervisor ignores SIGHUP
    try:
        return fn()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
