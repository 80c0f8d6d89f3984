"""Running a spec: the use case under ``tfcluster up``, ``up --detach`` and ``tfcluster compare``.

The CLI parses argv and calls in here; ``compare`` runs each configuration through
``execute`` and the detached supervisor (``detach.supervise``) through ``up``, so a run is
started, supervised, interrupted and torn down the same way whoever asked for it. Nothing here
parses argv, and nothing in ``launcher/`` imports the CLI.

``up`` and ``execute`` return a ``RunResult`` (launcher/app/results.py): the run's outcome, id,
record and reason; the CLI shows what is left to show and turns the outcome into the exit code
(launcher/errors.py's ``exit_code_for``).
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Callable, Optional

from launcher.app.results import DryRun, RunResult
from launcher.app.sinks import RunConsole
from launcher.errors import LaunchError
from launcher.plan.gputext import asked as gpus_asked, show_gpus
from launcher.plan.build import Plan, build_plan
from launcher.plan.elastic import fitting_now
from launcher.plan.kerasplan import keras_line
from launcher.plan.startsmall import PreflightPlans, preflight_plans
from launcher.record.layout import SUPERVISOR_LOG, name_dir, runs_dir
from launcher.record.states import Outcome
from launcher.loader.load import LoadedSpec, load_spec

if TYPE_CHECKING:  # pragma: no cover
    from launcher.loader.load import Spec

def hangup_reason(why: str) -> str:
    """Why a foreground run stopped when its terminal went away (``why``: SIGHUP, or "stdout:
    hung up" when writing to it failed): the outcome's reason, which `status` shows."""
    return f"the terminal of `tfcluster up` went away ({why}); every task was stopped as on Ctrl-C"


def plan_for(spec: "Spec", gpus: bool = True) -> Plan:
    """The plan from the spec alone (``tfcluster validate``/``plan``, ``up --dry-run``): the
    backend's static placement, placeholders when it knows its nodes only after allocating.
    ``gpus=False``: without the hosts' GPUs (no GPU refusals, each task's request unmade): for the commands
    that look at a run rather than start one (status, down, logs...), which must work when a
    GPU is gone."""
    from dataclasses import replace

    from launcher.backends import backend_class

    from launcher.errors import SpecError

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


def plan_with_room(loaded: LoadedSpec, console: RunConsole, gpus: bool = True,
                   clock: Optional[Callable[[], float]] = None,
                   pause: Optional[Callable[[float], None]] = None) -> tuple[LoadedSpec, Plan]:
    """``up``'s plan where hosts come from discovery.command and a worker group with a min: the
    hosts it lists now may have no room for even ``min`` workers (hosts[].slots). Then, as for
    listed hosts that do not answer, the run waits up to elastic.host_wait, running the command
    again every discovery.every s, and ends in one line if the room never comes."""
    import time

    from launcher.errors import SpecError
    from launcher.loader.discovery import with_discovered
    from launcher.plan.elastic import options

    clock, pause = clock or time.monotonic, pause or time.sleep
    spec = loaded.spec
    try:
        return loaded, plan_for(spec, gpus=gpus)
    except SpecError as exc:
        if spec.discovery is None or not starts_small_here(spec) or not any(NO_ROOM in line for line in exc.lines):
            raise
        problem = exc.lines[0]
    opts = options(spec)
    deadline = clock() + opts.host_wait
    console.info(f"discovery.command lists room for fewer than tasks.worker.min={spec.tasks.worker.min} workers; "
                 f"waiting up to elastic.host_wait={opts.host_wait:g} s for hosts, running it every "
                 f"{spec.discovery.every:g} s")
    while True:
        left = deadline - clock()
        if left <= 0:
            raise LaunchError(f"no room for tasks.worker.min={spec.tasks.worker.min} workers on the hosts "
                              f"discovery.command listed within elastic.host_wait={opts.host_wait:g} s ({problem}); "
                              "start more hosts, raise hosts[].slots, or lower tasks.worker.min")
        pause(min(spec.discovery.every, left))
        again = with_discovered(load_spec(loaded.path))
        try:
            return again, plan_for(again.spec, gpus=gpus)
        except SpecError as exc:
            if not any(NO_ROOM in line for line in exc.lines):
                raise
            problem = exc.lines[0]


NO_ROOM = "hosts[].slots: the tasks do not fit"


def starts_small_here(spec: "Spec") -> bool:
    """The spec's worker group starts with the hosts there (launcher/plan/elastic.py's
    starts_small): it has a min, and its backend moves tasks with elastic on."""
    from launcher.backends import backend_class, placed_hosts
    from launcher.plan.elastic import elastic_enabled, starts_small

    elastic = backend_class(spec.backend).capabilities.elastic and elastic_enabled(spec, placed_hosts(spec))
    return starts_small(spec, elastic)


def short_line(spec: "Spec", plan: Plan, why: str) -> str:
    """``worker: 1 of 2 (h2 not answering)`` where the group starts smaller than its count, else ""."""
    from launcher.plan.elastic import group_size, size_phrase

    group = group_size(spec, plan, why)
    return size_phrase(group["size"], group["of"], group.get("why", "")) if group["size"] < group["of"] else ""


def start_note(spec: "Spec", plan: Plan) -> str:
    """What ``plan`` says of a worker group that starts with the hosts there: ``worker: starts
    with 1..2 of 2 workers where hosts are short (tasks.worker.min=1); grows as hosts appear``."""
    if not starts_small_here(spec):
        return ""
    group = spec.tasks.worker
    size = sum(1 for t in plan.tasks if t.type == "worker")
    if size < group.count:
        return (f"worker: starts with {size} of {group.count} workers (no room for more on the hosts known now); "
                f"grows as hosts appear (tasks.worker.min={group.min})")
    return (f"worker: starts with {group.min}..{group.count} of {group.count} workers where hosts are short "
            f"(tasks.worker.min={group.min}: hosts that do not answer at `up` are waited for, not errors); "
            "grows as hosts appear")


def standby_line(spec, plan: Plan) -> str:
    from launcher.supervise.standby import plan_line

    return plan_line(spec, plan.tasks)


def hang_line(spec, plan: Plan) -> str:
    """What the hang watchdog does for this plan (launcher/supervise/hangwatch.py's plan_line)."""
    from launcher.backends import backend_class
    from launcher.supervise.hangwatch import plan_line

    return plan_line(spec.watchdog, [t.command for t in plan.tasks], backend_class(spec.backend).capabilities.stacks)


def spares_of(spec) -> list[str]:
    """The spare hosts ``plan`` and ``up --dry-run`` show: on backends that move tasks only."""
    from launcher.backends import backend_class, placed_hosts
    from launcher.plan.elastic import spare_hosts

    placed = placed_hosts(spec) if backend_class(spec.backend).capabilities.elastic else None
    return spare_hosts(spec, placed) if placed is not None else []


def refuse_if_running(loaded: LoadedSpec, shown: str) -> None:
    """LaunchError if a run of this spec is still running (``up`` without ``--force``);
    ``shown`` is the spec path as the user typed it, for the commands the message suggests."""
    from launcher.record.status import running_runs

    spec = loaded.spec
    busy = running_runs(name_dir(loaded))
    if busy:
        run = busy[-1]
        raise LaunchError(f"run {run.run_id} of {spec.name} is still running (supervisor pid {run.supervisor_pid}); "
                          f"see `tfcluster status {shown}`, stop it with `tfcluster down {shown}`, "
                          "or start another anyway with --force")


def up(loaded: LoadedSpec, plan: Plan, console: RunConsole, *, shown: str, dry_run: bool = False,
       force: bool = False, run_id: Optional[str] = None, handover=None, quiet: bool = False,
       verbose: bool = False, panel: bool = False) -> RunResult:
    """``tfcluster up`` in this process (in the foreground, or as the detached supervisor with
    its ``handover``): refuse while a run of the spec is still running unless ``force``, then
    ``execute``."""
    if not force and not dry_run:
        refuse_if_running(loaded, shown)
    return execute(loaded, plan, console, dry_run=dry_run, run_id=run_id, handover=handover,
                   quiet=quiet, verbose=verbose, panel=panel)


def execute(loaded: LoadedSpec, plan: Plan, console: RunConsole, *, dry_run: bool = False,
            run_id: Optional[str] = None, handover=None, quiet: bool = False, verbose: bool = False,
            panel: bool = False, on_record: Optional[Callable[[object], None]] = None) -> RunResult:
    """What ``tfcluster up`` does with a plan: preflight on its backend, the run record, the
    supervisor until success, failure or interruption (``tfcluster compare`` runs each
    configuration through here too; ``on_record`` gets the run record once it exists). A dry
    run stops after the preflight: its result holds the plan for the CLI to show."""
    from launcher.backends import backend_class
    from launcher.record.writer import RunRecord
    from launcher.supervise.loop import Supervisor
    from launcher.supervise.membership import HostsGiven

    spec = loaded.spec
    record = RunRecord(runs_dir(loaded), plan, run_id=run_id, on_problem=console.error, share=spec.share)
    if handover is not None:
        record.launcher_info["detached"] = True
    backend = backend_class(spec.backend).from_spec(loaded, record, console)
    try:
        found = preflight_plans(spec, plan, backend.hosts.probe(plan))  # the plans the hosts found give
        if dry_run:
            return _dry_run(spec, plan, backend, found)
        plan = _start(spec, plan, record, backend, found)
    except BaseException:
        backend.close()  # connections and clients opened for the preflight, the allocation
        record.close()
        raise
    if on_record is not None:
        on_record(record)
    console.quiet_tasks = quiet
    console.verbose = verbose
    static = [h.name for h in load_spec(loaded.path).spec.hosts] if spec.discovery is not None else None
    given = HostsGiven(spec=spec, static_hosts=static, discovery_cwd=loaded.base_dir, absent=found.absent,
                       short_why=found.short_why)
    supervisor = Supervisor(plan, backend, record, console, spec.restart, spec.watchdog, given=given)
    if handover is not None:
        handover.open_log(record.dir / SUPERVISOR_LOG)
        supervisor.on_ready = lambda: handover.hand_over(record.run_id, backend.detach_note)
    return _supervise(supervisor, spec, plan, record, console, foreground=handover is None, panel=panel)


def _dry_run(spec: "Spec", plan: Plan, backend, found: PreflightPlans) -> RunResult:
    """``up --dry-run`` once the preflight passed: the plan it would start (the hosts the
    preflight found there, for a group that starts small; placed by their GPUs), nothing started."""
    now = found.start or plan
    small = short_line(spec, now, found.short_why)
    note = (f"dry run: preflight passed; would start {len(now.tasks)} tasks on backend {plan.backend}"
            + (f" ({small})" if small else ""))
    backend.close()
    return RunResult(Outcome.SUCCEEDED, dry_run=DryRun(plan=now, note=note, spares=tuple(spares_of(spec)),
                                                       standby=standby_line(spec, plan),
                                                       notes=(start_note(spec, now), hang_line(spec, now),
                                                              keras_line(spec))))


def _start(spec: "Spec", plan: Plan, record, backend, found: PreflightPlans) -> Plan:
    """The run record written, and the plan the tasks start with: the hosts a workload manager
    gives once the job is allocated; the plan the preflight's findings give where they give one
    (a worker group with a min starts with the hosts there; placed by the hosts' GPUs)."""
    try:
        record.create()
    except OSError as exc:
        raise LaunchError(f"run_dir: cannot write the run record in {record.dir} ({exc.strerror}); "
                          "fix run_dir in the spec or the directory's permissions") from None
    plan = found.start or build_plan(spec, stoppable(lambda: backend.hosts.allocate(spec)))
    record.set_plan(plan)
    return plan


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
