"""The supervisor's restart and watchdog logic against a fake backend whose tasks follow a script
(like torchelastic's TestAgent): which attempt of which task exits with which code after how many
polls, when its port opens, what it prints. No TensorFlow, no processes, no wall-clock waits: the
supervisor's clock is a counter that advances one second per reading (the backend and the
clock: tests/support/fakes.py).
"""

from __future__ import annotations

import json
import re
import signal
import threading
from typing import Optional

import pytest

from launcher.app.up import plan_for
from launcher.backends.base import Backend
import launcher.record.events as ev
from launcher.plan.hostloss import HostLoss, LossKind
from launcher.plan.hostreport import Absent, AbsentKind
from tests.support.fakes import RUN_FOREVER, Counter, Script, ScriptedHosts, ScriptedTasks, scripted, supervise
from tests.support.records import kinds, of


def run(tmp_path, spec_yaml: str, backend: Backend, stop_after: Optional[int] = None):
    """(exit code, console text, events) of the supervisor on ``spec_yaml`` with ``backend``, its
    clock a counter; ``stop_after``: interrupt once this many tasks have been started."""
    result = supervise(tmp_path, spec_yaml, backend, clock=Counter(), stop_after=stop_after)
    return result.code, result.err + result.out, result.events


MWMS = """\
    name: s
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {{worker: 2}}
    restart: {{max_restarts: {restarts}, backoff: {backoff}}}
    watchdog: {{startup_timeout: {startup}, hang_timeout: {hang}, stop_grace: 0}}
"""


def mwms(restarts=2, backoff=0, startup=1000, hang=0):
    return MWMS.format(restarts=restarts, backoff=backoff, startup=startup, hang=hang)


PSS = """\
    name: s
    strategy: parameter_server
    entrypoint: python -m worker
    tasks: {chief: 1, worker: 2, ps: 1}
    restart: {max_restarts: 2}
    watchdog: {stop_grace: 0}
"""


# ---------------------------------------------------------------- group restart (MWMS)


def test_a_retryable_exit_restarts_the_whole_group_and_the_next_attempt_succeeds(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=0, polls=50)},
                                     default=Script(code=0, polls=4)))
    code, out, events = run(tmp_path, mwms(), backend)
    assert code == 0, out
    assert backend.tasks.starts("worker:0") == [0, 1] and backend.tasks.starts("worker:1") == [0, 1]
    assert "restarting the whole group (restart 1 of 2)" in out
    (failure,) = of(events, ev.Failure)
    assert (failure["task"], failure["code"]) == ("worker:1", 137)
    # worker:0 of the failed attempt was still running: stopped, not left behind.
    first = backend.tasks.handles[0]
    assert first.key == "worker:0" and signal.SIGKILL in first.signals and first.code == 128 + signal.SIGKILL
    assert of(events, ev.RunOutcome)[0]["outcome"] == "succeeded" and backend.tasks.closed and backend.hosts.closed


def test_a_permanent_exit_code_is_not_retried(tmp_path):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=1, polls=2)}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(), backend)
    assert code == 1
    assert len(backend.tasks.started) == 2  # one attempt only
    assert "not retried: an uncaught error in the task (exit 1) fails the same way every time" in out
    assert of(events, ev.GroupRestart) == []
    assert all(h.code is not None for h in backend.tasks.handles)  # nothing left running


def test_a_task_whose_port_is_taken_is_blamed_with_the_port_and_its_holder_and_not_retried(tmp_path):
    """Its wrapper's check found its port held right before the script (launcher/contract/portcheck.py):
    one line naming the port and its holder, exit 98. The failure names both (not "exit code 98"),
    and the run ends: the port stays taken until its holder lets go."""
    said = ("tfcluster: port 23457 of worker:1 is taken by pid 4242 of user ops (python serve.py); "
            "stop it, or change ports.base in the spec")
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=98, polls=2, say=((1, said),))}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(), backend)
    assert code == 1 and len(backend.tasks.started) == 2, out  # one attempt
    (failure,) = of(events, ev.Failure)
    assert (failure["task"], failure["code"]) == ("worker:1", 98)
    assert failure["reason"] == "port 23457 taken by pid 4242 of user ops (python serve.py)", failure
    (gave_up,) = of(events, ev.GaveUp)
    assert "a port another process holds (exit 98) stays taken until it lets go" in gave_up["reason"], gave_up
    assert of(events, ev.GroupRestart) == []


def test_the_restart_budget_ends_the_run(tmp_path):
    backend = scripted(ScriptedTasks({}, default=Script(code=143, polls=2)))
    code, out, events = run(tmp_path, mwms(restarts=2), backend)
    assert code == 1
    assert backend.tasks.starts("worker:0") == [0, 1, 2]
    assert "gave up after 3 attempt(s): restart.max_restarts is 2" in out
    assert [e["attempt"] for e in of(events, ev.GroupRestart)] == [1, 2]


def test_backoff_doubles_between_group_restarts(tmp_path):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=137, polls=1), ("worker:0", 1): Script(code=137, polls=1)},
                                     default=Script(code=0, polls=3)))
    code, out, events = run(tmp_path, mwms(restarts=3, backoff=0.01), backend)
    assert code == 0, out
    assert [e["delay"] for e in of(events, ev.GroupRestart)] == [0.01, 0.02]


class NotedTasks(ScriptedTasks):
    """Tasks whose state note (on ssh a command on the task's host, for a task that runs) waits
    at ``barrier`` for the other notes asked with it; ``met`` counts the notes that met there."""

    def __init__(self, barrier: threading.Barrier, **kw) -> None:
        super().__init__(**kw)
        self.barrier, self.met = barrier, []

    def start(self, request, on_line):
        handle = super().start(request, on_line)
        handle.state_note = lambda: self.note(handle)
        return handle

    def note(self, handle) -> str:
        if handle.code is not None:
            return ""  # (ssh: what its exit said, no command)
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            return "asked alone"
        self.met.append(threading.current_thread().name)
        return ""


def test_a_failure_asks_every_survivors_state_at_once(tmp_path):
    """The survivors' state notes, read to blame a death, are asked at once, not one host's
    round trip after another's: each note waits (20 s at most) for the other two at a barrier,
    which only notes asked at the same time can pass."""
    tasks = NotedTasks(threading.Barrier(3, timeout=20), scripts={("worker:1", 0): Script(code=137, polls=2)},
                       default=RUN_FOREVER)
    spec = mwms(restarts=0).replace("{worker: 2}", "{worker: 4}")
    code, out, events = run(tmp_path, spec, scripted(tasks))
    assert code != 0 and len(tasks.met) == 3, (tasks.met, out)
    assert of(events, ev.Failure)[0]["task"] == "worker:1" and "asked alone" not in out



# TensorFlow 2.21's words in a task whose pull from worker:0 was waiting when worker:0's process ended.
SOCKET_CLOSED = ("tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Socket closed",
                 "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while "
                 "calling /tensorflow.WorkerService/RecvBuf:")


@pytest.mark.parametrize("peer_polls,blamed", [
    (3, "its collective lost worker:0, which had ended (exit 0) before this task did"),  # (its exit next)
    (None, "exit code 1"),  # (worker:0 still running after the settle: no claim that it ended)
])
def test_a_failure_naming_a_peer_that_just_ended_waits_a_moment_for_that_peers_exit(tmp_path, peer_polls, blamed):
    """worker:1 fails within milliseconds of worker:0's end (its pull was already waiting), and
    worker:0's exit may reach the supervisor a poll later: the blame waits up to PEER_EXIT_SETTLE
    for the named peer's exit, so it says which ended first, not a bare exit code."""
    said = tuple((1, line) for line in SOCKET_CLOSED)
    tasks = ScriptedTasks({("worker:1", 0): Script(code=1, polls=2, say=said),
                           ("worker:0", 0): Script(code=0 if peer_polls else None, polls=peer_polls or 3)},
                          default=RUN_FOREVER)
    code, out, events = run(tmp_path, mwms(restarts=0), scripted(tasks))
    assert code != 0, out
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:1" and failure["reason"].startswith(blamed), failure

# ---------------------------------------------------------------- worker-only restart (PSS)


def test_pss_worker_death_restarts_that_worker_alone(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=3),
                                      ("chief:0", 0): Script(code=0, polls=12)}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, PSS, backend)
    assert code == 0, out
    assert backend.tasks.starts("worker:1") == [0, 0]  # relaunched within attempt 0
    assert backend.tasks.starts("chief:0") == [0] and backend.tasks.starts("ps:0") == [0] and backend.tasks.starts("worker:0") == [0]
    assert "worker:1 exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 2)" in out
    assert "restarting the whole group" not in out
    assert [e["task"] for e in of(events, ev.TaskRestart)] == ["worker:1"]
    # The servers never exit on their own: stopped at the end, after the chief succeeded.
    assert all(h.code is not None for h in backend.tasks.handles)


def test_pss_worker_restart_budget_then_group_restart(tmp_path):
    dies = Script(code=137, polls=2)
    backend = scripted(ScriptedTasks({("worker:0", n): dies for n in range(3)} | {("chief:0", 1): Script(code=0, polls=5)},
                                     default=RUN_FOREVER))
    code, out, events = run(tmp_path, PSS, backend)
    assert code == 0, out
    assert "worker:0 failed: killed by SIGKILL (exit 137) (worker restart budget used up)" in out
    assert [e["attempt"] for e in of(events, ev.GroupRestart)] == [1]
    assert backend.tasks.starts("chief:0") == [0, 1]


def test_pss_a_ps_exit_fails_the_attempt(tmp_path):
    backend = scripted(ScriptedTasks({("ps:0", 0): Script(code=137, polls=2), ("chief:0", 1): Script(code=0, polls=4)},
                                     default=RUN_FOREVER))
    code, out, events = run(tmp_path, PSS, backend)
    assert code == 0, out
    assert of(events, ev.Failure)[0]["task"] == "ps:0"
    assert backend.tasks.starts("ps:0") == [0, 1] and backend.tasks.starts("worker:0") == [0, 1]


