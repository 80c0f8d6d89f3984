"""A worker group with tasks.worker.min starts with the hosts that are there, on the ssh lab (sshd
hosts with private disks): a listed host down at `up` (its link cut, as a preempted VM), a host
that discovery.command lists only mid-run, a host going down the way a VM shuts down while the run
starts (its sessions die while its sshd answers a few seconds longer), and a run that never reaches
min. Each grows through the grow path (a graceful stop, a replan) and spends no restart
(restart.max_restarts: 0). The tasks are stand-ins (tests/support/group_task.py): what training
does across a grow (the agreed save, 0 steps redone) is checked with the reference worker in
test_ssh_elastic.py (shrink and grow) and tests/integration/test_worker_resize.py; the decisions
themselves, a parameter_server group among them, at unit speed in
tests/unit/supervise/test_supervisor_scripted.py."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest
import yaml

from tests.support.cli import tfcluster
from tests.support.ssh_helpers import NOTICE, bring_back, group_task, wait_attempt_up
from tests.support.tfrun import run_and_act
from tests.support.waits import wait_for

from .conftest import PY, task_processes
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

def groups(out_dir) -> dict[tuple[int, int], dict[str, str]]:
    """What the stand-ins wrote: (attempt, group size) -> {task: host}."""
    found: dict[tuple[int, int], dict[str, str]] = {}
    for path in out_dir.iterdir():
        attempt, size, kind, index = path.name.split("-")
        found.setdefault((int(attempt), int(size)), {})[f"{kind}:{index}"] = path.read_text()
    return found


def run_of(spec):
    return spec.parent / "runs" / "sshtest" / "latest"


def events_of(spec) -> list[ev.RecordEvent]:
    return read_records(run_of(spec))


def plan_hosts(spec, name: str) -> list[str]:
    return [t["host"] for t in json.loads((run_of(spec) / name).read_text())["tasks"]]


def nothing_left(lab) -> None:
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


def cut(lab, name: str) -> None:
    """The host's link down: it does not answer (a preempted VM, a partition)."""
    lab.host(name).exec("ip", "link", "set", "eth0", "down")


def in_background(fn):
    """An action for run_and_act that runs in a thread (bringing a host back waits for its sshd),
    so the launcher's output is read meanwhile."""
    threads: list[threading.Thread] = []

    def act(_proc):
        thread = threading.Thread(target=fn, daemon=True)
        thread.start()
        threads.append(thread)
    act.threads = threads
    return act


def assert_grown(out: str, out_dir) -> None:
    """worker:0 started alone on h1, then the group was stopped and restarted as two, worker:1 on
    h2, one attempt later, with no attempt in between."""
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out, out[-4000:]
    found = groups(out_dir)
    (alone,) = [k for k, v in found.items() if k[1] == 1]
    assert found[alone] == {"worker:0": "h1"}, found
    assert found[(alone[0] + 1, 2)] == {"worker:0": "h1", "worker:1": "h2"}, found
    assert max(found) == (alone[0] + 1, 2), found  # it ended there


