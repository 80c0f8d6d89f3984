"""Each ssh host's fork server for the run (launcher/backends/ssh/zygote.py), on the lab of real
sshd hosts, with a user's plain TF_CONFIG script (tests/support/plain_tf_config.py): every task
and standby of a host is forked from that host's zygote, a standby is only its wrapper until
promoted, and nothing breaks it: a zygote SIGKILLed while its tasks run loses none of their
exits, is said by its keeper at once and started again at the next start on its host (one line:
the promoted standby there is forked from the new one); a fork that fails under a real limit on
processes (a pids cgroup around the zygote) is answered cold and the zygote serves on. Asserted from the hosts' processes (the lab shares this pid namespace)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from launcher.record import events as ev
from tests.support.cli import ROOT
from tests.support.records import of, read_records
from tests.support.tfrun import run_and_act
from tests.support.waits import wait_for

from .conftest import PY, cmdline, pids_in_netns, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(600)]

PLAIN = str(ROOT / "tests" / "support" / "plain_tf_config.py")
READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"
STEP = r"^\[worker:1\] plain-step \d+ "
START = re.compile(r"^\[(?P<key>worker:\d)\] plain-start (?P<json>\{.*\})$", re.M)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def zygote_of(host) -> int:
    """The pid of the host's zygote (zygote.py itself, not its wrapper)."""
    found = [p for p in pids_in_netns(host) if re.search(r"python\S* \S*zygote\.py --socket", cmdline(p))
             and "taskwrap" not in cmdline(p)]
    assert len(found) == 1, {p: cmdline(p) for p in pids_in_netns(host)}
    return found[0]


def plain_spec(make_spec, tmp_path, **extra):
    steps, state = tmp_path / "steps", tmp_path / "state"
    steps.write_text("100000")
    state.mkdir()
    spec = make_spec([PY, PLAIN, "--steps", f"@{steps}", "--delay", "0.1", "--state", str(state)],
                     env={"TF_CPP_MIN_LOG_LEVEL": "2"}, restart={"max_restarts": 1},
                     watchdog={"startup_timeout": 240, "stop_grace": 2}, **extra)
    return spec, steps, state


def said(out: str) -> dict:
    """(key, attempt) -> what the task's script said of itself at its start (its first line)."""
    seen: dict = {}
    for m in START.finditer(out):
        s = json.loads(m["json"])
        n = sum(1 for k, _ in seen if k == m["key"])
        if (m["key"], n - 1) not in seen or seen[(m["key"], n - 1)] != s:
            seen[(m["key"], n)] = s
    return seen


def end_after(steps: Path, state: Path, more: int = 30) -> None:
    steps.write_text(str(int((state / "step").read_text() or 0) + more))


def test_an_ssh_runs_tasks_are_forked_from_each_hosts_zygote_which_is_started_again_when_killed(
        lab, make_spec, tmp_path):
    """Both standbys ready: on each host the zygote's only child is a waiter whose only child is
    the running worker, and the standbys are wrappers with no process of their own. Then h1's
    zygote is SIGKILLed and worker:1 (on h2) too: worker:0 on h1 trains on (its waiter is its
    parent); the restart's promotion of worker:0's standby on h1 finds h1's keeper's word that its
    zygote ended and starts a new one on the same socket first (one line, from the record's
    zygote_ended event), which forks it: its grandparent is the new zygote, the only one on h1,
    the old one gone; worker:1's standby on h2 is forked from h2's. Once worker:1 trains again,
    h2's zygote is SIGKILLed as well: the run still ends in success, each task's own exit 0
    reaching its wrapper through its waiter."""
    spec, steps, state = plain_spec(make_spec, tmp_path)
    h1, h2 = lab.host("h1"), lab.host("h2")
    zygotes: dict[str, int] = {}
    looked: dict[str, object] = {}

    def look_and_kill(_proc) -> None:
        for h in (h1, h2):
            zygotes[h.name] = zygote = zygote_of(h)
            waiters = children(zygote)
            looked[h.name] = (waiters, [children(w) for w in waiters])
            deferred = [p for p in pids_in_netns(h) if "--standby-defer" in cmdline(p)  # (not its shell)
                        and os.path.basename(cmdline(p).split(" ", 1)[0]).startswith("python")]
            looked[h.name + " standbys"] = [children(p) for p in deferred]
        os.kill(zygotes["h1"], signal.SIGKILL)
        (worker1,) = looked["h2"][1][0]
        end_after(steps, state)
        os.kill(worker1, signal.SIGKILL)

    def kill_h2s(_proc) -> None:
        zygotes["h1 again"] = zygote_of(h1)  # (exactly one there: the new one)
        looked["h1 old"] = os.path.exists(f"/proc/{zygotes['h1']}")
        os.kill(zygotes["h2"], signal.SIGKILL)

    code, out = run_and_act(spec, [(READY, lambda p: None), (READY, lambda p: None), (STEP, look_and_kill),
                                   (r"^\[worker:1\] tfcluster-standby promoted", lambda p: None),
                                   (STEP, kill_h2s)], timeout=300)
    assert code == 0, out[-5000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-3000:]
    for h in ("h1", "h2"):
        waiters, workers = looked[h]
        assert len(waiters) == 1 and len(workers[0]) == 1, (h, looked)  # a waiter, and under it the worker
        assert looked[h + " standbys"] == [[]], looked  # a standby: its wrapper alone
    tasks = said(out)
    assert tasks[("worker:0", 0)]["gppid"] == zygotes["h1"] and tasks[("worker:1", 0)]["gppid"] == zygotes["h2"]
    assert tasks[("worker:1", 1)]["gppid"] == zygotes["h2"], tasks  # forked: the promoted standby
    assert tasks[("worker:0", 1)]["gppid"] == zygotes["h1 again"] != zygotes["h1"], tasks  # from the new one
    assert looked["h1 old"] is False
    notes = [l for l in out.splitlines() if "zygote ended" in l]
    assert notes == ["tfcluster: host h1's zygote ended (exit 137); a new one starts (1 of 3)"], notes
    (ended,) = of(read_records(spec.parent / "runs/sshtest/latest"), ev.ZygoteEnded)
    assert (ended.host, ended.code, ended.restart, ended.cold) == ("h1", 137, 1, ""), ended
    assert not [l for l in out.splitlines() if "started without the zygote" in l], out[-3000:]
    assert "unknown" not in out, out[-3000:]  # (no exit lost: "its exit code is unknown")
    wait_for(lambda: not any(task_processes(lab).values()), 30, what=f"nothing left: {task_processes(lab)}")