def test_an_evaluator_failure_does_not_fail_training(tmp_path):
    spec = mwms().replace("{worker: 2}", "{worker: 2, evaluator: 1}")
    backend = scripted(ScriptedTasks({("evaluator:0", 0): Script(code=1, polls=1)}, default=Script(code=0, polls=4)))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert "evaluator:0 (sidecar) failed: exit code 1; training goes on" in out
    assert len(backend.tasks.started) == 3  # exit 1 is permanent (restart.permanent_exit_codes): not restarted


def _evaluator_spec(restarts: int) -> str:
    return (mwms(restarts=restarts).replace("{worker: 2}", "{worker: 2, evaluator: 1}")
            .replace("backoff: 0}", "backoff: 0, warm_standby: true}"))


def test_an_evaluator_killed_is_restarted_alone_by_its_standby_and_a_new_standby_takes_its_place(tmp_path):
    """Training goes on (no group restart); the evaluator's replacement is its standby, promoted
    within the attempt, and a new standby for it is made at once."""
    backend = scripted(ScriptedTasks({("evaluator:0", 0): Script(code=137, polls=30),
                                      ("worker:0", 0): Script(code=0, polls=60), ("worker:1", 0): Script(code=0, polls=60)},
                                     default=RUN_FOREVER), warm_standby=True)
    code, out, events = run(tmp_path, _evaluator_spec(1), backend)
    assert code == 0, out
    assert "evaluator:0 (sidecar) exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 1), training goes on" \
        in out, out
    assert "(sidecar) failed" not in out
    assert backend.tasks.starts("evaluator:0") == [0, 1, 1], backend.tasks.started  # its standby, then the new one
    assert backend.tasks.starts("worker:0") == [0, 1] and backend.tasks.starts("worker:1") == [0, 1]  # (theirs waited)
    (promoted,) = of(events, ev.StandbyPromoted)
    assert promoted["task"] == "evaluator:0"
    assert [e["task"] for e in of(events, ev.TaskRestart)] == ["evaluator:0"]
    assert not of(events, ev.GroupRestart) and not of(events, ev.SidecarFailed)


def test_an_evaluator_killed_again_once_restarts_are_used_up_is_reported_and_training_goes_on(tmp_path):
    backend = scripted(ScriptedTasks({("evaluator:0", 0): Script(code=137, polls=30), ("evaluator:0", 1): Script(code=137, polls=5),
                                      ("worker:0", 0): Script(code=0, polls=80), ("worker:1", 0): Script(code=0, polls=80)},
                                     default=RUN_FOREVER), warm_standby=True)
    code, out, events = run(tmp_path, _evaluator_spec(1), backend)
    assert code == 0, out
    assert "restarting it alone (1 of 1)" in out
    assert "evaluator:0 (sidecar) failed: killed by SIGKILL (exit 137); training goes on" in out, out
    assert [e["task"] for e in of(events, ev.SidecarFailed)] == ["evaluator:0"]


# ---------------------------------------------------------------- watchdogs


def test_startup_watchdog_fails_an_attempt_whose_port_never_opens_and_retries(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=None, port_after=None)},
                                     default=Script(code=0, polls=30, port_after=1)))
    code, out, events = run(tmp_path, mwms(startup=10), backend)
    assert code == 0, out
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:1" and failure.get("code") is None  # (None: left out of the line)
    assert "never came up: no TF server listening within watchdog.startup_timeout=10 s" in failure["reason"]
    assert backend.tasks.starts("worker:1") == [0, 1]


def test_hang_watchdog_names_the_silent_task(tmp_path):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=None, silent=True)},
                                     default=Script(code=None)))
    backend.tasks.scripts[("worker:0", 1)] = backend.tasks.scripts[("worker:1", 1)] = Script(code=0, polls=3)
    code, out, events = run(tmp_path, mwms(hang=20), backend)
    assert code == 0, out
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:0" and failure["reason"].startswith("hung: no progress for 20 s")


def test_interrupt_stops_every_task_and_exits_130(tmp_path):
    backend = scripted(ScriptedTasks({}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(), backend, stop_after=2)
    assert code == 130
    assert of(events, ev.RunOutcome)[0]["outcome"] == "interrupted"
    assert all(h.code is not None for h in backend.tasks.handles) and backend.tasks.closed and backend.hosts.closed


def test_a_closed_terminal_stops_gracefully_however_often_it_says_so(tmp_path):
    """A closed terminal says so several times (SIGHUP, each failed write): every task still
    gets the graceful SIGTERM only, and the outcome says why; a second Ctrl-C kills at once."""
    def hangup(sup):
        for why in ("the terminal went away (SIGHUP)", "stdout: hung up", "stderr: hung up"):
            sup.stop(why)

    graceful = mwms().replace("stop_grace: 0", "stop_grace: 30")
    result = supervise(tmp_path / "hup", graceful, scripted(ScriptedTasks({}, default=RUN_FOREVER)), clock=Counter(),
                       stop_after=2, stop=hangup)
    assert result.code == 130
    (outcome,) = of(result.events, ev.RunOutcome)
    assert outcome["outcome"] == "interrupted" and outcome["reason"] == "the terminal went away (SIGHUP)"
    ends = lambda events: sorted(e["code"] for e in events if isinstance(e, (ev.Stopped, ev.Exit)))  # noqa: E731
    assert ends(result.events) == [143, 143]  # SIGTERM only: they saved

    def ctrl_c_twice(sup):
        sup.interrupt()
        sup.interrupt()

    result = supervise(tmp_path / "int", graceful, scripted(ScriptedTasks({}, default=RUN_FOREVER)), clock=Counter(),
                       stop_after=2, stop=ctrl_c_twice)
    assert 137 in ends(result.events)  # the second Ctrl-C: SIGKILL at once
    assert of(result.events, ev.RunOutcome)[0]["reason"] == ""


@pytest.mark.parametrize("exit_code,retried", [(1, False), (2, False), (127, False), (137, True), (143, True),
                                               (255, True)])
def test_default_permanent_exit_codes(tmp_path, exit_code, retried):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=exit_code, polls=1)}, default=Script(code=0, polls=3)))
    code, out, events = run(tmp_path, mwms(restarts=1), backend)
    assert code == (0 if retried else 1), out
    assert len(of(events, ev.GroupRestart)) == (1 if retried else 0)


# ---------------------------------------------------------------- hosts that come and go (launcher/plan/elastic.py)


def losing(scripts, losses: dict[int, dict[str, str]], default: Script = Script()) -> Backend:
    """A backend that can move tasks: after attempt ``n``'s failure, ``losses[n]`` are the lost
    hosts its hosts' seam reports (each check is recorded in ``backend.hosts.checked``)."""
    return scripted(ScriptedTasks(scripts, default), ScriptedHosts(losses), elastic=True)


ELASTIC = """\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: h1, address: 10.0.0.1}, {name: h2, address: 10.0.0.2}, {name: h3, address: 10.0.0.3}]
    tasks: {worker: 2}
    restart: {max_restarts: 0}
    elastic: {host_wait: 1}
    watchdog: {stop_grace: 0}
"""


def test_a_lost_session_makes_its_host_suspect_and_its_tasks_move_to_the_spare_at_once(tmp_path):
    """worker:1's session dropped (exit 255, made up) while h2 still answers (its sshd accepts
    during a shutdown): not a failure of the training. h2 is suspect; worker:1 moves to the spare
    h3 at once, spending no restart (max_restarts: 0), in one line."""
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, ELASTIC, backend)
    assert code == 0, out
    assert backend.hosts.checked == [(["h1", "h2"], 0.0)]  # one look at the plan's hosts, no waiting
    # h2's loss is known (its session): its look only words it, so it is bounded (1 s).
    assert backend.hosts.looks == [{"h2": 1.0}]
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"), ("worker:0", "h1"), ("worker:1", "h3")]
    assert [t.host for t in backend.tasks.plans[0].tasks] == ["h1", "h3"]
    said = re.findall(r"^tfcluster: h2: session lost.*", out, re.M)
    assert len(said) == 1 and re.search(
        r"h2: session lost at \d\d:\d\d:\d\d, host still answering; suspect until it answers for 30 s; "
        r"worker:1 moved to h3 \(spare\); restarting the group there", said[0]), out
    assert "worker:1 failed" not in out and "max_restarts is 0" not in out  # the one line says it all
    assert not of(events, ev.GroupRestart)
    (lost,) = of(events, ev.HostLost)
    assert lost["host"] == "h2" and lost["settle"] == 30 and "host still answering" in lost["how"], lost
    # Typed: a session lost (its kind), when (the handle's session_lost), suspect for that.
    assert (lost["cause"], lost["since"], lost["suspect"]) == ("session", 1700000000.0 + 2, True), lost
    (replan,) = of(events, ev.Replan)
    assert (replan["plan"], replan["file"], replan["moved"]) == (2, "plan-2.json", {"worker:1": {"from": "h2", "to": "h3"}})
    second = json.loads((tmp_path / "runs" / "s" / "latest" / "plan-2.json").read_text())
    assert [t["host"] for t in second["tasks"]] == ["h1", "h3"]
    assert "plans used: 1: h1, h2" in out
    assert re.search(r"  2: h1, h3 \(h2: session lost at \d\d:\d\d:\d\d, host still answering; suspect until it "
                     r"answers for 30 s; worker:1 moved to h3 \(spare\)\)", out), out
    # h2 never answered again for 30 s: still suspect, and so shown by status (the panel too).
    status = tfcluster_status(tmp_path)
    assert "suspect hosts: h2 (until it answers for 30 s without a break)" in status, status


def test_a_host_that_does_not_answer_after_a_failure_is_suspect_too(tmp_path):
    """No session was seen to drop (worker:1 exited 137), but h2 does not answer now: suspect."""
    backend = losing({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None)},
                     losses={0: {"h2": "unreachable for 0 s"}}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, ELASTIC, backend)
    assert code == 0, out
    assert "h2: host not answering; suspect until it answers for 30 s; worker:1 moved to h3 (spare)" in out, out
    assert backend.tasks.hosts_started[-1] == ("worker:1", "h3") and not of(events, ev.GroupRestart)
    (lost,) = of(events, ev.HostLost)
    assert (lost["cause"], lost["suspect"]) == ("unreachable", True), lost