def test_a_listed_host_down_at_up_starts_the_group_smaller_and_it_grows_when_the_host_answers(lab, make_spec, tmp_path):
    out_dir = tmp_path / "out"
    spec = make_spec(group_task(out_dir, 2), hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 1}},
                     restart={"max_restarts": 0}, elastic={"settle": 3, "host_wait": 30})
    planned = tfcluster("plan", str(spec))  # no connection: the full plan, and that it may start smaller
    assert planned.returncode == 0, planned.stderr
    assert "worker:1  h2" in planned.stdout and "starts with 1..2 of 2 workers where hosts are short" in planned.stdout
    cut(lab, "h2")
    try:
        dry = tfcluster("up", "--dry-run", str(spec))  # what would start now
        assert dry.returncode == 0, dry.stderr
        assert "worker:1" not in dry.stdout and "worker:0  h1" in dry.stdout, dry.stdout
        assert "would start 1 tasks on backend ssh (worker: 1 of 2 (h2 not answering))" in dry.stderr, dry.stderr
        back = in_background(lambda: bring_back(lab, "h2"))
        code, out = run_and_act(spec, [(r"\[worker:0\] group of 1 ", back)], timeout=240)
        for thread in back.threads:
            thread.join(60)
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "worker: 1 of 2 (h2 not answering); the group grows as hosts answer for elastic.settle=3 s" in out, out[-4000:]
    assert "h2 answers again (3 s without a break, elastic.settle): usable again" in out, out[-4000:]
    assert_grown(out, out_dir)
    assert "restart.max_restarts is 0" not in out and "failed" not in out.lower().replace("failed=0", "")
    recorded = events_of(spec)
    (start,) = [e for e in recorded if isinstance(e, ev.RunStart)]
    assert start["tasks"] == ["worker:0"] and start["group"] == {"type": "worker", "size": 1, "of": 2,
                                                                   "why": "h2 not answering"}, start
    kinds = [type(e) for e in recorded if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded, ev.GroupRestart))]
    assert kinds == [ev.HostAdded, ev.Replan], kinds  # nothing lost, nothing restarted: it only grew
    assert plan_hosts(spec, "plan.json") == ["h1"] and plan_hosts(spec, "plan-2.json") == ["h1", "h2"]
    status = tfcluster("status", str(spec))
    assert status.returncode == 0, status.stderr
    assert "worker group by attempt: 1: 1 of 2 (h2 not answering); 2: 2 of 2 (h2 back)" in status.stdout, status.stdout
    nothing_left(lab)


def test_discovery_with_slots_starts_with_the_room_there_and_grows_when_the_second_host_is_listed(
        lab, make_spec, tmp_path):
    listing = tmp_path / "hosts.yaml"

    def publish(names):
        listing.write_text(yaml.safe_dump([{**h, "slots": 1} for h in lab.hosts_yaml(names)]))

    publish(["h1"])
    out_dir = tmp_path / "out"
    spec = make_spec(group_task(out_dir, 2), hosts=[], tasks={"worker": {"count": 2, "min": 1}},
                     restart={"max_restarts": 0}, discovery={"command": f"cat {listing}", "every": 1, "timeout": 5},
                     elastic={"settle": 2})
    written = yaml.safe_load(spec.read_text())
    del written["hosts"]  # every host comes from the command
    spec.write_text(yaml.safe_dump(written, sort_keys=False))
    planned = tfcluster("plan", "--discover", str(spec))  # (plan runs no discovery command unless asked)
    assert planned.returncode == 0, planned.stderr  # (it used to be: hosts[].slots: the tasks do not fit)
    assert "worker: starts with 1 of 2 workers (no room for more on the hosts known now)" in planned.stdout, \
        planned.stdout
    code, out = run_and_act(spec, [(r"\[worker:0\] group of 1 ", lambda _p: publish(["h1", "h2"]))], timeout=240)
    assert code == 0, out[-6000:]
    assert "worker: 1 of 2 (no room for more on the hosts there (hosts[].slots)); the group grows as hosts answer" \
        in out, out[-4000:]
    assert "discovery: h2 found (usable once it answers for elastic.settle=2 s)" in out, out[-4000:]
    assert_grown(out, out_dir)
    assert plan_hosts(spec, "plan.json") == ["h1"] and plan_hosts(spec, "plan-2.json") == ["h1", "h2"]
    recorded = events_of(spec)
    assert not [e for e in recorded if isinstance(e, (ev.GroupRestart, ev.Failure, ev.HostLost))]
    nothing_left(lab)


