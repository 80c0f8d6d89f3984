"""``ssh.supervisor``: the detached run's supervisor and record live on a lab host; the launching
side exits entirely, and status/logs/down reach the run over SSH."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.waits import wait_for

from tests.support.cli import start_tfcluster, tfcluster

from .conftest import PY, cmdline, pids_in_netns

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(300)]

# Serves its TF port (the run becomes ready), prints progress, saves and exits 143 on SIGTERM.
# argv: steps [gate]: with a gate file, it finishes only once that file exists (at most 120 s),
# so a test can look at the running run however slow the machine.
TRAINER = (
    "import json,os,signal,socket,sys,time\n"
    "c=json.loads(os.environ['TF_CONFIG']); i=c['task']['index']\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(c['cluster']['worker'][i].rsplit(':',1)[1]))); s.listen()\n"
    "stop=[]; signal.signal(signal.SIGTERM, lambda *a: stop.append(1))\n"
    "print('tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 time=%.3f' % time.time(), socket.gethostname(), flush=True)\n"
    "for step in range(1, int(sys.argv[1]) + 1):\n"
    "    time.sleep(0.2)\n"
    "    print('tfcluster-step epoch=0 step=%d global_step=%d loss=%.4f accuracy=0.5000 time=%.3f' % (step, step, 1/step, time.time()), flush=True)\n"
    "    if stop: print('tfcluster-preempted global_step=%d' % step, flush=True); sys.exit(143)\n"
    "gate=sys.argv[2] if len(sys.argv) > 2 else None; t=time.time()\n"
    "while gate and not os.path.exists(gate) and time.time() - t < 120: time.sleep(0.1)\n"
    "print('tfcluster-result accuracy=0.9300 loss=0.1000 examples_per_sec=320.0', flush=True)\n"
)


def supervisors(spec: Path) -> list[int]:
    """Every detached supervisor process of this test's run on this machine (any namespace).
    Its spec copy lies under the test's own ``ssh.remote_dir`` (make_spec: beside the spec): two
    suites side by side (tests/race_hunt.sh) each have an sshtest run, and a test that took the
    other's supervisor for its own would count it, wait on it, or kill it."""
    own = f"{spec.parent / 'remote'}/sshtest/supervisor/cluster.yaml"
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmd = cmdline(int(entry.name))
            if "--supervise" in cmd and own in cmd:
                out.append(int(entry.name))
    return out