def test_a_loss_the_host_announced_is_taken_by_its_kind_not_its_words(tmp_path):
    """The look reports h2 preempted (a ``HostLoss`` of kind PREEMPTED, in words that do not start
    with "preempted"): it is said as the backend said it and recorded as known, not suspect;
    worker:1 moves to the spare at once."""
    notice = HostLoss(LossKind.PREEMPTED, "h2", 1700000100.0, "the metadata server said TERMINATE at 22:15:00")
    backend = losing({("worker:1", 0): Script(code=143, polls=2), ("worker:0", 0): Script(code=None)},
                     losses={0: {"h2": notice}}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, ELASTIC, backend)
    assert code == 0, out
    assert "h2 lost (the metadata server said TERMINATE at 22:15:00); worker:1 moved to h3 (spare)" in out, out
    assert "suspect until" not in out
    (lost,) = of(events, ev.HostLost)
    assert (lost["cause"], lost["since"], lost["suspect"], lost["how"]) == (
        "preempted", 1700000100.0, False, notice.text), lost
    assert backend.tasks.hosts_started[-1] == ("worker:1", "h3") and not of(events, ev.GroupRestart)


def test_after_a_move_the_whole_restart_budget_is_still_there(tmp_path):
    """max_restarts: 1, a session lost in attempt 1, a crash in attempt 2: the crash gets the one restart."""
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None),
                      ("worker:0", 1): Script(code=137, polls=2), ("worker:1", 1): Script(code=None)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, ELASTIC.replace("max_restarts: 0", "max_restarts: 1"), backend)
    assert code == 0, out
    assert "restarting the whole group (restart 1 of 1)" in out
    assert [e["attempt"] for e in of(events, ev.GroupRestart)] == [2]  # the third attempt, the first restart
    assert backend.tasks.hosts_started[-2:] == [("worker:0", "h1"), ("worker:1", "h3")]  # the new plan is kept


def test_a_failure_with_every_host_there_spends_a_restart_as_before(tmp_path):
    backend = losing({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, ELASTIC, backend)
    assert code == 1, out
    assert "worker:1 failed: killed by SIGKILL (exit 137) (attempt 1 of 1)" in out
    assert "gave up after 1 attempt(s): restart.max_restarts is 0" in out
    assert not of(events, ev.Replan) and not of(events, ev.HostLost) and len(backend.hosts.checked) == 1


def test_a_second_loss_with_no_spare_left_waits_host_wait_then_fails_in_one_line(tmp_path):
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None),
                      ("worker:1", 1): Script(code=255, polls=2, lost=True), ("worker:0", 1): Script(code=None)},
                     losses={})
    code, out, events = run(tmp_path, ELASTIC, backend)
    assert code == 1, out
    assert "no spare host for worker:1: waiting up to elastic.host_wait=1 s for h3 to settle" in out, out
    line = ("host h3 (worker:1) lost (no 30 s of answers without a break within elastic.host_wait=1 s) and no spare "
            "host left for worker:1; list more hosts under hosts:")
    assert line in out and out.count("lost (no 30 s") == 1, out
    assert of(events, ev.RunOutcome)[0]["reason"].startswith("host h3 (worker:1) lost (no 30 s of answers")
    assert not of(events, ev.GroupRestart)


class ReturningHosts(ScriptedHosts):
    """As ScriptedHosts; ``back`` answers ``returning`` from its ``after``-th call on."""

    def __init__(self, losses, back: list[str], after: int) -> None:
        super().__init__(losses)
        self.returning, self.after = back, after
        self.asked: list[tuple[list[str], float]] = []

    def back(self, hosts, settle):
        self.asked.append((list(hosts), settle))
        return [h for h in self.returning if h in hosts] if len(self.asked) >= self.after else []


def returning(scripts, losses, back: list[str], after: int, default: Script = Script()) -> Backend:
    """As ``losing``; lost hosts come back (ReturningHosts)."""
    return scripted(ScriptedTasks(scripts, default), ReturningHosts(losses, back, after), elastic=True)


SHRINK = ELASTIC.replace("tasks: {worker: 2}", "tasks: {worker: {count: 2, min: 1}}").replace(
    ", {name: h3, address: 10.0.0.3}", "").replace("elastic: {host_wait: 1}", "elastic: {host_wait: 1, settle: 9}").replace(
    "stop_grace: 0", "stop_grace: 3")


def test_with_no_spare_the_group_shrinks_to_min_and_grows_back_when_the_host_returns(tmp_path):
    backend = returning({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None),
                         ("worker:0", 1): Script(code=None)},
                        losses={0: {"h2": "unreachable for 7 s"}}, back=["h2"], after=3,
                        default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, SHRINK, backend)
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"),  # the plan
                                     ("worker:0", "h1"),  # shrunk: worker:1 left out, no spare
                                     ("worker:0", "h1"), ("worker:1", "h2")]  # grown back on h2
    assert backend.hosts.asked[0] == (["h2"], 9.0)  # the lost host, elastic.settle
    # The shrunk attempt was stopped gracefully (SIGTERM first), not killed.
    shrunk_w0 = backend.tasks.handles[2]
    assert shrunk_w0.signals[0] == signal.SIGTERM, shrunk_w0.signals
    assert "worker:1 left out: 1 worker go on (no spare host)" in out
    assert "h2 answers again (9 s without a break, elastic.settle): usable again" in out
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out
    assert not of(events, ev.GroupRestart) and not of(events, ev.Failure)[1:]  # one failure: the loss
    assert [type(e) for e in events if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded))] == [
        ev.HostLost, ev.Replan, ev.HostAdded, ev.Replan]
    assert [r["tasks"] for r in of(events, ev.Replan)] == [["worker:0"], ["worker:0", "worker:1"]]
    assert [r["added"] for r in of(events, ev.Replan)] == [{}, {"worker:1": "h2"}]


class SettlingHosts(ReturningHosts):
    """As ReturningHosts; ``answering`` (hosts answering, not yet for elastic.settle) answers
    ``returning`` from its ``early``-th call on."""

    def __init__(self, losses, back: list[str], after: int, early: int) -> None:
        super().__init__(losses, back, after)
        self.early, self.early_asked = early, []

    def answering(self, hosts, seconds):
        self.early_asked.append((list(hosts), seconds))
        return [h for h in self.returning if h in hosts] if len(self.early_asked) >= self.early else []


def test_a_regroup_awaits_a_saved_tasks_exit_only_briefly(tmp_path):
    """The host comes back and the shrunk group is stopped for the grow: worker:0 saves at the
    step they agree on and says so (tfcluster-preempted), then does not exit (TensorFlow's
    teardown: a dataset iterator's destructor waiting for tf.data's autotuning thread). The stop
    awaits it SAVED_LINGER more, not the rest of watchdog.stop_grace (30 s: 600 looks)."""
    from launcher.backends.stopping import SAVED_LINGER

    backend = returning({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None),
                         ("worker:0", 1): Script(code=None, term="save", save_polls=2, exit_after_save=False)},
                        losses={0: {"h2": "unreachable for 7 s"}}, back=["h2"], after=3,
                        default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, SHRINK.replace("stop_grace: 3", "stop_grace: 30"), backend)
    assert code == 0, out
    shrunk_w0 = backend.tasks.handles[2]
    assert shrunk_w0.signals[:2] == [signal.SIGTERM, signal.SIGKILL] and shrunk_w0.code == 137, shrunk_w0.signals
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out
    # The stop looks every 0.05 s: after the saved line, SAVED_LINGER's worth of looks and a few more.
    after_save = shrunk_w0.polls - (shrunk_w0.saving_at + 2)
    assert after_save <= SAVED_LINGER / 0.05 + 10, (shrunk_w0.polls, shrunk_w0.saving_at)
    assert backend.tasks.hosts_started[-2:] == [("worker:0", "h1"), ("worker:1", "h2")]


def test_a_returning_host_gets_the_grows_standby_while_it_settles_and_the_grow_promotes_it(tmp_path):
    """Warm standbys on: h2 is lost (worker:1 left out, the group shrunk), answers again, and while
    it settles worker:1's standby starts there (the task the group would grow with onto it), so
    the grow once h2 has settled promotes it instead of starting worker:1 cold."""
    hosts = SettlingHosts({0: {"h2": "unreachable for 7 s"}}, back=["h2"], after=6, early=1)
    # (worker:1's 2nd start: its standby on h2, which polls while h2 settles, then trains as the task)
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): RUN_FOREVER,
                                      ("worker:0", 1): RUN_FOREVER, ("worker:1", 2): Script(code=0, polls=30)},
                                     default=Script(code=0, polls=4)), hosts, elastic=True, warm_standby=True)
    spec = SHRINK.replace("max_restarts: 0}", "max_restarts: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert hosts.early_asked and hosts.early_asked[0] == (["h2"], 2.0), hosts.early_asked  # prewarm.RETURNING_AFTER
    kinds_seen = [(type(e).__name__, e.get("hosts") if isinstance(e, ev.StandbyStart) else e.get("host"))
                  for e in events if isinstance(e, (ev.StandbyStart, ev.HostAdded))]
    assert kinds_seen.index(("StandbyStart", ["h2"])) < kinds_seen.index(("HostAdded", "h2")), kinds_seen
    grown = [e for e in events if isinstance(e, ev.StandbyPromoted)][-2:]
    assert sorted(e["task"] for e in grown) == ["worker:0", "worker:1"], grown
    assert backend.tasks.hosts_started[-1] == ("worker:1", "h2")  # the standby: nothing started after it
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out


def test_a_group_that_started_without_an_absent_host_grows_onto_it_once_it_settles(tmp_path):
    """The preflight found h2 not answering (tasks.worker.min: 1): the run starts as worker:0 alone,
    h2 is watched from the start, and once it has answered for elastic.settle s the group is
    stopped gracefully and grows onto it; nothing lost, no restart spent."""
    from launcher.plan.elastic import start_without

    backend = returning({("worker:0", 0): Script(code=None)}, losses={}, back=["h2"], after=3,
                        default=Script(code=0, polls=4))
    result = supervise(tmp_path, SHRINK, backend, clock=Counter(),
                       plan=lambda spec: start_without(spec, plan_for(spec), ["h2"]).plan,
                       absent=(Absent(AbsentKind.NOT_ANSWERING, "h2", 0.0, "host h2: timed out after 3 s"),), short_why="h2 not answering")
    code, out, events = result.code, result.err + result.out, result.events
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:0", "h1"), ("worker:1", "h2")]
    assert backend.hosts.asked[0] == (["h2"], 9.0)  # watched from the start, elastic.settle
    assert backend.tasks.handles[0].signals[0] == signal.SIGTERM  # the grow: stopped gracefully
    assert "worker: 1 of 2 (h2 not answering); the group grows as hosts answer for elastic.settle=9 s" in out, out
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out
    (start,) = of(events, ev.RunStart)
    assert start["group"] == {"type": "worker", "size": 1, "of": 2, "why": "h2 not answering"} and start["spares"] == []
    assert [type(e) for e in events if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded, ev.GroupRestart))] == [
        ev.HostAdded, ev.Replan]
    status = tfcluster_status(tmp_path)
    assert "worker group by attempt: 1: 1 of 2 (h2 not answering); 2: 2 of 2 (h2 back)" in status, status