def test_below_min_the_run_waits_host_wait_then_ends_in_one_line_naming_the_hosts(lab, make_spec):
    spec = make_spec([PY, "-c", "print('up', flush=True)"], hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 2}},
                     restart={"max_restarts": 0}, elastic={"host_wait": 4})
    cut(lab, "h2")
    try:
        began = time.monotonic()
        result = tfcluster("up", str(spec))
        took = time.monotonic() - began
    finally:
        bring_back(lab, "h2")
    assert result.returncode == 1, result.stderr
    waiting = [line for line in result.stderr.splitlines() if "waiting up to elastic.host_wait=4 s" in line]
    assert len(waiting) == 1 and waiting[0].startswith("tfcluster: h2 not answering: 1 worker can start now, below "
                                                       "tasks.worker.min=2"), result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and re.search(r"h2 not answering after elastic.host_wait=4 s: 1 worker can start now, "
                                          r"below tasks.worker.min=2 \(host h2 \(.*\): timed out after 3 s; .*\); bring it back", errors[0]), \
        result.stderr
    assert took >= 4, took
    assert "[worker:0] up" not in result.stdout + result.stderr  # nothing started
    nothing_left(lab)


def test_a_host_shutting_down_as_the_run_starts_leaves_the_group_smaller_and_it_grows_back(lab, make_spec, tmp_path):
    """h2 goes down the way a VM shuts down as the run starts, once the first attempt's tasks are
    up (before any of them got further): SIGTERM to its processes while its sshd accepts new
    connections for NOTICE s more, then SIGKILL and its link down. The group goes on as worker:0
    alone (tasks.worker.min: 1, no restart spent) and grows back once h2 answers for
    elastic.settle. (Started beside `up` instead, the shutdown raced the preflight: on a loaded
    machine h2 was back before `up` first connected, and nothing was lost to test.)"""
    out_dir = tmp_path / "out"
    spec = make_spec(group_task(out_dir, 2, hold=1), hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 1}},
                     restart={"max_restarts": 0}, elastic={"settle": NOTICE + 2, "host_wait": 60})
    gone = threading.Event()

    def shutdown_then_back():
        wait_attempt_up(out_dir, 0, 2)  # both tasks, not only worker:1 whose line starts this
        lab.shutdown("h2", NOTICE)
        gone.set()
        bring_back(lab, "h2")

    try:
        act = in_background(shutdown_then_back)
        code, out = run_and_act(spec, [(r"\[worker:1\] group of 2 attempt 0", act)], timeout=240)
        for thread in act.threads:
            thread.join(NOTICE + 60)
    finally:
        bring_back(lab, "h2")
    assert gone.is_set()
    assert code == 0, out[-6000:]
    assert re.search(r"h2: session lost at .*; worker:1 left out: 1 worker go on", out), out[-4000:]
    assert "h2 back; worker:1 added on h2; restarting the bigger group from the step just saved" in out, out[-4000:]
    assert "restart.max_restarts is 0" not in out
    found = groups(out_dir)
    assert found == {(0, 2): {"worker:0": "h1", "worker:1": "h2"}, (1, 1): {"worker:0": "h1"},
                     (2, 2): {"worker:0": "h1", "worker:1": "h2"}}, found
    assert [plan_hosts(spec, name) for name in ("plan.json", "plan-2.json", "plan-3.json")] == [
        ["h1", "h2"], ["h1"], ["h1", "h2"]]
    assert not [e for e in events_of(spec) if isinstance(e, ev.GroupRestart)]
    nothing_left(lab)


ENV_OF = """\
import json, os, pathlib, socket, sys, time
task = os.environ["TFCLUSTER_TASK"]
out = {"host": socket.gethostname(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
pathlib.Path(sys.argv[1], "env-" + task.replace(":", "-") + ".json").write_text(json.dumps(out))
deadline = time.time() + 60  # the run ends once every task of the start plan has written its env
while len(list(pathlib.Path(sys.argv[1]).glob("env-*.json"))) < int(sys.argv[2]) and time.time() < deadline:
    time.sleep(0.1)
"""


