"""The ssh backend against real sshd hosts in network namespaces (see tests/labs/ssh.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import alive
import yaml

from tests.labs.ssh import GATEWAY

from tests.support.cli import tfcluster
from tests.support.waits import wait_for

from tests.support.ssh_helpers import SHOW, launch, finish, pidfiles, wait_gone, firewall, firewall_flush
from .conftest import PY, ROOT, cmdline, pids_in_netns, task_processes
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(240)]

def _lines(out: str, tag: str) -> list[list[str]]:
    return [line.split("|") for line in out.splitlines() if f"] {tag}|" in line or line.startswith(tag + "|")]


def test_tasks_run_on_their_hosts_with_tf_config_addresses(lab, make_spec):
    """(Two workers of the reference worker training with MultiWorkerMirroredStrategy over ssh to
    the end, each saying its task: test_ssh_state.py's
    test_sigkilled_worker_resumes_at_the_same_step_on_both_hosts_and_the_model_comes_back.)"""
    spec = make_spec([PY, "-c", SHOW], workers=2, env={"MYVAR": "hello"})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr
    rows = _lines(proc.stdout, "TASK")
    assert len(rows) == 2, proc.stdout
    by_task = {r[0].split("] ")[-1].split("|")[0]: r for r in rows}
    seen = {}
    for r in rows:
        key = r[1]
        seen[key] = r
    assert set(seen) == {"worker:0", "worker:1"}
    assert seen["worker:0"][2] == "h1" and seen["worker:1"][2] == "h2"  # really on each host (UTS ns)
    cluster = json.loads(seen["worker:0"][3])
    assert cluster == {"worker": [f"{lab.host('h1').address}:23456", f"{lab.host('h2').address}:23456"]}
    assert seen["worker:0"][5] == "hello"
    assert "/remote/sshtest/" in seen["worker:0"][4]
    plan = json.loads((spec.parent / "runs" / "sshtest" / "latest" / "plan.json").read_text())
    assert plan["cluster"]["worker"] == [  # held once (the compact plan.json)
        f"{lab.host('h1').address}:23456", f"{lab.host('h2').address}:23456"]
    # Output also kept in per-task local log files.
    logs = sorted((spec.parent / "runs" / "sshtest" / "latest" / "logs").glob("*.log"))
    assert [p.name for p in logs] == ["worker-0.log", "worker-1.log"]
    assert "TASK|worker:1|h2|" in logs[1].read_text()
    del by_task


def test_one_remote_shell_per_host_for_its_first_task(lab, make_spec):
    """A host's agent (preflight + port hold + probe) becomes its first task: no second shell.
    Each further task on a host costs one more (here worker:1 shares h1 with worker:0). (The
    state dir check rides on the agents too; fetching the final model after success is one more
    command on the chief's host, so it is off here.)"""
    spec = make_spec([PY, "-c", SHOW], workers=3, state={"fetch": "none"})
    plan = json.loads(tfcluster("plan", "--json", str(spec)).stdout)
    hosts = {f"{t['type']}:{t['index']}": t["host"] for t in plan["tasks"]}
    assert hosts == {"worker:0": "h1", "worker:1": "h1", "worker:2": "h2"}  # ranks in blocks
    before = {h: lab.remote_commands(lab.host(h)) for h in ("h1", "h2")}
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert sorted(r[1] for r in _lines(proc.stdout, "TASK")) == ["worker:0", "worker:1", "worker:2"]
    after = {h: lab.remote_commands(lab.host(h)) for h in ("h1", "h2")}
    assert {h: after[h] - before[h] for h in after} == {"h1": 2, "h2": 1}


def test_a_hosts_tasks_get_consecutive_ranks(lab, make_spec):
    """Ranks in blocks: 4 workers on 2 hosts run as worker:0, worker:1 on h1 and worker:2,
    worker:3 on h2 (each task reports the host it really ran on), so a ring crosses the network
    once per host; the cluster in TF_CONFIG lists them in that order."""
    spec = make_spec([PY, "-c", SHOW], workers=4, state={"fetch": "none"})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = {r[1]: r[2] for r in _lines(proc.stdout, "TASK")}
    assert ran == {"worker:0": "h1", "worker:1": "h1", "worker:2": "h2", "worker:3": "h2"}, ran
    rows = {r[1]: r for r in _lines(proc.stdout, "TASK")}
    h1, h2 = lab.host("h1").address, lab.host("h2").address
    assert json.loads(rows["worker:0"][3]) == {"worker": [f"{h1}:23456", f"{h1}:23457", f"{h2}:23456", f"{h2}:23457"]}


# ---------------------------------------------------------------- helpers

SLEEPER = "import os,time; print('ATTEMPT', os.environ['TFCLUSTER_RESTART_COUNT'], flush=True); time.sleep(120)"


# What tells "named at once" from a hang: the connection and probe deadlines are 3 s, and what
# they bound would otherwise wait for the kernel's SYN retries (about 127 s) or the watchdog's
# startup timeout. Not a speed figure: at load 10-12 (three suites side by side) one such `up`
# took 16.2 s; the four tests that use it took 12 s together at load 5-8.
HANG = 60


def _up_behind_firewall(spec: Path, host, rule: str) -> tuple[subprocess.CompletedProcess, float]:
    """`tfcluster up` while ``host`` drops what ``rule`` matches; (result, seconds taken)."""
    firewall(host, rule)
    try:
        started = time.monotonic()
        proc = tfcluster("up", str(spec))
        return proc, time.monotonic() - started
    finally:
        firewall_flush(host)


# ---------------------------------------------------------------- training


@pytest.mark.tf
def test_pss_over_ssh_worker_killed_is_restarted_alone_on_its_host(lab, make_spec):
    """ParameterServerStrategy across three hosts: chief, ps and two workers; a worker SIGKILLed
    on its host is relaunched alone there (a second remote start, through boot.py), rejoins, and
    training goes on; then Ctrl-C stops the servers on every host. (A PSS run trained to its end is
    tests/integration/test_pss.py's on local and test_slurm_faults.py's.)"""
    from tests.support.tfrun import cold, progress, run_and_act
    spec = make_spec(
        # 110 steps (27 s) left after the kill at step 10: a rejoin takes 6-9 s on a busy machine
        # (BENCHMARKS.md), and training goes on meanwhile; with 70 steps left the full suite at
        # load 13 ended the training before the restarted worker had rejoined.
        [PY, "-m", "worker", "--epochs", "3", "--steps-per-epoch", "40", "--step-delay", "0.25",
         "--progress-every", "5"],
        hosts=["h1", "h2", "h3"], strategy="parameter_server", tasks={"chief": 1, "worker": 2, "ps": 1},
        restart=cold(2), env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        ssh={"require": ["tensorflow", "tf_keras"]},
    )
    plan = json.loads(tfcluster("plan", "--json", str(spec)).stdout)
    where = {f"{t['type']}:{t['index']}": t["host"] for t in plan["tasks"]}
    assert len(set(where.values())) == 3, where  # really spread over the hosts

    def kill_worker1(_proc):
        pids = pidfiles(spec, 4)
        os.kill(pids["worker-1.0.pid"][1], signal.SIGKILL)

    code, out = run_and_act(spec, [(r"\[chief:0\] tfcluster-step epoch=0 step=10 ", kill_worker1),
                                   (r"\[chief:0\] tfcluster-worker_recovered task=worker:1 ", lambda p: None),
                                   (r"\[chief:0\] tfcluster-step ", lambda p: p.send_signal(signal.SIGINT))],
                            timeout=230)
    assert code == 130, out[-5000:]
    assert "worker:1 exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 2)" in out, out[-3000:]
    assert "restarting the whole group" not in out
    assert len(progress(out, "server", "worker:1")) == 2 and len(progress(out, "start", "chief:0")) == 1
    recovered = out.index("[chief:0] tfcluster-worker_recovered task=worker:1 ")
    assert progress(out[recovered:], "step", "chief:0"), out[-3000:]  # trained on with worker:1 back
    events = read_records(spec.parent / "runs/sshtest/latest")
    starts = [e["ssh_host"] for e in events if isinstance(e, ev.Start) and e["task"] == "worker:1"]
    assert starts == [where["worker:1"]] * 2  # relaunched on its own host
    pids = pidfiles(spec, 5)
    assert "worker-1.1.pid" in pids
    wait_gone([p for pair in pids.values() for p in pair], 15)


# ---------------------------------------------------------------- preflight


def test_host_with_sshd_down_is_named_and_nothing_starts(lab, make_spec):
    spec = make_spec([PY, "-c", SHOW], workers=3, hosts=["h1", "h2", "h3"])
    lab.stop_sshd(lab.host("h3"))
    try:
        started = time.monotonic()
        proc = tfcluster("up", str(spec))
        took = time.monotonic() - started
    finally:
        lab.restart_sshd(lab.host("h3"))
    assert proc.returncode == 1, proc.stderr
    assert f"host h3 (root@{lab.host('h3').address}:22): connection refused; start sshd there" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "host h1" not in proc.stderr and "host h2" not in proc.stderr  # only the failing host is named
    assert not (spec.parent / "remote").exists()  # nothing was started, nothing even uploaded
    assert "TASK|" not in proc.stdout
    assert took < HANG, took


def test_every_failing_host_is_named_with_its_own_reason(lab, make_spec, tmp_path):
    """One run, two bad hosts: a firewall eating SSH (timed out) and a key the host does not
    accept (auth failed); both named at once, with the fix, and nothing started anywhere."""
    h2 = lab.host("h2")
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    spec = make_spec([PY, "-c", SHOW], workers=3, hosts=["h1", "h2", "h3"], host_keys={"h3": {"key": str(stranger)}})
    proc, took = _up_behind_firewall(spec, h2, "tcp dport 22 drop")
    assert proc.returncode == 1, proc.stderr
    assert f"host h2 (root@{h2.address}:22): timed out after 3 s; check the address, firewall" in proc.stderr
    assert f"host h3 (root@{lab.host('h3').address}:22): authentication failed for user root; check hosts[h3].key" \
        in proc.stderr, proc.stderr
    assert "nothing was started: 2 of 3 hosts unreachable" in proc.stderr
    assert "host h1" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (spec.parent / "remote").exists() and "TASK|" not in proc.stdout
    assert took < HANG, took


def test_unknown_host_key_refused_by_default_and_accepted_with_opt_in(lab, make_spec, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(f"{lab.host('h1').address} {lab.host('h1').host_pubkey}\n")
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"known_hosts": str(kh)})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1
    line = [x for x in proc.stderr.splitlines() if "unknown host key" in x]
    assert len(line) == 1 and "host h2 " in line[0] and "ssh.trust_on_first_use: true" in line[0], proc.stderr
    assert "SHA256:" in line[0]
    assert kh.read_text().count("\n") == 1  # nothing was added silently

    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"known_hosts": str(kh), "trust_on_first_use": True})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert f"{lab.host('h2').address} {lab.host('h2').host_pubkey}" in kh.read_text()