def test_a_host_back_after_training_ended_does_not_restart_the_group(tmp_path):
    """Once training is over (here worker:0's result line; fit has deleted its backup), a returning
    host is not grown into the group: the restart would find no backup and train again from step 0."""
    done = Script(code=0, polls=8, say=((1, "tfcluster-result task=worker:0 epochs=2 epochs_run=2 accuracy=0.9"),))
    backend = returning({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None),
                         ("worker:0", 1): done},
                        losses={0: {"h2": "unreachable for 7 s"}}, back=["h2"], after=3,
                        default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, SHRINK, backend)
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"), ("worker:0", "h1")]  # no grow
    assert len(of(events, ev.Replan)) == 1 and "restarting the bigger group" not in out


def test_grow_false_keeps_the_shrunk_group_and_the_returned_host_is_a_spare_again(tmp_path):
    backend = returning({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=None),
                         ("worker:0", 1): Script(code=0, polls=30)},
                        losses={0: {"h2": "unreachable for 7 s"}}, back=["h2"], after=3)
    code, out, events = run(tmp_path, SHRINK.replace("settle: 9}", "settle: 9, grow: false}"), backend)
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"), ("worker:0", "h1")]
    assert len(of(events, ev.HostAdded)) == 1 and len(of(events, ev.Replan)) == 1
    assert "growing the group" not in out


NO_SPARE = ELASTIC.replace(", {name: h3, address: 10.0.0.3}", "").replace(
    "elastic: {host_wait: 1}", "elastic: {host_wait: 30, settle: 5, max_host_losses: 2}")


def test_no_spare_no_min_the_group_waits_for_the_suspect_host_to_settle_and_restarts_on_it(tmp_path):
    """A reboot: h2's session drops, h2 settles within elastic.host_wait: the group restarts on it
    under the same plan, spending no restart (max_restarts: 0)."""
    backend = returning({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None)},
                        losses={}, back=["h2"], after=3, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, NO_SPARE, backend)
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"), ("worker:0", "h1"), ("worker:1", "h2")]
    assert re.search(r"h2: session lost at \d\d:\d\d:\d\d, host still answering; suspect until it answers for 5 s; "
                     r"no spare host for worker:1: waiting up to elastic.host_wait=30 s for h2 to settle", out), out
    assert "h2 answers again (5 s without a break, elastic.settle); restarting the group on it from the last backup" in out
    assert not of(events, ev.GroupRestart) and not of(events, ev.Replan) and not backend.tasks.plans
    (added,) = of(events, ev.HostAdded)
    assert added["host"] == "h2" and added["spare"] is False
    status = tfcluster_status(tmp_path)
    assert "spare hosts" not in status and "suspect hosts" not in status, status


def test_a_host_that_keeps_dropping_ends_the_run_at_elastic_max_host_losses(tmp_path):
    """Every attempt's session on h2 drops, and h2 settles each time: bounded by
    elastic.max_host_losses (2), not by restart.max_restarts (0, never spent); one line."""
    drops = Script(code=255, polls=2, lost=True)
    backend = returning({("worker:1", n): drops for n in range(5)} | {("worker:0", n): Script(code=None)
                                                                      for n in range(5)},
                        losses={}, back=["h2"], after=1)
    code, out, events = run(tmp_path, NO_SPARE, backend)
    assert code == 1, out
    assert backend.tasks.starts("worker:1") == [0, 1, 2]  # two losses taken, the third ends the run
    lines = [line for line in out.splitlines() if "elastic.max_host_losses" in line]
    assert len(lines) == 1 and re.search(
        r"h2: session lost at .*; 3 host losses in this run \(h2 3 times\), more than elastic.max_host_losses=2", lines[0])
    assert of(events, ev.RunOutcome)[0]["reason"] == lines[0].split("tfcluster: error: ")[-1]
    assert not of(events, ev.GroupRestart) and len(of(events, ev.HostLost)) == 3


def test_no_spare_with_min_a_suspect_host_still_answering_shrinks_the_group_at_once(tmp_path):
    backend = returning({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None),
                         ("worker:0", 1): Script(code=None)},
                        losses={}, back=["h2"], after=4, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, SHRINK, backend)
    assert code == 0, out
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2"), ("worker:0", "h1"),
                                     ("worker:0", "h1"), ("worker:1", "h2")]
    assert re.search(r"h2: session lost at .*, host still answering; suspect until it answers for 9 s; worker:1 left "
                     r"out: 1 worker go on \(no spare host\)", out), out
    assert "waiting up to elastic.host_wait" not in out  # a min: no waiting
    assert [type(e) for e in events if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded))] == [
        ev.HostLost, ev.Replan, ev.HostAdded, ev.Replan]


def tfcluster_status(tmp_path) -> str:
    from launcher.record.status import load_run
    from launcher.ui.runstatus import render_status

    return "\n".join(render_status(load_run(tmp_path / "runs" / "s" / "latest"), "cluster.yaml"))


class GoneHosts(ScriptedHosts):
    """``gone`` hosts never answer (``lost`` reports them, whatever the wait)."""

    def __init__(self, gone: set[str]) -> None:
        super().__init__()
        self.gone = gone

    def lost(self, hosts, wait, stop=None, look={}):
        self.checked.append((list(hosts), wait))
        return {h: HostLoss(LossKind.UNREACHABLE, h, None, "unreachable for 0 s") for h in hosts if h in self.gone}


def host_gone(scripts, gone: set[str], default: Script = Script()) -> Backend:
    """An elastic backend whose ``gone`` hosts never answer (GoneHosts)."""
    return scripted(ScriptedTasks(scripts, default), GoneHosts(gone), elastic=True)


PSS_ELASTIC = """\
    name: s
    strategy: parameter_server
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: h1, address: 10.0.0.1}, {name: h2, address: 10.0.0.2}, {name: h3, address: 10.0.0.3}]
    tasks: {chief: {count: 1, hosts: [h1]}, ps: {count: 1, hosts: [h1]}, worker: {count: 2, hosts: [h2, h3], min: 1}}
    restart: {max_restarts: 0}
    elastic: {host_wait: 5}
    watchdog: {stop_grace: 0}
"""


def test_pss_shrinks_to_min_from_the_last_backup_when_a_worker_host_is_gone(tmp_path):
    """TensorFlow's coordinator cannot train on without a worker that never answers again (its
    recovery waits for the worker's address): the group restarts without it, spending no restart."""
    backend = host_gone({("worker:1", 0): Script(code=255, polls=2), ("chief:0", 0): Script(code=None),
                         ("worker:0", 0): Script(code=None), ("ps:0", 0): Script(code=None),
                         ("chief:0", 1): Script(code=0, polls=6)}, gone={"h3"}, default=Script(code=None))
    code, out, events = run(tmp_path, PSS_ELASTIC, backend)
    assert code == 0, out
    assert backend.tasks.starts("worker:1") == [0]  # never restarted onto the host that is gone
    assert ("h3", ) == tuple(backend.hosts.checked[0][0]) and backend.hosts.checked[0][1] == 0.0  # one look, no wait
    assert backend.tasks.starts("chief:0") == [0, 1] and backend.tasks.starts("worker:0") == [0, 1]
    assert [t.key for t in backend.tasks.plans[0].tasks] == ["chief:0", "worker:0", "ps:0"]
    (replan,) = of(events, ev.Replan)
    assert replan["dropped"] == ["worker:1"] and not of(events, ev.TaskRestart) and not of(events, ev.GroupRestart)
    assert ("h3: host not answering; suspect until it answers for 30 s; worker:1 left out: 1 worker go on (no "
            "spare host); restarting the group there from the last backup") in out


def test_pss_a_worker_whose_session_was_lost_is_not_restarted_onto_its_host_that_still_answers(tmp_path):
    """h3 shuts down: worker:1's session drops while h3's sshd still accepts. Restarted alone there
    it would die with the host (and spend max_restarts: 0): the host is suspect, the group
    shrinks to min from the last backup instead, no restart spent."""
    backend = host_gone({("worker:1", 0): Script(code=255, polls=2, lost=True), ("chief:0", 0): Script(code=None),
                         ("worker:0", 0): Script(code=None), ("ps:0", 0): Script(code=None),
                         ("chief:0", 1): Script(code=0, polls=6)}, gone=set(), default=Script(code=None))
    code, out, events = run(tmp_path, PSS_ELASTIC, backend)
    assert code == 0, out
    assert backend.tasks.starts("worker:1") == [0] and not of(events, ev.TaskRestart) and not of(events, ev.GroupRestart)
    assert re.search(r"h3: session lost at \d\d:\d\d:\d\d, host still answering; suspect until it answers for "
                     r"30 s; worker:1 left out: 1 worker go on \(no spare host\)", out), out
    assert "restarting it alone" not in out and "worker:1 failed" not in out


