"""What a run's events say to a person: the one renderer of the record's events as lines.

The supervisor writes facts (launcher/record/events.py); the console is a listener on the record
(``Console.listen``: the live run, and a detached run's supervisor.log through its console) and
``attach`` a listener on the record it follows (launcher/record/feed.py), and both say each new
event through ``said``: a message (``tfcluster: ...``), an error, a block of lines, or the final
report (launcher/ui/report.py, drawn from the run's view when its outcome comes). An event that
says nothing to a person (a task's start, a ready port, a backend's own) gives no line. Pure:
an event and the view in, lines out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.bounded import listing
from launcher.notices import HostNote, fold_hosts
from launcher.plan.elastic import describe_change, size_phrase
from launcher.plan.hostloss import lost_phrase
from launcher.record import events as ev
from launcher.record.eventbase import RecordEvent
from launcher.record.states import Outcome
from launcher.record.view import RunModel
from launcher.system.procinfo import describe_exit
from launcher.ui.failurelines import also_failed_line, consequence_lines, failed_line, failure_block
from launcher.ui.report import ending_line, final_report

INFO, ERROR, BLOCK, REPORT = "info", "error", "block", "report"


@dataclass(frozen=True)
class Said:
    """One thing to say: ``how`` (INFO, ERROR: one message; BLOCK: lines as they are; REPORT: the
    final report, the last thing shown) and its ``lines``."""

    how: str
    lines: tuple[str, ...]


def _info(text: str) -> list[Said]:
    return [Said(INFO, (text,))]


def _error(text: str) -> list[Said]:
    return [Said(ERROR, (text,))]


def said(event: RecordEvent, view: RunModel, verbose: bool = False, now: Optional[float] = None) -> list[Said]:
    """What ``event`` says, in order ([] for an event that says nothing to a person). ``view``: the
    run with the event applied (the final report's tables); ``verbose``: TensorFlow's known noise
    in a failure's last lines too."""
    say = _SAYERS.get(type(event))
    return say(event, view, verbose, now) if say is not None else []


def _stop_requested(e: ev.StopRequested, *_) -> list[Said]:
    return _info("stopping every task (Ctrl-C again to kill at once)")


def _tasks_stopping(e: ev.TasksStopping, *_) -> list[Said]:
    keys = ", ".join(e.tasks)
    if e.save_look is not None:
        return _info(f"stopping {keys} (SIGTERM; a save they start within {e.save_look:.1f} s is awaited, "
                     f"up to watchdog.stop_grace={e.grace:g} s; else SIGKILL)")
    how = "SIGKILL" if e.grace <= 0 else f"SIGTERM, SIGKILL after {e.grace:g} s"
    return _info(f"stopping {keys} ({how})")


def _stop_unconfirmed(e: ev.StopUnconfirmed, *_) -> list[Said]:
    return _error(f"could not confirm that {', '.join(e.tasks)} stopped; check the host")


def _results_not_collected(e: ev.ResultsNotCollected, *_) -> list[Said]:
    return [s for line in e.problems for s in _error(line)]


def _gave_up(e: ev.GaveUp, *_) -> list[Said]:
    if e.final:  # (the failure's own line said it all)
        return []
    return _error(f"{e.task}: {e.reason}" if e.task else e.reason)


def _group_restart(e: ev.GroupRestart, *_) -> list[Said]:
    if e.preemption is not None:
        note = (f"({e.after} exited {e.code} after saving for a preemption: restart.preemption_exit_codes; "
                "restart.max_restarts not spent)")
    elif e.restart is not None:
        note = f"(restart {e.restart} of {e.max_restarts})"
    else:
        return []
    return _info(f"restarting the whole group {note}"
                 + (" on fresh ports" if e.ports is not None else "") + (f" in {e.delay:.1f} s" if e.delay else ""))


def _sidecar_failed(e: ev.SidecarFailed, *_) -> list[Said]:
    return _error(f"{e.task} (sidecar) failed: {describe_exit(e.code)}; training goes on")


def _group_stalled(e: ev.GroupStalled, *_) -> list[Said]:
    return _info(f"the group stopped progressing ({', '.join(e.tasks)}: none for {e.idle:.0f} s, limit {e.limit:g} s: "
                 f"{e.what}); taking every task's stacks to find which task stopped it")


def _process_stopped(e: ev.ProcessStopped, *_) -> list[Said]:
    then = "killing it: it is restarted alone" if e.killed else "its group fails with it"
    return _info(f"{e.task}'s process has been stopped by a signal (SIGSTOP?) for {e.seconds:.0f} s, past "
                 f"watchdog.stopped_timeout ({e.limit:g} s): {then}")


def _straggler(e: ev.Straggler, *_) -> list[Said]:
    return _info(f"{e.task} {e.why}" if e.why else f"{e.task} caught up with the others")


def _task_restart(e: ev.TaskRestart, *_) -> list[Said]:
    if e.max_restarts is None:
        return []
    if e.sidecar:
        return _info(f"{e.task} (sidecar) exited ({describe_exit(e.code)}); restarting it alone "
                     f"({e.restart} of {e.max_restarts}), training goes on")
    return _info(f"{e.task} exited ({describe_exit(e.code)}); restarting it alone "
                 f"({e.restart} of {e.max_restarts}), training continues")


def _restart_failed(e: ev.RestartFailed, *_) -> list[Said]:
    return _error(f"{e.task}: restarting it failed: {e.problem}")


def _failure(e: ev.Failure, view: RunModel, verbose: bool, _now) -> list[Said]:
    if e.host_loss:  # (the membership's line says it)
        return []
    most = e.max_restarts if e.max_restarts is not None else max(0, (view.max_attempts or 1) - 1)
    out = _error(failed_line(e.task, e.reason, e.attempt or 0, most))
    out += [s for line in consequence_lines(e.task, list(e.consequences.items())) for s in _info(line)]
    block = failure_block(e, view.run_dir, verbose)
    if block:
        out.append(Said(BLOCK, tuple(block)))
    if e.others:
        out += _info(also_failed_line(e.others))
    return out


def _output_fault(e: ev.OutputFault, *_) -> list[Said]:
    if not e.first:  # (said once a task: the record keeps the next few)
        return []
    return _error(f"{e.task}: a line of its {e.what} could not be handled ({e.error}); it is still read, "
                  "and the run goes on")


def _gpu_watch_ended(e: ev.GpuWatchEnded, *_) -> list[Said]:
    return _info(f"nvidia-smi did not answer {e.misses} times in a row (timeout {e.timeout:g} s); "
                 "no more GPU figures for this run")


def _standby_failed(e: ev.StandbyFailed, *_) -> list[Said]:
    if e.stage == ev.StandbyFailed.START:
        return _info(f"{e.task}: no warm standby ({e.why}); a restart starts it cold")
    if e.stage == ev.StandbyFailed.ANSWER:
        return _info(f"{e.task}: its warm standby did not answer the promotion within {e.within or 0:g} s "
                     f"({e.why}); starting it cold")
    return _info(f"{e.task}: its warm standby could not be promoted ({e.why}); starting it cold")


def _standby_no_room(e: ev.StandbyNoRoom, *_) -> list[Said]:
    notes = []
    for host, free in e.free.items():
        n = e.processes.get(host, 0)
        notes.append(HostNote(host, f"warm standby: none on {host}: {free / 2**30:.1f} GB available, under "
                                    f"the {(n * e.each + e.reserve) / 2**30:.1f} GB its "
                                    f"{n} standby process(es) and a reserve need; its restarts are cold",
                              "warm standby: none on {hosts}: less memory available than their standby processes "
                              f"({e.each / 2**30:.1f} GB each) and a reserve need; their restarts are cold"))
    return [s for line in fold_hosts(notes) for s in _info(line)]


def _small_start(e: ev.SmallStart, *_) -> list[Said]:
    return _info(f"{size_phrase(e.size, e.of, e.why)}; the group grows as hosts answer for elastic.settle={e.settle:g} s"
                 + (" or discovery.command finds them" if e.discovery else ""))


def _reconciled(e: ev.Reconciled, *_) -> list[Said]:
    if not e.line:
        return []
    return _info(e.line) if e.act == ev.Reconciled.KEEP else _error(e.line)


def _replan(e: ev.Replan, *_) -> list[Said]:
    workers = sum(1 for key in e.tasks or () if key.partition(":")[0] == "worker")
    change = describe_change(e.lost, e.how, e.back, e.added, {k: m.get("to", "") for k, m in e.moved.items()},
                             e.dropped, workers, e.suspect)
    return _info(f"{change}; {e.then} (plan {e.plan}; a membership change does not count against "
                 "restart.max_restarts)")


def _host_lost(e: ev.HostLost, *_) -> list[Said]:
    if not e.spare:  # (a plan's host: the replan's or the wait's line says it)
        return []
    return _info(f"{lost_phrase(e.host, e.how, e.suspect)}; no task moves there until then")


def _them(hosts) -> str:
    return "it" if len(hosts) == 1 else "them"


def _hosts_awaited(e: ev.HostsAwaited, *_) -> list[Said]:
    return _info(f"{e.said}; no spare host for {', '.join(e.tasks)}: waiting up to elastic.host_wait={e.wait:g} s for "
                 f"{', '.join(e.hosts)} to settle, then restarting the group on {_them(e.hosts)} (a host loss does not "
                 "count against restart.max_restarts)")


def _hosts_answer(e: ev.HostsAnswer, *_) -> list[Said]:
    head = (f"{', '.join(e.hosts)} answer{'s' if len(e.hosts) == 1 else ''} again "
            f"({e.settle:g} s without a break, elastic.settle)")
    if e.restart:
        return _info(f"{head}; restarting the group on {_them(e.hosts)} from the last backup")
    return _info(f"{head}: usable again")


def _discovery(e: ev.DiscoveryAnswer, *_) -> list[Said]:
    if not e.ok:
        return _error(f"discovery.command: {e.problem}; keeping the last good host list "
                      f"({listing(e.kept or [], 'hosts')}); the run goes on")
    added, gone = e.added or [], e.gone or []
    bits = ([f"{listing(added, 'hosts')} found (usable once {'they answer' if len(added) > 1 else 'it answers'} "
             f"for elastic.settle={e.settle or 0:g} s)"] if added else [])
    bits += [f"{listing(gone, 'hosts')} gone from the list"] if gone else []
    return _info(f"discovery: {'; '.join(bits)}") if bits else []


def _regroup(e: ev.Regroup, *_) -> list[Said]:
    if e.moving:
        return _info(f"moving {', '.join(e.moving)}: stopping the group gracefully (SIGTERM: the workers save the step "
                     "they agree on)")
    return _info("growing the group: stopping it gracefully (SIGTERM: the workers save the step they agree on) to "
                 "restart it bigger")


def _zygote_ended(e: ev.ZygoteEnded, *_) -> list[Said]:
    return _info(e.said) if e.said else []


def _zygote_warm(e: ev.ZygoteWarm, *_) -> list[Said]:
    return _info(e.said) if e.said else []


def _outcome(e: ev.RunOutcome, view: RunModel, _verbose, now: Optional[float]) -> list[Said]:
    if e.outcome == Outcome.STOPPED:  # (``tfcluster down`` of a run whose supervisor is gone: no report)
        return []
    report = final_report(view, e, time.time() if now is None else now)
    return [Said(REPORT, tuple(report))] + _info(ending_line(view, e))


_SAYERS: dict[type, Callable[..., list[Said]]] = {
    ev.StopRequested: _stop_requested, ev.TasksStopping: _tasks_stopping, ev.StopUnconfirmed: _stop_unconfirmed,
    ev.ResultsNotCollected: _results_not_collected, ev.GaveUp: _gave_up, ev.GroupRestart: _group_restart,
    ev.SidecarFailed: _sidecar_failed, ev.GroupStalled: _group_stalled, ev.ProcessStopped: _process_stopped, ev.Straggler: _straggler,
    ev.TaskRestart: _task_restart, ev.RestartFailed: _restart_failed, ev.Failure: _failure,
    ev.OutputFault: _output_fault, ev.GpuWatchEnded: _gpu_watch_ended, ev.StandbyFailed: _standby_failed,
    ev.StandbyNoRoom: _standby_no_room, ev.SmallStart: _small_start, ev.Reconciled: _reconciled,
    ev.Replan: _replan, ev.HostLost: _host_lost, ev.HostsAwaited: _hosts_awaited, ev.HostsAnswer: _hosts_answer,
    ev.DiscoveryAnswer: _discovery, ev.Regroup: _regroup, ev.ZygoteEnded: _zygote_ended, ev.ZygoteWarm: _zygote_warm,
    ev.RunOutcome: _outcome,
}