def test_a_group_starting_small_is_placed_by_the_gpus_of_the_hosts_that_answered(lab, make_spec, tmp_path):
    """h2 is down at `up`: the group (4 workers, min 1, a GPU each) starts without it, as h1's two
    workers and h3's one. h1 has 1 GPU, h3 2: the preflight places by GPUs over h1 and h3 only
    (the full group's placement by GPUs put workers on h2, which does not answer), so the run starts
    with 3 workers, one GPU each, and says why it is smaller."""
    from tests.support.gpus import gpu_pythons

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (tmp_path / "env_of.py").write_text(ENV_OF)
    spec = make_spec([PY, str(tmp_path / "env_of.py"), str(out_dir), "3"], hosts=["h1", "h2", "h3"],
                     host_keys=gpu_pythons(tmp_path, {"h1": 1, "h2": 2, "h3": 2}, PY),
                     tasks={"worker": {"count": 4, "min": 1}}, devices={"gpus_per_task": 1},
                     restart={"max_restarts": 0}, elastic={"settle": 3, "host_wait": 30})
    cut(lab, "h2")
    try:
        result = tfcluster("up", str(spec), timeout=240)
    finally:
        bring_back(lab, "h2")
    assert result.returncode == 0, result.stderr[-4000:]
    assert ("gpus: round-robin would over-fill h1 1 GPU for 2 GPU-count tasks; placed by each host's GPUs instead "
            "(GPU tasks: h1 1, h3 2)") in result.stderr, result.stderr[-4000:]
    assert "worker: 3 of 4 (h2 not answering)" in result.stderr, result.stderr[-4000:]
    got = {p.stem[4:]: json.loads(p.read_text()) for p in out_dir.glob("env-*.json")}
    assert sorted((env["host"], env["CUDA_VISIBLE_DEVICES"]) for env in got.values()) == [
        ("h1", "0"), ("h3", "0"), ("h3", "1")], got
    (start,) = [e for e in events_of(spec) if isinstance(e, ev.RunStart)]
    assert start["group"] == {"type": "worker", "size": 3, "of": 4, "why": "h2 not answering"}, start
    assert plan_hosts(spec, "plan.json") == ["h1", "h3", "h3"]
    nothing_left(lab)


def test_the_group_grows_into_every_free_slot_of_a_host_that_comes_back(lab, make_spec, tmp_path):
    """h1 and h2 have 2 slots each; h2 is down at `up`: the group (4 workers, min 1) starts as h1's
    two. When h2 answers for elastic.settle it grows into both of h2's slots at once (one worker
    per empty host left it at 3 of 4 for good), through the grow path, no restart spent."""
    out_dir = tmp_path / "out"
    spec = make_spec(group_task(out_dir, 4), hosts=["h1", "h2"],
                     host_keys={"h1": {"slots": 2}, "h2": {"slots": 2}}, tasks={"worker": {"count": 4, "min": 1}},
                     restart={"max_restarts": 0}, elastic={"settle": 2, "host_wait": 30})
    cut(lab, "h2")
    try:
        back = in_background(lambda: bring_back(lab, "h2"))
        code, out = run_and_act(spec, [(r"\[worker:1\] group of 2", back)], timeout=300)
        for thread in back.threads:
            thread.join(60)
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "worker: 2 of 4 (h2 not answering)" in out, out[-4000:]
    assert "h2 back; worker:2 added on h2; worker:3 added on h2; restarting the bigger group" in out, out[-4000:]
    found = groups(out_dir)
    assert found == {(0, 2): {"worker:0": "h1", "worker:1": "h1"},
                     (1, 4): {"worker:0": "h1", "worker:1": "h1", "worker:2": "h2", "worker:3": "h2"}}, found
    kinds = [type(e) for e in events_of(spec) if isinstance(e, (ev.HostLost, ev.Replan, ev.HostAdded, ev.GroupRestart))]
    assert kinds == [ev.HostAdded, ev.Replan], kinds
    assert plan_hosts(spec, "plan-2.json") == ["h1", "h1", "h2", "h2"]
    nothing_left(lab)