def test_pss_a_ps_whose_session_was_lost_moves_to_the_spare(tmp_path):
    spec = PSS_ELASTIC.replace("ps: {count: 1, hosts: [h1]}", "ps: {count: 1, hosts: [h2]}").replace(
        "hosts: [h2, h3], min: 1}", "hosts: [h1]}")
    backend = host_gone({("ps:0", 0): Script(code=255, polls=2, lost=True), ("chief:0", 1): Script(code=0, polls=6)},
                        gone=set(), default=Script(code=None))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert re.search(r"h2: session lost at .*; suspect until it answers for 30 s; ps:0 moved to h3 \(spare\)", out), out
    assert [t.host for t in backend.tasks.plans[0].tasks if t.type == "ps"] == ["h3"] and not of(events, ev.GroupRestart)


def test_pss_without_min_moves_a_worker_whose_host_is_gone_only_by_a_whole_restart_onto_a_spare(tmp_path):
    spec = PSS_ELASTIC.replace(", min: 1}", "}").replace("hosts: [h2, h3]}", "hosts: [h2, h2]}")
    backend = host_gone({("worker:1", 0): Script(code=255, polls=2), ("chief:0", 0): Script(code=None),
                         ("worker:0", 0): Script(code=None), ("ps:0", 0): Script(code=None),
                         ("chief:0", 1): Script(code=0, polls=6)}, gone={"h2"}, default=Script(code=None))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert ("h2: host not answering; suspect until it answers for 30 s; worker:0 moved to h3 (spare); worker:1 moved "
            "to h3 (spare)") in out, out
    assert [t.host for t in backend.tasks.plans[0].tasks] == ["h1", "h3", "h3", "h1"]


class LateGoneHosts(GoneHosts):
    """The first look finds every host answering; ``gone`` hosts are lost from the second look on."""

    def lost(self, hosts, wait, stop=None, look={}):
        if not self.checked:
            self.checked.append((list(hosts), wait))
            return {}
        return super().lost(hosts, wait, stop)


class StartFails(ScriptedTasks):
    """``fail_start`` cannot be started again, once (its host went away in between: a preempted
    host's connection still looked alive)."""

    def __init__(self, scripts, fail_start: str, default: Script = Script()) -> None:
        super().__init__(scripts, default)
        self.fail_start, self.failed_starts = fail_start, 0

    def start(self, request, on_line):
        task = request.task
        if task.key == self.fail_start and self.starts(task.key) and not self.failed_starts:
            from launcher.errors import LaunchError

            self.failed_starts += 1
            raise LaunchError(f"host {task.host}: the connection closed during preflight; check the host",
                              "no task was started")
        return super().start(request, on_line)


def start_fails(scripts, gone: set[str], fail_start: str, default: Script = Script()) -> Backend:
    """The first look finds every host answering; then ``fail_start`` cannot be started again
    (StartFails), and ``gone`` hosts are lost from the second look on (LateGoneHosts)."""
    return scripted(StartFails(scripts, fail_start, default), LateGoneHosts(gone), elastic=True)


def test_pss_a_worker_whose_restart_fails_because_its_host_went_away_shrinks_the_group(tmp_path):
    backend = start_fails({("worker:1", 0): Script(code=255, polls=2), ("chief:0", 0): Script(code=None),
                           ("worker:0", 0): Script(code=None), ("ps:0", 0): Script(code=None),
                           ("chief:0", 1): Script(code=0, polls=6)},
                          gone={"h3"}, fail_start="worker:1", default=Script(code=None))
    spec = PSS_ELASTIC.replace("max_restarts: 0", "max_restarts: 2")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert "no task was started" not in out
    (replan,) = of(events, ev.Replan)
    assert replan["dropped"] == ["worker:1"] and not of(events, ev.GroupRestart)  # a membership change, no restart spent
    assert backend.tasks.starts("chief:0") == [0, 1]


def test_pss_a_failed_restart_of_a_worker_fails_the_attempt_not_the_launcher(tmp_path):
    """Not elastic: the start's error is that worker's failure, and the group restarts."""
    backend = start_fails({("worker:1", 0): Script(code=137, polls=2), ("chief:0", 1): Script(code=0, polls=6)},
                          gone=set(), fail_start="worker:1", default=RUN_FOREVER)
    code, out, events = run(tmp_path, PSS, backend)
    assert code == 0, out
    (failure,) = [e for e in of(events, ev.Failure) if e["task"] == "worker:1"]
    assert failure["reason"].startswith("restarting it failed: host "), failure
    assert [e["attempt"] for e in of(events, ev.GroupRestart)] == [1]


# ---------------------------------------------------------------- warm standby (launcher/supervise/standby.py)


def test_a_warm_standby_started_once_ready_is_promoted_by_the_group_restart(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER},
                              default=Script(code=0, polls=3)), warm_standby=True)
    spec = mwms(restarts=1).replace("backoff: 0}", "backoff: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    # Two starts per task: the first attempt's, and the standby (TFCLUSTER_RESTART_COUNT=1) it promotes.
    assert backend.tasks.started == [("worker:0", 0), ("worker:1", 0), ("worker:0", 1), ("worker:1", 1)]
    assert [e["attempt"] for e in of(events, ev.StandbyStart)] == [1]
    assert sorted(e["task"] for e in of(events, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    assert [h.signals[:1] for h in backend.tasks.handles[2:]] == [[signal.SIGUSR1], [signal.SIGUSR1]]
    assert "[worker:1] (standby) tfcluster-step attempt=1 poll=1" in out  # before its promotion
    assert "[worker:1] tfcluster-step attempt=1 poll=2" in out  # after it: the task's own lines
    assert not of(events, ev.StandbyStopped)  # nothing left over to stop


@pytest.mark.parametrize("capable, warm, fork", [({"fork": True}, "auto", True), ({"fork": True}, "true", True),
                                                  ({}, "auto", False), ({"fork": True}, "false", False)])
def test_the_supervisor_says_standby_and_fork_in_each_request(tmp_path, capable, warm, fork):
    """Every start is a ``StartRequest``: the standbys ask ``standby``, the cold starts not; each
    asks ``fork`` where the backend keeps a warm parent (Capabilities.fork) unless
    restart.warm_standby is false, standbys or not; a promotion is asked with the cold start's
    request. The environment carries neither flag."""
    promoted: list = []

    class Promotions(ScriptedTasks):
        def promote(self, handle, request):
            promoted.append(request)
            super().promote(handle, request)

    backend = scripted(Promotions({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER},
                                  default=Script(code=0, polls=3)), warm_standby=True, **capable)
    spec = mwms(restarts=1).replace("backoff: 0}", f"backoff: 0, warm_standby: {warm}}}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    requests = backend.tasks.requests
    standbys = warm != "false"
    assert [(r.key, r.standby) for r in requests] == [("worker:0", False), ("worker:1", False)] + (
        [("worker:0", True), ("worker:1", True)] if standbys else [("worker:0", False), ("worker:1", False)])
    assert {r.fork for r in requests + promoted} == {fork}
    assert all("TFCLUSTER_STANDBY" not in r.env and r.env["TFCLUSTER_RESTART_COUNT"] in ("0", "1") for r in requests)
    assert sorted((r.key, r.standby, r.env["TFCLUSTER_RESTART_COUNT"]) for r in promoted) == (
        [("worker:0", False, "1"), ("worker:1", False, "1")] if standbys else [])


def test_a_pss_worker_restarted_alone_is_its_promoted_standby_and_a_new_standby_takes_its_place(tmp_path):
    """A parameter_server worker that dies while standbys wait: its replacement is its standby,
    promoted within the attempt (no cold start), and a new standby for it is made at once, so
    its next restart is warm too; the other tasks' standbys go on waiting."""
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=30),
                                      ("chief:0", 0): Script(code=0, polls=60)}, default=RUN_FOREVER), warm_standby=True)
    spec = PSS.replace("max_restarts: 2}", "max_restarts: 2, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert "worker:1 exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 2)" in out
    # Its first process, its standby (started for the next attempt), then the standby that replaces it.
    assert backend.tasks.starts("worker:1") == [0, 1, 1], backend.tasks.started
    assert backend.tasks.starts("chief:0") == [0, 1] and backend.tasks.starts("worker:0") == [0, 1]  # (theirs still waiting)
    (promoted,) = of(events, ev.StandbyPromoted)
    assert promoted["task"] == "worker:1"
    standby, restocked = [h for h in backend.tasks.handles if h.key == "worker:1"][1:]
    assert standby.signals[:1] == [signal.SIGUSR1] and signal.SIGUSR1 not in restocked.signals
    starts = [e for e in of(events, ev.Start) if e["task"] == "worker:1"]
    assert [e["attempt"] for e in starts] == [0, 0]  # within the attempt: no group restart
    assert [sorted(e["pids"]) for e in of(events, ev.StandbyStart)] == [["chief:0", "ps:0", "worker:0", "worker:1"],
                                                                        ["worker:1"]]
    assert not of(events, ev.GroupRestart)