def test_changed_host_key_is_refused_even_with_trust_on_first_use(lab, make_spec, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text(f"{lab.host('h1').address} {lab.host('h1').host_pubkey}\n"
                  f"{lab.host('h2').address} {lab.host('h1').host_pubkey}\n")  # wrong key for h2
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"known_hosts": str(kh), "trust_on_first_use": True})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1
    assert "host h2 " in proc.stderr and "HOST KEY MISMATCH" in proc.stderr and "ssh-keygen -R" in proc.stderr


def test_port_blocked_between_hosts_names_the_pair(lab, make_spec):
    h1, h2 = lab.host("h1"), lab.host("h2")
    spec = make_spec([PY, "-c", SHOW], workers=2)
    proc, took = _up_behind_firewall(spec, h1, f"ip saddr {h2.address} tcp dport 23456 drop")
    assert proc.returncode == 1
    assert f"host h2 cannot reach h1 {h1.address}:23456 (worker:0): timed out" in proc.stderr, proc.stderr
    assert "host h1 cannot reach" not in proc.stderr
    assert "TASK|" not in proc.stdout
    assert took < HANG, took


def test_port_blocked_on_a_ring_pair_names_it(lab, make_spec):
    """worker:2 (h3) receives its all-reduce ring chunks from worker:1 (h2): TF dials that pair,
    and neither task is the coordination leader (worker:0 on h1), so the preflight must probe it."""
    h2, h3 = lab.host("h2"), lab.host("h3")
    spec = make_spec([PY, "-c", SHOW], workers=3, hosts=["h1", "h2", "h3"])
    proc, took = _up_behind_firewall(spec, h2, f"ip saddr {h3.address} tcp dport 23456 drop")
    assert proc.returncode == 1
    assert f"host h3 cannot reach h2 {h2.address}:23456 (worker:1): timed out" in proc.stderr, proc.stderr
    assert proc.stderr.count("cannot reach") == 1, proc.stderr
    assert "TASK|" not in proc.stdout
    assert took < HANG, took