def test_a_wait_below_min_at_up_is_in_the_record_before_the_run_starts(lab, make_spec, tmp_path):
    """h2 is down at `up` and the group needs both workers (min 2): the preflight waits for it
    (elastic.host_wait), said in one plain line off a terminal; h2 comes back, the run starts with
    both, and its record begins with the wait (a host_wait event: the hosts, 1 of min 2 workers,
    its deadline), which status and the panel count down from while it lasts."""
    spec = make_spec([PY, "-c", "print('up', flush=True)"], hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 2}},
                     restart={"max_restarts": 0}, elastic={"host_wait": 120, "settle": 2})
    cut(lab, "h2")
    try:
        back = in_background(lambda: bring_back(lab, "h2"))
        code, out = run_and_act(spec, [(r"waiting up to elastic\.host_wait=120 s", back)], timeout=240)
        for thread in back.threads:
            thread.join(60)
    finally:
        bring_back(lab, "h2")
    assert code == 0, out[-4000:]
    waits = [line for line in out.splitlines() if "waiting up to elastic.host_wait=120 s" in line]
    assert len(waits) == 1 and waits[0].startswith("tfcluster: h2 not answering: 1 worker can start now, below "
                                                   "tasks.worker.min=2"), out[-3000:]
    assert "\x1b[" not in out  # off a terminal: plain lines, no countdown redrawn
    recorded = events_of(spec)
    assert [type(e) for e in recorded[:2]] == [ev.HostWait, ev.RunStart], recorded[:3]
    wait = recorded[0]
    assert (wait["hosts"], wait["have"], wait["need"], wait["wait"]) == (["h2"], 1, 2, 120.0), wait
    assert 119 <= wait["until"] - wait["time"] <= 121, wait
    assert recorded[1]["tasks"] == ["worker:0", "worker:1"]
    assert "[worker:1] up" in out
    # Goodput: the user waited from the preflight's wait, so elapsed starts there and that time
    # is waiting, not startup.
    status = tfcluster("status", "--json", str(spec))
    assert status.returncode == 0, status.stderr[-2000:]
    goodput = json.loads(status.stdout)["goodput"]
    waited = recorded[1]["time"] - wait["time"]
    assert waited > 1 and goodput["badput"]["waiting"] == pytest.approx(waited, abs=0.01), (goodput, waited)
    assert goodput["elapsed"] >= waited, goodput
    nothing_left(lab)


def test_on_a_terminal_the_wait_below_min_counts_down_from_its_record_event(lab, make_spec, tmp_path):
    """On a terminal (tmux) the preflight's wait below min is a line that counts down, the
    host_wait event's words as the panel and status say them; after elastic.host_wait the one
    error line, exit 1."""
    import subprocess

    from tests.support.cli import terminal_command
    from tests.support.prereq import require_tool

    require_tool("tmux", "tmux")
    spec = make_spec([PY, "-c", "print('up', flush=True)"], hosts=["h1", "h2"], tasks={"worker": {"count": 2, "min": 2}},
                     restart={"max_restarts": 0}, elastic={"host_wait": 12})
    sock = f"tfcluster-test-{os.getpid()}-{tmp_path.name}"  # (suites side by side share tmp_path names)
    command = terminal_command("up", spec) + "; echo TFCLUSTER-EXIT=$?; sleep 600"
    cut(lab, "h2")
    try:
        subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "up", "-x", "200", "-y", "30", command],
                       check=True, timeout=10)
        pattern = re.compile(r"waiting for 1 more host of worker \(min 2\): (\d+) s left of elastic\.host_wait=12 s "
                             r"\(h2 not answering\)")
        seen: list[int] = []

        def screen():
            text = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", "up"], capture_output=True,
                                  text=True, timeout=10).stdout
            seen.extend(int(m.group(1)) for m in pattern.finditer(text))
            return text

        wait_for(lambda: (screen(), len(set(seen)) >= 2)[1], 30, 0.3,
                 what="the countdown line at two different values", detail=lambda: f"seen {seen}:\n{screen()}")
        last = wait_for(lambda: (lambda s: s if "TFCLUSTER-EXIT=" in s else None)(screen()), 60, 0.5,
                        what="tfcluster up to end after elastic.host_wait")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
        bring_back(lab, "h2")
    assert "TFCLUSTER-EXIT=1" in last, last
    assert max(seen) <= 12 and min(seen) < max(seen), seen
    assert not pattern.search(last), last  # the countdown line went with the wait (transient)
    assert "h2 not answering after elastic.host_wait=12 s" in last, last
    nothing_left(lab)