def test_the_next_attempts_standbys_wait_for_a_trained_step_or_their_bound(tmp_path):
    """tfcluster's worker: the standbys start once a task of the attempt trained a step (its own
    first_step line), not while the attempt builds, restores and traces beside them; a worker
    that trains no step before the bound gets them then; one that fails first restarts cold."""
    from tests.support.fakes import Counter, supervise

    start = "tfcluster-start epoch=0 step=0 global_step=0 time=1700000000.0 epochs=1 steps_per_epoch=50"
    first = "tfcluster-first_step epoch=0 step=0 global_step=1 time=1700000001.0"

    def attempt0(say):
        return {("worker:0", 0): Script(code=None, say=say), ("worker:1", 0): Script(code=137, polls=30, say=say)}

    def go(name, say, bound):
        backend = scripted(ScriptedTasks(attempt0(say), default=Script(code=0, polls=3)), warm_standby=True)
        res = supervise(tmp_path / name, mwms(restarts=1), backend, clock=Counter(), standby_after_ready=bound)
        assert res.code == 0, res.err + res.out
        return res.err + res.out, res.events

    out, events = go("stepped", ((2, start), (12, first)), 10_000)
    assert [e["attempt"] for e in of(events, ev.StandbyStart)] == [1]
    assert out.index("[worker:0] tfcluster-first_step ") < out.index("(standby) ")
    assert sorted(e["task"] for e in of(events, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    out, events = go("no-step", ((2, start),), 10_000)
    assert not of(events, ev.StandbyStart) and not of(events, ev.StandbyPromoted)  # a cold restart
    out, events = go("bound", ((2, start),), 20)
    assert [e["attempt"] for e in of(events, ev.StandbyStart)] == [1] and of(events, ev.StandbyPromoted)


def test_warm_standby_is_on_by_default_where_the_backend_can_and_off_without_restarts(tmp_path):
    failing = {("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER}
    backend = scripted(ScriptedTasks(failing, default=Script(code=0, polls=3)), warm_standby=True)
    code, out, events = run(tmp_path / "auto", mwms(restarts=1), backend)  # warm_standby left out: auto
    assert code == 0, out
    assert sorted(e["task"] for e in of(events, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    assert of(events, ev.RunStart)[0]["warm_standby"].startswith("on (auto: tfcluster's worker)")
    # The same run on a backend that cannot keep standbys, or with no restart allowed: none.
    plain = scripted(ScriptedTasks(failing, default=Script(code=0, polls=3)))
    code, out, events = run(tmp_path / "plain", mwms(restarts=1), plain)
    assert code == 0 and not of(events, ev.StandbyStart), out
    assert "keeps no standby; every restart starts cold" in of(events, ev.RunStart)[0]["warm_standby"]
    none = scripted(ScriptedTasks({("worker:0", 0): Script(code=0, polls=5)}, default=Script(code=0, polls=3)), warm_standby=True)
    code, out, events = run(tmp_path / "zero", mwms(restarts=0), none)
    assert code == 0 and not of(events, ev.StandbyStart) and len(none.tasks.started) == 2, out


def test_a_promoted_standby_that_never_answers_is_started_cold_after_the_bound(tmp_path):
    """A standby that blocked SIGUSR1 and said it was ready, but ignores its promotion (no
    'tfcluster-standby promoted'): stopped after ACK_BOUND and its task started cold, in one line;
    the run still succeeds."""
    from launcher.supervise.standby import ACK_BOUND

    silent = Script(code=None, standby_ack=False)
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER,
                                      ("worker:1", 1): silent},
                                     default=Script(code=0, polls=int(ACK_BOUND) + 20)), warm_standby=True)
    code, out, events = run(tmp_path, mwms(restarts=1), backend)
    assert code == 0, out
    assert backend.tasks.started == [("worker:0", 0), ("worker:1", 0), ("worker:0", 1), ("worker:1", 1), ("worker:1", 1)]
    assert f"worker:1: its warm standby did not answer the promotion within {ACK_BOUND:g} s " \
           "(no 'tfcluster-standby promoted' line); starting it cold" in out
    assert backend.tasks.handles[3].signals == [signal.SIGUSR1, signal.SIGKILL]  # promoted, then stopped
    (stopped,) = of(events, ev.StandbyStopped)
    assert stopped["tasks"] == ["worker:1"]
    assert not of(events, ev.Failure)[1:]  # only the first attempt's failure: the cold start is not one


def test_a_standby_that_never_said_it_waits_is_not_promoted(tmp_path):
    """A process started as a standby that printed no 'tfcluster-standby' line may not have
    blocked SIGUSR1 (a script that ignores TFCLUSTER_STANDBY): it is stopped, never signalled
    with SIGUSR1, and its task starts cold."""
    mute = Script(code=None, standby_mark=False, standby_ack=False)
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER,
                                      ("worker:0", 1): mute, ("worker:1", 1): mute},
                                     default=Script(code=0, polls=3)), warm_standby=True)
    spec = mwms(restarts=1).replace("backoff: 0}", "backoff: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert len(backend.tasks.started) == 6 and not of(events, ev.StandbyPromoted)
    assert all(signal.SIGUSR1 not in h.signals and signal.SIGKILL in h.signals for h in backend.tasks.handles[2:4])


# ---------------------------------------------------------------- a lost session's survivors save first

GRACEFUL = ELASTIC.replace("watchdog: {stop_grace: 0}", "watchdog: {stop_grace: 10}")


def test_a_lost_sessions_survivor_is_asked_to_save_and_its_agreed_save_is_awaited(tmp_path):
    """h2's session dropped (its shutdown's SIGTERM reached worker:1 too): worker:0 on h1 gets
    SIGTERM, not SIGKILL at once, and says tfcluster-saving (the step the workers agreed on):
    the supervisor waits for its exit (143, saved) before the move, so no step is redone."""
    looked = threading.Event()  # worker:0's save ends only once the look at the hosts began

    class Looking(ScriptedHosts):
        def lost(self, hosts, wait, stop=None, look={}):
            looked.set()
            return super().lost(hosts, wait, stop, look)

    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=255, polls=2, lost=True),
                                      ("worker:0", 0): Script(code=None, term="save", save_polls=2, save_gate=looked)},
                                     default=Script(code=0, polls=4)), Looking(), elastic=True)
    code, out, events = run(tmp_path, GRACEFUL, backend)
    assert code == 0, out
    # The look at the hosts (up to 1 s for a host going down) ran beside the save, not after it.
    assert backend.hosts.checked == [(["h1", "h2"], 0.0)] and backend.hosts.looks == [{"h2": 1.0}]
    first = backend.tasks.handles[0]
    assert first.key == "worker:0" and first.signals[0] == signal.SIGTERM and first.code == 143, first.signals
    assert "stopping worker:0 (SIGTERM; a save they start within 0.5 s is awaited, up to watchdog.stop_grace=10 s;" \
           in out, out
    stopped = [e for e in of(events, ev.Stopped) if e["task"] == "worker:0"]
    assert stopped[0]["code"] == 143, stopped
    # It exited by itself, after its save, before the replan: the move came after it.
    kinds = [type(e) for e in events]
    assert kinds.index(ev.Stopped) < kinds.index(ev.Replan), kinds
    assert backend.tasks.hosts_started[-1] == ("worker:1", "h3")


def test_a_survivor_that_starts_no_save_is_killed_after_the_look(tmp_path):
    """The same lost session, but worker:0 starts no save (blocked in a collective with a peer
    that vanished without a SIGTERM): SIGTERM, then SIGKILL once the look is over."""
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True),
                      ("worker:0", 0): Script(code=None, term="ignore")},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, GRACEFUL, backend)
    assert code == 0, out
    first = backend.tasks.handles[0]
    assert first.signals[:2] == [signal.SIGTERM, signal.SIGKILL] and first.code == 137, first.signals
    assert [e["code"] for e in of(events, ev.Stopped) if e["task"] == "worker:0"][0] == 137


def test_a_task_that_failed_on_its_own_gets_its_peers_killed_at_once(tmp_path):
    """The control: worker:1 crashed (137; its session is fine): its peers cannot save without
    it, so worker:0 gets SIGKILL at once, no SIGTERM, whatever watchdog.stop_grace says."""
    backend = losing({("worker:1", 0): Script(code=137, polls=2),
                      ("worker:0", 0): Script(code=None, term="save")},
                     losses={0: {"h2": "unreachable for 0 s"}}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, GRACEFUL, backend)
    assert code == 0, out
    first = backend.tasks.handles[0]
    assert first.signals[0] == signal.SIGKILL and signal.SIGTERM not in first.signals, first.signals
    assert "a save they start" not in out


def test_a_replan_with_no_fresh_port_left_ends_the_run_in_one_line(tmp_path):
    """Every replan takes ports no earlier plan used; at ports.base 65535, worker:0 staying on
    h1 needs 65536. The run ends with one line naming the hosts' loss, the field and the fix,
    not a traceback."""
    spec = ELASTIC.replace("tasks: {worker: 2}", "tasks: {worker: 2}\n    ports: {base: 65535}")
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 1, out
    (line,) = [l for l in out.splitlines() if "cannot be replanned" in l]
    assert re.search(r"h2: session lost at .*; the group cannot be replanned: ports.base: 65535 leaves no room for "
                     r"worker:0 on h1 \(would need port 65536 > 65535\); lower ports.base$", line), line
    assert backend.tasks.hosts_started == [("worker:0", "h1"), ("worker:1", "h2")]
    assert of(events, ev.RunOutcome)[0]["outcome"] == "failed"


def test_a_survivor_that_saved_is_not_awaited_until_its_exit(tmp_path):
    """worker:0 said tfcluster-preempted (its save is written) but does not exit (TensorFlow's
    shutdown waiting on the peer whose host went down): the look ends at that line, well
    before watchdog.stop_grace, and it is killed."""
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True),
                      ("worker:0", 0): Script(code=None, term="save", save_polls=2, exit_after_save=False)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, GRACEFUL, backend)
    assert code == 0, out
    first = backend.tasks.handles[0]
    assert first.signals[:2] == [signal.SIGTERM, signal.SIGKILL] and first.code == 137, first.signals
    assert "[worker:0] tfcluster-preempted" in out or "preempted at epoch 0" in out, out
    # Its polls: up to the saved line, then two for the stop (to stop_grace: about 5 more).
    assert first.polls <= first.saving_at + 2 + 2, (first.polls, first.saving_at)


def test_a_survivor_that_exits_right_after_its_save_still_has_its_end_recorded(tmp_path):
    """worker:0 says it saved, and its exit comes a poll later: after the wait for its save
    ended, before the group's stop looked at it. Its end is still in the record (a ``stopped``
    event with its 143, before the replan): every task of an attempt has one."""
    backend = losing({("worker:1", 0): Script(code=255, polls=2, lost=True),
                      ("worker:0", 0): Script(code=None, term="save", save_polls=2, exit_lag=1)},
                     losses={}, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, GRACEFUL, backend)
    assert code == 0, out
    first = backend.tasks.handles[0]
    assert first.key == "worker:0" and first.signals[0] == signal.SIGTERM and first.code == 143, first.signals
    ends = [e for e in events if isinstance(e, (ev.Exit, ev.Stopped)) and e["task"] == "worker:0"
            and e.get("attempt", 0) == 0]
    assert [(type(e), e["code"]) for e in ends][:1] == [(ev.Stopped, 143)], ends
    kinds = [type(e) for e in events]
    assert events.index(ends[0]) < kinds.index(ev.Replan), kinds