def test_a_fork_that_fails_on_an_ssh_host_is_answered_cold_and_its_zygote_serves_on(lab, make_spec, tmp_path):
    """h2's zygote in a pids cgroup that allows it no new process (EAGAIN, as systemd's per-user
    TasksMax gives), worker:1 SIGKILLed: its promoted standby is refused the fork, says so in one
    line and starts cold; worker:0's on h1 is forked; the run succeeds, and h2's zygote is still
    there, having said why in its log."""
    from tests.support.pidlimit import pid_limit

    spec, steps, state = plain_spec(make_spec, tmp_path)
    h2 = lab.host("h2")
    alive_after: list[bool] = []
    with_limit = []

    def limit_and_kill(proc) -> None:
        zygote = zygote_of(h2)
        cm = pid_limit(zygote)
        limit = cm.__enter__()
        with_limit.append((cm, zygote))
        if not limit.exact:
            pytest.skip("no pids cgroup: RLIMIT_NPROC would stop the whole user's forks")
        limit(limit.current())
        (worker1,) = [c for w in children(zygote) for c in children(w)]
        end_after(steps, state)
        os.kill(worker1, signal.SIGKILL)

    def look(_proc) -> None:
        alive_after.append(os.path.exists(f"/proc/{with_limit[0][1]}"))

    try:
        code, out = run_and_act(spec, [(READY, lambda p: None), (READY, lambda p: None), (STEP, limit_and_kill),
                                       (r"^\[worker:1\] tfcluster-standby promoted", lambda p: None),
                                       (STEP, look)], timeout=300)
    finally:
        for cm, _ in with_limit:
            cm.__exit__(None, None, None)
    assert code == 0, out[-5000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-3000:]
    (line,) = [l for l in out.splitlines() if "started without the zygote" in l]
    assert line == ("[worker:1] taskwrap: started without the zygote: the zygote could not fork "
                    "(Resource temporarily unavailable: a limit on processes?)"), line
    assert alive_after == [True]
    tasks = said(out)
    assert tasks[("worker:0", 1)]["gppid"] == tasks[("worker:0", 0)]["gppid"], tasks  # forked, from h1's
    logs = list((tmp_path / "remote" / "sshtest").glob("*/zygote.*.log"))
    assert any("fork failed (Resource temporarily unavailable): a task starts cold" in p.read_text() for p in logs), \
        [p.read_text()[-500:] for p in logs]
    wait_for(lambda: not any(task_processes(lab).values()), 30, what=f"nothing left: {task_processes(lab)}")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def socket_of(pid: int) -> str:
    return cmdline(pid).split("--socket ", 1)[1].split(" ", 1)[0]