def test_a_pair_tensorflow_never_dials_is_not_probed(lab, make_spec):
    """worker:1 (h2) dials only worker:0 (leader, ring, broadcast parent); it never dials worker:2
    (h3), so a firewall between them does not stop the run (each task has port 23456 on its own
    host)."""
    h2, h3 = lab.host("h2"), lab.host("h3")
    spec = make_spec([PY, "-c", SHOW], workers=3, hosts=["h1", "h2", "h3"])
    proc, _ = _up_behind_firewall(spec, h3, f"ip saddr {h2.address} tcp dport 23456 drop")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cannot reach" not in proc.stderr
    assert proc.stdout.count("TASK|") == 3


def test_port_in_use_missing_module_and_python_are_reported(lab, make_spec):
    h1 = lab.host("h1")
    holder = subprocess.Popen(
        ["ip", "netns", "exec", h1.netns, PY, "-c",
         "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0',23456)); s.listen(); print('up',flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"require": ["no_such_module_xyz"]})
        proc = tfcluster("up", str(spec))
    finally:
        holder.kill()
        holder.wait(5)
    assert proc.returncode == 1
    assert f"port 23456 on host h1 is in use by pid {holder.pid} of user root ({PY} -c import socket" in proc.stderr, \
        proc.stderr
    assert "(worker:0); stop what holds it" in proc.stderr, proc.stderr
    assert "host h2: " in proc.stderr and "cannot import no_such_module_xyz" in proc.stderr

    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"python": "/nonexistent/python3"})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1
    assert "host h1: python '/nonexistent/python3' not found" in proc.stderr, proc.stderr