def test_a_task_that_saved_and_exited_143_gets_its_peers_save_awaited_too(tmp_path):
    """No session lost: worker:1 was SIGTERMed on its own (the GCE notice's wrapper, a kill),
    said tfcluster-saving and exited 143 once saved. worker:0 takes part in the same save: it is
    asked (SIGTERM) and awaited, not killed mid-write by the group's stop."""
    spec = mwms(restarts=1).replace("stop_grace: 0", "stop_grace: 10")
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=143, polls=3,
                                                              say=((2, "tfcluster-saving epoch=0 step=2 global_step=2"),)),
                                      ("worker:0", 0): Script(code=None, term="save", save_polls=2)},
                                     default=Script(code=0, polls=4)))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    first = backend.tasks.handles[0]
    assert first.key == "worker:0" and first.signals[0] == signal.SIGTERM and first.code == 143, first.signals
    assert "stopping worker:0 (SIGTERM; a save they start within" in out, out


def test_a_task_stopped_by_its_hosts_preemption_notice_gets_its_peers_sigtermed_whatever_it_printed(tmp_path):
    """worker:1's host announced its preemption (its wrapper saw GCE's notice and SIGTERMed it):
    it exits 143 having said nothing of a save (a user's script, or its line not read yet), and
    that exit may be the first the supervisor hears. Its peer is SIGTERMed, as a host's shutdown
    has it, not SIGKILLed: a script's own save on SIGTERM needs every worker. The same exit from
    a host that announced nothing (a kill) stops the peer with SIGKILL, as before."""
    spec = mwms(restarts=1).replace("stop_grace: 0", "stop_grace: 10")

    def peer_first_signal(going: bool) -> int:
        backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=143, polls=3, going=going),
                                          ("worker:0", 0): Script(code=None, term="exit")},
                                         default=Script(code=0, polls=4)))
        code, out, _ = run(tmp_path / str(going), spec, backend)
        assert code == 0, out
        first = backend.tasks.handles[0]
        assert first.key == "worker:0", first.key
        return first.signals[0]

    assert peer_first_signal(going=True) == signal.SIGTERM
    assert peer_first_signal(going=False) == signal.SIGKILL


# ---------------------------------------------------------------- fresh ports per restart


class PromotionsSeen(ScriptedTasks):
    """Records each promotion's task in ``promoted``."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.promoted: list = []

    def promote(self, handle, request):
        self.promoted.append(request.task)
        super().promote(handle, request)


def fresh_ports(*a, **kw) -> Backend:
    """A backend whose stopped tasks leave their hosts late (slurm's steps): it asks for fresh ports
    on every restart (Capabilities.fresh_ports_per_restart) and records each promotion's task."""
    return scripted(PromotionsSeen(*a, **kw), warm_standby=True, fresh_ports_per_restart=True)


def test_a_restart_on_a_backend_that_asks_for_it_gets_fresh_ports_and_still_promotes_its_standbys(tmp_path):
    backend = fresh_ports({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER},
                          default=Script(code=0, polls=3))
    spec = mwms(restarts=1).replace("backoff: 0}", "backoff: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    assert "restarting the whole group (restart 1 of 1) on fresh ports" in out, out
    starts = {(e["task"], e["attempt"]): e["endpoint"] for e in of(events, ev.Start)}
    ports = {a: {int(starts[(k, a)].rsplit(":", 1)[1]) for k in ("worker:0", "worker:1")} for a in (0, 1)}
    assert len(ports[1]) == 2 and not ports[0] & ports[1], ports  # none of the first attempt's
    (restart,) = of(events, ev.GroupRestart)
    assert set(restart["ports"].values()) == ports[1], restart
    # the standbys started under the first plan were promoted with the new one's TF_CONFIG
    assert sorted(e["task"] for e in of(events, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    assert {t.port for t in backend.tasks.promoted} == ports[1]
    assert all(json.loads(t.tf_config_json)["cluster"]["worker"][t.index].endswith(f":{t.port}") for t in backend.tasks.promoted)
    assert [{t.port for t in p.tasks} for p in backend.tasks.plans] == [ports[1]]


def test_a_backend_that_does_not_ask_restarts_on_the_same_ports(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=4), ("worker:0", 0): RUN_FOREVER},
                                     default=Script(code=0, polls=3)), warm_standby=True)
    code, out, events = run(tmp_path, mwms(restarts=1), backend)
    assert code == 0, out
    starts = of(events, ev.Start)
    assert {e["endpoint"] for e in starts if e["attempt"] == 0} == {e["endpoint"] for e in starts if e["attempt"] == 1}
    assert "fresh ports" not in out and "ports" not in of(events, ev.GroupRestart)[0]


def test_a_wait_below_min_is_a_host_wait_event_that_the_next_attempt_ends(tmp_path):
    """worker group 2 of 2 with min 2, no spare: h2's loss leaves 1 worker, below min, so the group
    waits for h2 (elastic.host_wait): a host_wait event the panel and status count down from,
    ended by the restart on h2."""
    backend = returning({("worker:1", 0): Script(code=255, polls=2, lost=True), ("worker:0", 0): Script(code=None)},
                        losses={}, back=["h2"], after=3, default=Script(code=0, polls=4))
    code, out, events = run(tmp_path, NO_SPARE.replace("tasks: {worker: 2}", "tasks: {worker: {count: 2, min: 2}}"),
                            backend)
    assert code == 0, out
    (wait,) = of(events, ev.HostWait)
    assert (wait["hosts"], wait["have"], wait["need"], wait["wait"], wait["attempt"]) == (["h2"], 1, 2, 30.0, 0)
    assert wait["time"] + 29 <= wait["until"] <= wait["time"] + 31
    kinds = [type(e) for e in events if isinstance(e, (ev.HostLost, ev.HostWait, ev.HostAdded, ev.Start))]
    assert kinds[2:] == [ev.HostLost, ev.HostWait, ev.HostAdded, ev.Start, ev.Start], kinds
    assert "waiting for" not in tfcluster_status(tmp_path)  # (over: the run ended)


# ---------------------------------------------------------------- decisions once checked with TensorFlow
#
# What integration tests checked with TensorFlow processes where TensorFlow played no part in the
# decision: restart policy and the watchdogs as the user reads them (an exit code, a port that never
# opens, a silence: tests/integration/test_fault_tolerance.py), and a parameter_server group growing
# onto a host absent at `up` (the ssh lab's elastic tests).


def test_exit_1_every_time_is_not_retried_and_says_how_to_retry_it(tmp_path):
    backend = scripted(ScriptedTasks({("worker:0", 0): Script(code=1, polls=2)}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(restarts=3), backend)
    assert code == 1, out
    assert "worker:0 failed: exit code 1 (attempt 1 of 4)" in out, out
    assert ("not retried: an uncaught error in the task (exit 1) fails the same way every time; fix the cause, "
            "or remove 1 from restart.permanent_exit_codes") in out, out
    assert "restarting" not in out
    assert [e["task"] for e in of(events, ev.Start)] == ["worker:0", "worker:1"]  # one attempt
    assert not of(events, ev.GroupRestart) and of(events, ev.RunOutcome)[0]["outcome"] == "failed"
    assert all(h.code is not None for h in backend.tasks.handles)  # worker:1 stopped, not left running


def test_a_retryable_failure_every_time_gives_up_after_max_restarts_with_each_attempt_in_the_table(tmp_path):
    backend = scripted(ScriptedTasks({("worker:1", n): Script(code=137, polls=2) for n in range(3)},
                                     default=RUN_FOREVER))
    code, out, events = run(tmp_path, mwms(restarts=1), backend)
    assert code == 1, out
    assert "gave up after 2 attempt(s): restart.max_restarts is 1; raise it to retry more" in out, out
    assert backend.tasks.starts("worker:1") == [0, 1]  # max_restarts 1: two attempts, not one, not three
    assert "restarting the whole group (restart 1 of 1)" in out
    table = [line for line in out.splitlines() if "failed: worker:1 killed by SIGKILL (exit 137)" in line]
    assert len(table) == 2 and all(re.match(r"\s+[12]\s", line) for line in table), out
    assert [e["attempt"] for e in of(events, ev.GroupRestart)] == [1]
    assert all(h.code is not None for h in backend.tasks.handles)


def test_a_peer_that_never_starts_is_named_by_the_startup_watchdog(tmp_path):
    """worker:1 runs but never opens its TF port: after watchdog.startup_timeout it is the one
    named, with its address; worker:0, whose port opened, is ready and then stopped."""
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=None, port_after=None)},
                                     default=Script(code=None, port_after=1)))
    code, out, events = run(tmp_path, mwms(restarts=0, startup=25), backend)
    assert code == 1, out
    assert re.search(r"worker:1 failed: never came up: no TF server listening within watchdog.startup_timeout=25 s: "
                     r"worker:1 \(localhost:\d+\)", out), out
    assert [e["task"] for e in of(events, ev.Ready)] == ["worker:0"]
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:1" and "worker:0 failed" not in out
    assert all(h.code is not None for h in backend.tasks.handles)


def test_an_unused_standby_is_stopped_at_success(tmp_path):
    """warm_standby with a restart allowed: the attempt's standbys start, the run succeeds without
    needing them, and they are stopped (never promoted)."""
    backend = scripted(ScriptedTasks({}, default=Script(code=0, polls=12)), warm_standby=True)
    spec = mwms(restarts=1).replace("backoff: 0}", "backoff: 0, warm_standby: true}")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    kinds = [type(e) for e in events]
    assert ev.StandbyStart in kinds and kinds.index(ev.StandbyStopped) > kinds.index(ev.StandbyStart), kinds
    assert ev.StandbyPromoted not in kinds
    standbys = [h for h in backend.tasks.handles if h.standby]
    assert len(standbys) == 2 and all(signal.SIGUSR1 not in h.signals and h.code is not None for h in standbys)