def test_a_killed_keeper_is_replaced_and_its_hosts_next_task_is_forked_from_the_new_server(
        lab, make_spec, tmp_path):
    """h1's keeper (the host agent kept over its own channel, exec'd as a small keeper: its
    zygote's parent) is SIGKILLed while both workers train: its zygote ends with it (the kernel
    kills it: zygote.py --parent), worker:0 trains
    on (its waiter is its parent). worker:1 is SIGKILLed: at the restart, the promotion of
    worker:0's standby on h1 finds the keeper gone, runs h1's preflight once more for a new
    keeper, whose zygote binds the socket the last one had: the standby's wrapper asks that path,
    and worker:0 is forked from the new zygote. One line says it; the run succeeds."""
    spec, steps, state = plain_spec(make_spec, tmp_path)
    h1, h2 = lab.host("h1"), lab.host("h2")
    seen: dict[str, object] = {}

    def kill_keeper(_proc) -> None:
        seen["zygote"] = zygote = zygote_of(h1)
        seen["socket"] = socket_of(zygote)
        seen["keeper"] = keeper = parent(zygote)
        assert " -S " in cmdline(keeper) and "zygotehost.py --keeper " in cmdline(keeper), cmdline(keeper)
        os.kill(keeper, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{zygote}"), 30, what=f"h1's zygote {zygote} ending with its keeper")
        (worker1,) = [c for w in children(zygote_of(h2)) for c in children(w)]
        end_after(steps, state)
        os.kill(worker1, signal.SIGKILL)

    def look(_proc) -> None:
        seen["new"] = zygote = zygote_of(h1)
        seen["new socket"] = socket_of(zygote)
        seen["new keeper"] = parent(zygote)

    code, out = run_and_act(spec, [(READY, lambda p: None), (READY, lambda p: None), (STEP, kill_keeper),
                                   (r"^\[worker:0\] tfcluster-standby promoted", lambda p: None),
                                   (r"^\[worker:0\] plain-step \d+ ", look)], timeout=300)
    assert code == 0, out[-5000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-3000:]
    tasks = said(out)
    assert tasks[("worker:0", 0)]["gppid"] == seen["zygote"], (tasks, seen)
    assert tasks[("worker:0", 1)]["gppid"] == seen["new"] != seen["zygote"], (tasks, seen)  # from the new one
    assert seen["new socket"] == seen["socket"] and seen["new keeper"] != seen["keeper"], seen
    notes = [l for l in out.splitlines() if "zygote" in l and l.startswith("tfcluster:")]
    assert notes == ["tfcluster: host h1's zygote ended (exit unknown); a new one starts (1 of 3)"], notes
    (ended,) = of(read_records(spec.parent / "runs/sshtest/latest"), ev.ZygoteEnded)
    assert (ended.host, ended.code, ended.restart, ended.cold) == ("h1", None, 1, ""), ended
    assert not [l for l in out.splitlines() if "started without the zygote" in l], out[-3000:]
    assert "unknown (" not in out, out[-3000:]  # (no exit lost: "its exit code is unknown (137)")
    wait_for(lambda: not any(task_processes(lab).values()), 30, what=f"nothing left: {task_processes(lab)}")


def test_a_second_up_of_the_same_spec_forks_from_the_servers_the_first_kept_warm(lab, make_spec, tmp_path):
    """``ssh.keep_warm``: the first run's fork servers stay on both hosts after it (each said in
    one line and a zygote_warm event); the second `up` of the same spec adopts them: its tasks'
    grandparents are the same servers, one line each says so, no import. Once no run has held
    them for keep_warm seconds they end, their dirs removed: nothing is left on the hosts."""
    keep = 8
    spec, steps, state = plain_spec(make_spec, tmp_path, ssh={"keep_warm": keep})
    steps.write_text("5")
    hosts = {name: lab.host(name) for name in ("h1", "h2")}
    kept: dict[str, int] = {}
    try:
        code, out = run_and_act(spec, [], timeout=300)
        assert code == 0, out[-5000:]
        kept.update({name: zygote_of(h) for name, h in hosts.items()})  # (the run has ended: they stay)
        for name, pid in kept.items():
            assert f"tfcluster: {name}: its fork server (pid {pid}) stays {keep} s after the run (ssh.keep_warm)" \
                in out.splitlines(), out[-3000:]
        first = {e.host: (e.pid, e.reused) for e in of(read_records(spec.parent / "runs/sshtest/latest"), ev.ZygoteWarm)}
        assert first == {name: (pid, False) for name, pid in kept.items()}, first
        end_after(steps, state, 5)
        code, out = run_and_act(spec, [], timeout=300)
        assert code == 0, out[-5000:]
        for name, pid in kept.items():
            assert f"tfcluster: {name}: forking from the fork server an earlier run kept warm (pid {pid}): no import" \
                in out.splitlines(), out[-3000:]
            assert zygote_of(hosts[name]) == pid
        tasks = said(out)
        assert (tasks[("worker:0", 0)]["gppid"], tasks[("worker:1", 0)]["gppid"]) == (kept["h1"], kept["h2"]), tasks
        second = {e.host: (e.pid, e.reused) for e in of(read_records(spec.parent / "runs/sshtest/latest"), ev.ZygoteWarm)}
        assert second == {name: (pid, True) for name, pid in kept.items()}, second
        dirs = [Path(socket_of(pid)).parent for pid in kept.values()]
        assert all(d.parent == Path(f"/tmp/tfcluster-warm-{os.geteuid()}") for d in dirs), dirs
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in kept.values()), keep + 30,
                 what=f"the warm servers {kept} ending {keep} s after the second run")
        assert not [d for d in dirs if d.exists()], f"a warm server's dir is left: {dirs}"
        wait_for(lambda: not any(task_processes(lab).values()), 30, what=f"nothing left: {task_processes(lab)}")
    finally:
        for pid in kept.values():  # (whatever failed: nothing of this test outlives it on the lab's hosts)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