def test_a_host_whose_agent_never_answers_is_named_with_the_timeout_and_nothing_is_left(lab, make_spec, tmp_path):
    """h2's interpreter wrapper swallows the preflight's request line, so its agent waits for a
    request that never comes: a stalled host. Its reply timeout names the host, the time and
    the key to raise (it said "preflight could not run (timed out (TimeoutError))" before)."""
    stalled = tmp_path / "python-stalled"
    stalled.write_text(f'#!/bin/sh\nread -r _request\nexec {PY} "$@"\n')
    stalled.chmod(0o755)
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"preflight_timeout": 2},
                     host_keys={"h2": {"python": str(stalled)}})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "host h" in line]
    assert lines == ["tfcluster: error: host h2: the preflight agent did not answer within 2 s (ssh.preflight_timeout); "
                     "the host is overloaded or its Python is stalled: check its load, or raise ssh.preflight_timeout"], \
        proc.stderr
    assert "no task was started" in proc.stderr
    # The silent agent ends with its channel: nothing of the run is left on any host.
    wait_for(lambda: not any(task_processes(lab).values()), 10,
             what="the preflight agents to end (a process other than sshd on a lab host)")


# ---------------------------------------------------------------- failures and lifecycle


def test_different_package_versions_between_hosts_are_refused(lab, make_spec, tmp_path):
    """`ssh.require` modules must have one version everywhere (as TensorFlow must). Each host gets
    its own interpreter wrapper, whose PYTHONPATH holds a different version of one package."""
    pythons = {}
    for host, version in (("h1", "1.0"), ("h2", "2.0")):
        site = tmp_path / f"site-{host}"
        (site / "tfcs_fakepkg").mkdir(parents=True)
        (site / "tfcs_fakepkg" / "__init__.py").write_text("")
        dist = site / f"tfcs_fakepkg-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tfcs_fakepkg\nVersion: {version}\n")
        wrapper = tmp_path / f"python-{host}"
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {PY} "$@"\n')
        wrapper.chmod(0o755)
        pythons[host] = str(wrapper)
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"require": ["json", "tfcs_fakepkg"]},
                     host_keys={h: {"python": py} for h, py in pythons.items()})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1, proc.stderr
    assert ("tfcs_fakepkg versions differ between hosts (1.0 on h1; 2.0 on h2); install the same version "
            "everywhere") in proc.stderr, proc.stderr
    assert "TASK|" not in proc.stdout and "Traceback" not in proc.stderr