def test_supervisor_on_a_host_launcher_disconnects_run_completes(lab, make_spec, tmp_path):
    gate = tmp_path / "gate"
    # (TRAINER prints its records: the spec opts in to reading printed ones, watchdog.printed_progress,
    # so the run's accuracy and goodput come from them)
    spec = make_spec([PY, "-c", TRAINER, "30", str(gate)], hosts=["h1", "h2"], ssh={"supervisor": "h1"},
                     watchdog={"startup_timeout": 120, "stop_grace": 2, "printed_progress": True})
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "the supervisor runs on host h1 (ssh.supervisor)" in res.stderr
        run_id = re.search(r"^run (\S+) is running detached", res.stdout, re.M).group(1)
        assert f"tfcluster status {spec} --run {run_id}" in res.stdout  # the user's spec path, not the copy's
        # The launching side is gone entirely (subprocess.run returned); the supervisor runs in h1's
        # network namespace, nowhere else, and the record is there, not here.
        sup = supervisors(spec)
        assert len(sup) == 1 and sup[0] in pids_in_netns(lab.host("h1")), sup
        assert not (spec.parent / "runs").exists()
        record = tmp_path / "remote" / "sshtest" / "supervisor" / "runs" / "sshtest" / run_id
        assert (record / "events.jsonl").is_file()

        st = tfcluster("status", str(spec), "--json")
        assert st.returncode == 0, st.stderr
        data = json.loads(st.stdout)
        assert data["state"] == "running" and data["run_id"] == run_id
        assert {t["key"]: t["host"] for t in data["tasks"]} == {"worker:0": "h1", "worker:1": "h2"}
        gate.touch()

        follow = tfcluster("logs", str(spec), "-f", timeout=120)
        assert follow.returncode == 0, follow.stderr
        assert "[worker:1] tfcluster-result accuracy=0.9300 loss=0.1000 examples_per_sec=320.0" in follow.stdout
        assert re.search(r"^\[worker:1\] tfcluster-start .* h2$", follow.stdout, re.M)  # really ran on h2
        st = tfcluster("status", str(spec))
        assert st.returncode == 0 and f"run {run_id} (sshtest, ssh): succeeded" in st.stdout, st.stdout
        runs = tfcluster("runs", str(spec))
        # (the runs row ends with its goodput, after the accuracy)
        assert re.search(rf"^\s+{run_id}\s.*\ssucceeded\s+1\s+0\.9300\s+[0-9.]+ %$", runs.stdout, re.M), runs.stdout
        wait_for(lambda: not supervisors(spec), 30, what="the supervisor to exit")
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_down_reaches_the_remote_supervisor_which_stops_gracefully(lab, make_spec):
    spec = make_spec([PY, "-c", TRAINER, "900"], hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        down = tfcluster("down", str(spec), timeout=120)
        assert down.returncode == 0 and ": stopped" in down.stderr, down.stderr
        st = tfcluster("status", str(spec))
        assert st.returncode == 1 and "(sshtest, ssh): stopped" in st.stdout, st.stdout
        logs = tfcluster("logs", str(spec), "worker:1").stdout
        assert "tfcluster-preempted global_step=" in logs  # SIGTERM reached the task on h2: it saved
        assert not supervisors(spec)
        assert not [p for p in pids_in_netns(lab.host("h2")) if "tfcluster-start" in cmdline(p)]
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_supervisor_host_must_be_a_host_and_have_tfcluster(lab, make_spec):
    spec = make_spec([PY, "-c", TRAINER, "1"], hosts=["h1", "h2"], ssh={"supervisor": "h1", "python": "/bin/false"})
    res = tfcluster("up", str(spec), "--detach", timeout=120)
    assert res.returncode == 1
    assert res.stderr.startswith("tfcluster: error: host h1 (ssh.supervisor): tfcluster does not run there with "
                                 "/bin/false"), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_launcher_of_the_users_in_the_workdir_does_not_replace_the_remote_supervisor(lab, make_spec, tmp_path):
    """The supervisor host runs tfcluster in the tasks' workdir: a ``launcher/`` package of the
    user's there (a common name) must not run instead (``python -m launcher`` would import it)."""
    work = tmp_path / "userwork"
    (work / "launcher").mkdir(parents=True)
    (work / "launcher" / "__init__.py").write_text("raise SystemExit('the user launcher ran')\n")
    spec = make_spec([PY, "-c", TRAINER, "1"], hosts=["h1", "h2"], ssh={"supervisor": "h1", "workdir": str(work)})
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "the user launcher ran" not in res.stdout + res.stderr
        follow = tfcluster("logs", str(spec), "-f", timeout=120)
        assert follow.returncode == 0 and "the user launcher ran" not in follow.stdout + follow.stderr, follow.stderr
        st = tfcluster("status", str(spec))
        assert st.returncode == 0 and "(sshtest, ssh): succeeded" in st.stdout, st.stdout
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_sigkilled_remote_supervisor_tasks_stop_by_lease_status_says_lost(lab, make_spec):
    spec = make_spec([PY, "-c", TRAINER, "900"], hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        run_id = re.search(r"^run (\S+) is running detached", res.stdout, re.M).group(1)
        h2 = lab.host("h2")
        tasks_on_h2 = lambda: [p for p in pids_in_netns(h2) if "tfcluster-start" in cmdline(p)]  # noqa: E731
        assert tasks_on_h2()
        (sup,) = supervisors(spec)
        os.kill(sup, signal.SIGKILL)
        st = tfcluster("status", str(spec))
        assert st.returncode == 3, st.stdout + st.stderr
        assert f"run {run_id} (sshtest, ssh): supervisor lost" in st.stdout
        assert f"clean up: tfcluster down {spec} --run {run_id}" in st.stdout  # the user's path
        # Not unsupervised for long: the lease (ssh.lease 4 s) stops the task on h2.
        wait_for(lambda: not tasks_on_h2(), 30, what="the task on h2 to stop by its lease")
        down = tfcluster("down", str(spec), "--run", run_id, timeout=120)
        assert down.returncode == 0, down.stderr
        data = json.loads(tfcluster("status", str(spec), "--json").stdout)
        assert data["state"] == "stopped" and "supervisor was lost" in data["reason"], data
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_attach_over_ssh_then_ctrl_c_leaves_the_run_going(lab, make_spec):
    spec = make_spec([PY, "-c", TRAINER, "900"], hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        proc = start_tfcluster("attach", spec, stderr=subprocess.PIPE, new_session=False)
        try:
            timer = threading.Timer(60, proc.kill)
            timer.start()
            for line in proc.stdout:
                if line.startswith("[worker:1] tfcluster-step "):
                    break
            timer.cancel()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "detached; the run goes on on host h1" in err
        st = tfcluster("status", str(spec))
        assert st.returncode == 0 and "(sshtest, ssh): running" in st.stdout, st.stdout
        # the remote attach ends too (its channel is gone)
        wait_for(lambda: not [p for p in pids_in_netns(lab.host("h1")) if " attach " in cmdline(p)], 30,
                 what="the remote attach to exit")
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_without_ssh_supervisor_the_supervisor_stays_here_and_says_so(lab, make_spec):
    spec = make_spec([PY, "-c", TRAINER, "900"], hosts=["h1", "h2"])
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "the supervisor runs on this machine and holds the hosts' leases: keep it on and online" in res.stdout
        data = json.loads(tfcluster("status", str(spec), "--json").stdout)
        assert data["state"] == "running" and data["detached"], data
        sup = data["supervisor_pid"]
        assert sup not in pids_in_netns(lab.host("h1")) and (spec.parent / "runs").is_dir()  # here, not on h1
        down = tfcluster("down", str(spec), timeout=120)
        assert down.returncode == 0, down.stderr
        assert "tfcluster-preempted" in tfcluster("logs", str(spec), "worker:1").stdout
    finally:
        tfcluster("down", str(spec), timeout=120)


def test_foreground_up_with_ssh_supervisor_streams_from_the_host(lab, make_spec, tmp_path):
    spec = make_spec([PY, "-c", TRAINER, "5"], hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    res = tfcluster("up", str(spec), timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[worker:1] tfcluster-result accuracy=0.9300" in res.stdout
    assert "run succeeded after 1 attempt(s)" in res.stderr
    assert not (spec.parent / "runs").exists()  # the record is on h1
    assert (tmp_path / "remote" / "sshtest" / "supervisor" / "runs" / "sshtest" / "latest").exists()