class StoppedTasks(ScriptedTasks):
    """Tasks whose state note (read from /proc on a real host) says ``stopped`` is stopped."""

    def __init__(self, stopped: str, **kw) -> None:
        super().__init__(**kw)
        self.stopped = stopped

    def start(self, request, on_line):
        handle = super().start(request, on_line)
        handle.state_note = lambda: "process is stopped (SIGSTOP?)" if handle.key == self.stopped else ""
        return handle


def test_the_hang_watchdog_names_a_stopped_task_with_its_state_and_the_group_restarts(tmp_path):
    """worker:0 stops printing (SIGSTOPped) in the first attempt: after watchdog.hang_timeout it
    alone is named, with what its process state says, and the group's one restart is taken."""
    tasks = StoppedTasks("worker:0", scripts={("worker:0", 0): Script(code=None, silent=True),
                                              ("worker:1", 0): RUN_FOREVER}, default=Script(code=0, polls=3))
    code, out, events = run(tmp_path, mwms(restarts=1, hang=12), scripted(tasks))
    assert code == 0, out
    failed = [line for line in out.splitlines() if " failed: " in line and "error:" in line]
    assert len(failed) == 1 and failed[0].split("worker:0 failed: ", 1)[1].startswith(
        "hung: no progress for 12 s (watchdog.hang_timeout); process is stopped (SIGSTOP?)"), out
    assert "restarting the whole group (restart 1 of 1)" in out
    assert tasks.starts("worker:0") == tasks.starts("worker:1") == [0, 1]




def test_a_parameter_server_group_starts_without_an_absent_worker_host_and_grows_onto_it(tmp_path):
    """h3 (worker:1's host) does not answer at `up` (tasks.worker.min: 1): the group starts as the
    chief, worker:0 and the ps; once h3 has answered for elastic.settle the whole group is stopped
    gracefully and restarted with worker:1 on h3, the chief and ps where they were, no restart
    spent, nothing lost."""
    from launcher.plan.elastic import start_without

    spec = PSS_ELASTIC.replace("elastic: {host_wait: 5}", "elastic: {host_wait: 5, settle: 3}").replace(
        "stop_grace: 0", "stop_grace: 3")
    backend = returning({("chief:0", 1): Script(code=0, polls=6)}, losses={}, back=["h3"], after=3,
                        default=Script(code=None))
    result = supervise(tmp_path, spec, backend, clock=Counter(),
                       plan=lambda spec: start_without(spec, plan_for(spec), ["h3"]).plan,
                       absent=(Absent(AbsentKind.NOT_ANSWERING, "h3", 0.0, "host h3: timed out after 3 s"),), short_why="h3 not answering")
    code, out, events = result.code, result.err + result.out, result.events
    assert code == 0, out
    assert backend.hosts.asked[0] == (["h3"], 3.0)  # watched from the start, elastic.settle
    started = backend.tasks.hosts_started
    assert started[:3] == [("chief:0", "h1"), ("worker:0", "h2"), ("ps:0", "h1")], started
    assert sorted(started[3:]) == [("chief:0", "h1"), ("ps:0", "h1"), ("worker:0", "h2"), ("worker:1", "h3")], started
    assert all(h.signals[:1] == [signal.SIGTERM] for h in backend.tasks.handles[:3])  # the grow: a graceful stop
    assert "worker: 1 of 2 (h3 not answering)" in out, out
    assert "h3 back; worker:1 added on h3" in out, out
    (start,) = of(events, ev.RunStart)
    assert start["group"] == {"type": "worker", "size": 1, "of": 2, "why": "h3 not answering"}, start
    assert kinds(events, ev.HostLost, ev.Replan, ev.HostAdded, ev.GroupRestart, ev.TaskRestart) == [ev.HostAdded,
                                                                                                 ev.Replan]
    run = tmp_path / "runs" / "s" / "latest"
    assert [t["host"] for t in json.loads((run / "plan.json").read_text())["tasks"]] == ["h1", "h2", "h1"]
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1", "h2", "h3", "h1"]


# ---------------------------------------------------------------- preemption exits (restart.preemption_exit_codes)


def test_a_preemption_exit_restarts_the_group_without_spending_max_restarts(tmp_path):
    # TensorFlow's PreemptionCheckpointHandler: every worker saves the agreed step and exits 42.
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=42, polls=2), ("worker:0", 0): Script(code=42, polls=3)},
                                     default=Script(code=0, polls=4)))
    code, out, events = run(tmp_path, mwms(restarts=0), backend)
    assert code == 0, out
    assert backend.tasks.starts("worker:0") == [0, 1] and backend.tasks.starts("worker:1") == [0, 1]
    assert ("restarting the whole group (worker:1 exited 42 after saving for a preemption: restart.preemption_exit_codes; "
            "restart.max_restarts not spent)") in out
    (failure,) = of(events, ev.Failure)
    assert (failure["task"], failure["code"]) == ("worker:1", 42)
    assert failure["reason"] == "saved for a preemption and asks for a restart (exit 42: restart.preemption_exit_codes)"
    assert len(of(events, ev.GroupRestart)) == 1 and of(events, ev.RunOutcome)[0]["outcome"] == "succeeded"
    # Not a permanent code, nor a spent restart: without the key, 42 is an error of the task's (1-127).
    plain = scripted(ScriptedTasks({("worker:1", 0): Script(code=42, polls=2)}, default=RUN_FOREVER))
    code, out, _ = run(tmp_path / "plain", mwms(restarts=0).replace("restart: {", "restart: {preemption_exit_codes: [], "),
                       plain)
    assert code == 1 and "not retried: exit code 42 is listed in restart.permanent_exit_codes" in out, out


def test_preemption_restarts_are_bounded_by_max_preemptions(tmp_path):
    backend = scripted(ScriptedTasks({}, default=Script(code=42, polls=2)))
    spec = mwms(restarts=0).replace("restart: {", "restart: {max_preemptions: 2, ")
    code, out, events = run(tmp_path, spec, backend)
    assert code == 1 and len(of(events, ev.GroupRestart)) == 2
    assert ("gave up after 3 preemptions (2 restarted: restart.max_preemptions); raise it, or look at why the tasks "
            "keep exiting with a code of restart.preemption_exit_codes") in out, out


# ---------------------------------------------------------------- a task's process stopped by a signal


def _stopped_mwms(stopped_timeout, hang=0):
    return mwms(restarts=1, hang=hang).replace("stop_grace: 0}", f"stop_grace: 0, stopped_timeout: {stopped_timeout}}}")


def test_a_task_its_wrapper_says_is_stopped_fails_the_group_after_stopped_timeout_long_before_a_hang(tmp_path):
    """worker:1's wrapper says its process is stopped (SIGSTOP) at its 3rd poll: once that has lasted
    watchdog.stopped_timeout (5 s on the counter clock), worker:1 is named with its state, not by
    the hang watchdog (120 s), and the group's restart is taken."""
    tasks = ScriptedTasks({("worker:1", 0): Script(code=None, stop_at=3), ("worker:0", 0): RUN_FOREVER},
                          default=Script(code=0, polls=3))
    code, out, events = run(tmp_path, _stopped_mwms(5, hang=120), scripted(tasks))
    assert code == 0, out
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:1", failure
    assert failure["reason"].startswith("process is stopped (SIGSTOP?) for "), failure
    assert failure["reason"].endswith(" s (watchdog.stopped_timeout 5 s)"), failure
    (said,) = of(events, ev.ProcessStopped)
    assert (said["task"], said["limit"], said["killed"]) == ("worker:1", 5, False) and 5 <= said["seconds"] < 10, said
    assert "worker:1's process has been stopped by a signal (SIGSTOP?) for " in out and "its group fails with it" in out
    assert not of(events, ev.GroupStalled)
    assert tasks.starts("worker:0") == tasks.starts("worker:1") == [0, 1]


def test_a_task_stopped_for_less_than_stopped_timeout_is_left_alone(tmp_path):
    """Stopped at its 3rd poll, running again at its 5th (a profiler's pause): under a limit of 60
    s nothing is said and nothing restarted."""
    tasks = ScriptedTasks({("worker:1", 0): Script(code=0, polls=12, stop_at=3, cont_at=5)},
                          default=Script(code=0, polls=12))
    code, out, events = run(tmp_path, _stopped_mwms(60), scripted(tasks))
    assert code == 0, out
    assert not of(events, ev.ProcessStopped) and not of(events, ev.Failure), out
    assert tasks.starts("worker:1") == [0]


def test_with_stopped_timeout_0_a_stopped_task_is_left_to_the_hang_watchdog(tmp_path):
    tasks = ScriptedTasks({("worker:1", 0): Script(code=None, stop_at=3), ("worker:0", 0): RUN_FOREVER},
                          default=Script(code=0, polls=3))
    code, out, events = run(tmp_path, _stopped_mwms(0, hang=12), scripted(tasks))
    assert code == 0, out
    (failure,) = of(events, ev.Failure)
    assert failure["task"] == "worker:1" and failure["reason"].startswith("hung: no progress for 12 s"), failure
    assert not of(events, ev.ProcessStopped)


def test_a_stopped_parameter_server_worker_is_killed_and_restarted_alone(tmp_path):
    """A parameter_server worker's death does not fail the group: stopped past the limit, it is
    killed and restarted alone (its exit is then any worker's), the chief and ps untouched."""
    spec = PSS.replace("watchdog: {stop_grace: 0}", "watchdog: {stop_grace: 0, stopped_timeout: 4}")
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=None, stop_at=2),
                                      ("chief:0", 0): Script(code=0, polls=25)}, default=RUN_FOREVER))
    code, out, events = run(tmp_path, spec, backend)
    assert code == 0, out
    (said,) = of(events, ev.ProcessStopped)
    assert (said["task"], said["killed"]) == ("worker:1", True), said
    stopped = [h for h in backend.tasks.handles if h.key == "worker:1"][0]
    assert signal.SIGKILL in stopped.signals and stopped.code == 137
    assert backend.tasks.starts("worker:1") == [0, 0] and backend.tasks.starts("chief:0") == [0]
    assert [e["task"] for e in of(events, ev.TaskRestart)] == ["worker:1"] and not of(events, ev.Failure)
    assert "killing it: it is restarted alone" in out