def test_sigkill_remote_worker_restarts_group_to_success(lab, make_spec):
    script = ("import os,time; n=int(os.environ['TFCLUSTER_RESTART_COUNT']); print('ATTEMPT', n, flush=True); "
              "time.sleep(120 if n == 0 else 0)")
    spec = make_spec([PY, "-c", script], workers=2, restart={"max_restarts": 1})
    proc = launch(spec)
    try:
        pids = pidfiles(spec, 2)
        os.kill(pids["worker-1.0.pid"][1], signal.SIGKILL)  # the task itself, on h2
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 0, err
    assert "worker:1 failed: killed by SIGKILL" in err or "SIGKILL" in err, err
    assert "restarting the whole group" in err
    assert out.count("ATTEMPT 1") == 2
    events = read_records(spec.parent / "runs/sshtest/latest")
    assert any(isinstance(e, ev.Exit) and e["task"] == "worker:1" and e["code"] == 137 for e in events)
    wait_gone([p for pair in pids.values() for p in pair], 10)


def test_sigkill_launcher_takes_remote_tasks_down(lab, make_spec):
    spec = make_spec([PY, "-c", SLEEPER], workers=2)
    proc = launch(spec)
    try:
        pids = pidfiles(spec, 2)
        everything = [p for pair in pids.values() for p in pair]
        assert all(alive(p) for p in everything)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        took = wait_gone(everything, 15)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert took < 10
    # Nothing of the run is left on any host: the quiet shell that waits on each wrapper (to report
    # its exit status, launcher/backends/ssh/commands.py quiet) ends just after it, when next
    # scheduled: on a busy machine, some ms after the tasks.
    def left():
        return [f"{h.name} {p}: {cmdline(p)[:120]!r}" for h in lab.hosts for p in pids_in_netns(h)
                if "sshtest" in cmdline(p)]
    wait_for(lambda: not left(), 5, what="nothing of the run left on any host", detail=lambda: "; ".join(left()))


def test_network_partition_expires_the_lease(lab, make_spec):
    spec = make_spec([PY, "-c", SLEEPER], workers=2, ssh={"lease": 3})
    h2 = lab.host("h2")
    proc = launch(spec)
    try:
        pids = pidfiles(spec, 2)
        firewall(h2, f"ip saddr {GATEWAY} drop")  # the launcher can no longer reach h2
        took = wait_gone(list(pids["worker-1.0.pid"]), 20)
        # The launcher, hearing nothing from h2 for as long, stops the group itself: only h2 is
        # named (h1 still hears the launcher; test_ssh_partition.py checks the report).
        code, _, err = finish(proc, timeout=30)
    finally:
        firewall_flush(h2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert took < 3 + 2 + 3  # lease + grace + slack
    assert code == 1 and "worker:1 failed: h2: no word for " in err and "h1: no word" not in err, err


def test_shell_injection_values_are_inert(lab, make_spec, tmp_path):
    marker = tmp_path / "pwned"
    evil = f"x; touch {marker}"
    # Path components cannot hold '/': these would touch relative to the remote shell's cwd.
    workdir = tmp_path / "w d;touch tfcs-pwned3;$(touch tfcs-pwned4)`touch tfcs-pwned5`"
    workdir.mkdir()
    home = Path.home()
    script = "import os,sys; print('ARGS', repr(sys.argv[1:]), repr(os.environ['EVIL']), os.getcwd(), sep='|', flush=True)"
    spec = make_spec(
        [PY, "-c", script, evil, f"$(touch {marker}2)", f"`touch {marker}5`", "'", '"'],
        workers=2, env={"EVIL": evil, "API_TOKEN": "s3cr3t-value"},
        ssh={"workdir": str(workdir), "remote_dir": str(tmp_path / "r;touch tfcs-pwned6")},
    )
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|") for line in proc.stdout.splitlines() if "] ARGS|" in line]
    assert len(rows) == 2
    for row in rows:
        assert row[1] == repr([evil, f"$(touch {marker}2)", f"`touch {marker}5`", "'", '"'])
        assert row[2] == repr(evil)
        assert row[3] == str(workdir)
    assert not list(tmp_path.glob("pwned*"))
    for where in (home, tmp_path, workdir, ROOT):
        assert not list(where.glob("tfcs-pwned*"))
    # The secret reaches the task but never the record or the launcher's messages.
    run = spec.parent / "runs" / "sshtest" / "latest"
    for path in [run / "events.jsonl", run / "plan.json", run / "launcher.json"]:
        assert "s3cr3t-value" not in path.read_text()
    assert "s3cr3t-value" not in proc.stderr


def test_down_stops_a_runs_remote_tasks(lab, make_spec):
    """``tfcluster down`` asks the launcher to stop; its tasks on every host go away."""
    spec = make_spec([PY, "-c", SLEEPER], workers=2)
    proc = launch(spec)
    try:
        pids = pidfiles(spec, 2)
        everything = [p for pair in pids.values() for p in pair]
        res = tfcluster("down", str(spec), timeout=60)
        assert res.returncode == 0, res.stderr
        wait_gone(everything, 10)
        code, _out, err = finish(proc, 30)
        assert code == 130, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_backend_down_removes_tasks_left_by_a_dead_launcher(lab, make_spec):
    """Tasks whose launcher is gone but whose lease has not expired yet (a frozen laptop):
    down() finds them from the record and stops them, verified by pid."""
    from launcher.backends.ssh.backend import SSHBackend
    from launcher.ui.console import Console
    from launcher.backends import RecordedRun
    from launcher.backends.base import StartRequest
    from launcher.app.up import plan_for
    from launcher.record.writer import RunRecord
    from launcher.loader.load import load_spec

    spec = make_spec([PY, "-c", SLEEPER], workers=2, ssh={"lease": 60})
    loaded = load_spec(spec)
    plan = plan_for(loaded.spec)
    record = RunRecord(spec.parent / "runs", plan)
    backend = SSHBackend.from_spec(loaded, record)
    try:
        backend.hosts.probe(plan)
        told = {"TFCLUSTER_RESTART_COUNT": "0", "TFCLUSTER_RUN_ID": record.run_id}
        handles = [backend.tasks.start(StartRequest(t, told), lambda k, line: None) for t in plan.tasks]
        pids = pidfiles(spec, 2)
        info = {"tasks": {h.key: h.info().to_json() for h in handles}}
        assert info["tasks"]["worker:1"]["ssh_host"] == "h2"
        other = SSHBackend.from_spec(loaded, None)
        assert other.hosts.down(RecordedRun(record.dir, info), Console()) is True
        wait_gone([p for pair in pids.values() for p in pair], 10)
        end = time.monotonic() + 10
        while any(h.poll() is None for h in handles) and time.monotonic() < end:
            time.sleep(0.05)
        assert [h.poll() for h in handles] == [128 + signal.SIGTERM] * 2
        # A second down finds nothing to stop.
        assert SSHBackend.from_spec(loaded, None).hosts.down(RecordedRun(record.dir, info), Console()) is False
    finally:
        backend.close()


# ---------------------------------------------------------------- addresses, sync and setup


def test_proxy_jump_reaches_a_host_the_launcher_cannot(lab, make_spec, tmp_path):
    """h2 drops everything from this machine; with proxy_jump through h1 the run still works."""
    h1, h2 = lab.host("h1"), lab.host("h2")
    spec = make_spec([PY, "-c", SHOW], workers=2)
    data = yaml.safe_load(spec.read_text())
    data["hosts"][1]["proxy_jump"] = f"root@{h1.address}"
    spec.write_text(yaml.safe_dump(data))
    firewall(h2, f"ip saddr {GATEWAY} drop")
    try:
        proc = tfcluster("up", str(spec))
    finally:
        firewall_flush(h2)
    assert proc.returncode == 0, proc.stderr
    assert "|worker:1|h2|" in proc.stdout


def test_sync_and_setup_run_once_per_host_before_tasks(lab, make_spec, tmp_path):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "hello.py").write_text("import os; print('HELLO', open('setup.txt').read().strip(), flush=True)\n")
    spec = make_spec([PY, "pkg/hello.py"], workers=2, workdir=str(project),
                     ssh={"workdir": None, "sync": ["pkg"], "setup": ["hostname > setup.txt", "true"]})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if "HELLO" in line)
    # Both hosts share this machine's disk, so the last setup wins the file; each saw a synced copy.
    assert len(lines) == 2
    work = spec.parent / "remote" / "sshtest" / "work"
    assert (work / "pkg" / "hello.py").is_file() and (work / "setup.txt").read_text().strip() in ("h1", "h2")


def test_failing_setup_names_host_and_command_and_starts_nothing(lab, make_spec):
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"setup": ["test \"$(hostname)\" != h2 || { echo broken >&2; exit 3; }"]})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1
    assert "host h2: ssh.setup[0]" in proc.stderr and "exited 3: broken" in proc.stderr, proc.stderr
    assert "host h1: ssh.setup" not in proc.stderr
    assert "TASK|" not in proc.stdout
