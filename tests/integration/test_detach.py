"""``up --detach`` and the commands that reach a detached run (status, logs, attach, down, runs),
with plain Python tasks on the local backend. The launching terminal is a real tmux session
that is killed; the supervisor is a real process (SIGKILLed in one test). And one detached run of
real TensorFlow workers (last): ``down`` saves the step they agree on, the next ``up`` resumes there."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import ROOT, start_tfcluster, terminal_command, tfcluster
from tests.support.prereq import require_tool
from tests.support.processes import pids_with_env
from tests.support.specs import script_spec
from tests.support.tfrun import assert_no_processes, progress, recorded, run_dir, up, write_spec
from tests.support.waits import wait_for

pytestmark = pytest.mark.integration

# Serves its TF port (so the run becomes ready), prints progress lines like the worker, and on
# SIGTERM saves at the next step and exits 143 (the worker's graceful preemption). With GATE
# set it finishes only once that file exists (at most 120 s): a test can look at the running
# run however slow the machine is.
TRAINER = """\
    import json, os, signal, socket, sys, time
    conf = json.loads(os.environ["TF_CONFIG"])
    i = conf["task"]["index"]
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(conf["cluster"]["worker"][i].rsplit(":", 1)[1]))); s.listen()
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    print("tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 time=%.3f" % time.time(), flush=True)
    steps = int(os.environ.get("STEPS", "20"))
    for step in range(1, steps + 1):
        time.sleep(0.2)
        print("tfcluster-step epoch=0 step=%d global_step=%d loss=%.4f accuracy=%.4f time=%.3f"
              % (step, step, 1 / step, 1 - 1 / (step + 1), time.time()), flush=True)
        if stop:
            open("saved-%d" % i, "w").write(str(step))
            print("tfcluster-preempted global_step=%d" % step, flush=True)
            sys.exit(143)
    started = time.time()
    while os.environ.get("GATE") and not os.path.exists(os.environ["GATE"]) and time.time() - started < 120:
        time.sleep(0.1)
    print("tfcluster-result accuracy=0.9100 loss=0.2000 examples_per_sec=320.0", flush=True)
"""


def _spec(tmp_path: Path, steps: int, gate: Path | None = None) -> Path:
    env = f"{{STEPS: '{steps}', GATE: '{gate}'}}" if gate else f"{{STEPS: '{steps}'}}"
    # (TRAINER prints its records: the spec opts in to reading printed ones, watchdog.printed_progress)
    return script_spec(tmp_path, TRAINER, extra=f"env: {env}\n", watchdog="{stop_grace: 5, printed_progress: true}")


def status_json(path: Path) -> tuple[int, dict]:
    res = tfcluster("status", str(path), "--json")
    return res.returncode, json.loads(res.stdout)


def supervisor_pid(tmp_path: Path) -> int:
    info = json.loads((tmp_path / "runs" / "t" / "latest" / "launcher.json").read_text())
    return int(info["pid"])


def detach(path: Path) -> subprocess.CompletedProcess:
    res = tfcluster("up", str(path), "--detach", timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def _cleanup(tmp_path: Path) -> None:
    """Whatever a failed test left: the run's supervisor and tasks."""
    latest = tmp_path / "runs" / "t" / "latest"
    if latest.exists():
        tfcluster("down", str(tmp_path / "cluster.yaml"), timeout=60)
        run_id = latest.resolve().name
        for pid in pids_with_env("TFCLUSTER_RUN_ID", run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def tmux():
    tool = require_tool("tmux", "tmux")
    sock = f"tfc-detach-{os.getpid()}"
    yield lambda *args: subprocess.run([tool, "-L", sock, *args], capture_output=True, text=True, timeout=30)
    subprocess.run([tool, "-L", sock, "kill-server"], capture_output=True, timeout=30)


def test_detach_in_a_killed_tmux_session_then_status_logs_runs(tmp_path, tmux):
    gate = tmp_path / "gate"
    path = _spec(tmp_path, steps=40, gate=gate)
    out = tmp_path / "terminal.txt"
    try:
        # The terminal: `up --detach` in a tmux session, which is killed once it has returned.
        cmd = f"{sys.executable} -m launcher up {path} --detach > {out} 2>&1; echo EXIT=$? >> {out}; sleep 600"
        res = tmux("new-session", "-d", "-s", "launch", "-c", str(ROOT), cmd)
        assert res.returncode == 0, res.stderr
        wait_for(lambda: "EXIT=" in (out.read_text() if out.exists() else ""), 90, what="up --detach to return")
        text = out.read_text()
        assert "EXIT=0" in text, text
        run_id = re.search(r"^run (\S+) is running detached \(supervisor pid (\d+)\)", text, re.M).group(1)
        assert f"tfcluster status {path} --run {run_id}" in text and f"tfcluster down {path} --run {run_id}" in text
        assert "[worker:0] tfcluster-start" in text  # output up to "every task is ready" came to the terminal
        tmux("kill-server")  # the terminal is gone: SIGHUP to everything in its session

        pid = supervisor_pid(tmp_path)
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[3]) == pid and int(stat[4]) == 0  # leads its own session, no controlling terminal
        ignored = int(re.search(r"^SigIgn:\s*([0-9a-f]+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1), 16)
        assert ignored & (1 << (signal.SIGHUP - 1))
        # its output goes to the run dir, never to a terminal
        targets = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in ("0", "1", "2")}
        assert targets == {"/dev/null", str(tmp_path / "runs" / "t" / run_id / "supervisor.log")}, targets

        time.sleep(1.0)
        code, st = status_json(path)
        assert code == 0 and st["state"] == "running" and st["run_id"] == run_id and st["detached"], st
        rows = {t["key"]: t for t in st["tasks"]}
        assert set(rows) == {"worker:0", "worker:1"} and all(r["state"] == "running" for r in rows.values())
        w0 = rows["worker:0"]
        assert w0["step"] >= 1 and 0 <= w0["accuracy"] <= 1 and abs(w0["loss"] - 1 / w0["step"]) < 1e-3, w0
        # 64 examples every 0.2 s sleep: at most 320/s, and more than half of that
        assert 160 < w0["examples_per_sec"] <= 325, w0
        gate.touch()

        follow = tfcluster("logs", str(path), "-f", timeout=90)  # until the run ends
        assert follow.returncode == 0, follow.stderr
        lines = follow.stdout.splitlines()
        assert "[worker:1] tfcluster-result accuracy=0.9100 loss=0.2000 examples_per_sec=320.0" in lines
        steps0 = [int(m.group(1)) for m in map(re.compile(r"\[worker:0\] tfcluster-step epoch=0 step=(\d+) ").match,
                                                lines) if m]
        assert steps0 == list(range(1, 41))  # every line, once, in order
        one = tfcluster("logs", str(path), "worker:1", "--tail", "2")
        assert one.stdout.splitlines()[-1] == "tfcluster-result accuracy=0.9100 loss=0.2000 examples_per_sec=320.0"
        assert len(one.stdout.splitlines()) == 2

        code, st = status_json(path)
        assert code == 0 and st["state"] == "succeeded" and st["final_accuracy"] == 0.91, st
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
                 30, what="the supervisor to exit")
        runs = tfcluster("runs", str(path))
        row = [l for l in runs.stdout.splitlines() if l.strip().startswith(run_id)]
        assert row and re.search(r"\bsucceeded\s+1\s+0\.9100\s+(<=)?\d+\.\d %$", row[0]), runs.stdout  # (then its goodput)
        assert "supervisor.log" in os.listdir(tmp_path / "runs" / "t" / run_id)
        assert "run succeeded after 1 attempt(s)" in (tmp_path / "runs" / "t" / run_id / "supervisor.log").read_text()
    finally:
        _cleanup(tmp_path)


def test_sigkilled_supervisor_is_reported_lost_exit_3_and_down_cleans_up(tmp_path):
    path = _spec(tmp_path, steps=600)
    try:
        detach(path)
        run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
        os.kill(supervisor_pid(tmp_path), signal.SIGKILL)
        res = tfcluster("status", str(path))
        assert res.returncode == 3, res.stdout + res.stderr
        assert f"run {run_id} (t, local): supervisor lost" in res.stdout
        assert f"clean up: tfcluster down {path} --run {run_id}" in res.stdout
        # The tasks do not run on unsupervised: their lifeline (the supervisor's pipe) stopped them.
        wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 20, what="the tasks to stop with the lifeline")
        code, st = status_json(path)
        assert code == 3 and st["state"] == "supervisor lost" and st["still_running"] == [], st
        assert {t["state"] for t in st["tasks"]} == {"gone"}
        down = tfcluster("down", str(path))
        assert down.returncode == 0, down.stderr
        code, st = status_json(path)
        assert code == 1 and st["state"] == "stopped" and "supervisor was lost" in st["reason"], st
    finally:
        _cleanup(tmp_path)


def test_down_stops_a_detached_run_gracefully_and_attach_ctrl_c_leaves_it_going(tmp_path):
    path = _spec(tmp_path, steps=600)
    try:
        detach(path)
        run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
        attach = start_tfcluster("attach", path, stderr=subprocess.PIPE, new_session=False)
        try:
            # live task lines arrive while attached
            seen = []
            # A silent attach must not hang the test: the timer kills it, which ends the read.
            timer = threading.Timer(30, attach.kill)
            timer.start()
            try:
                for line in attach.stdout:
                    seen.append(line)
                    if re.match(r"\[worker:1\] tfcluster-step ", line):
                        break
            finally:
                timer.cancel()
            assert any(re.match(r"\[worker:1\] tfcluster-step ", l) for l in seen), \
                f"no worker:1 step line within 30 s of attaching: {seen[-20:]}"
            attach.send_signal(signal.SIGINT)
            _, err = attach.communicate(timeout=30)
        finally:
            if attach.poll() is None:
                attach.kill()
        assert attach.returncode == 0, err
        assert f"detached from run {run_id}; it goes on" in err
        code, st = status_json(path)
        assert code == 0 and st["state"] == "running", st

        down = tfcluster("down", str(path), timeout=90)
        assert down.returncode == 0 and f"run {run_id}: stopped" in down.stderr, down.stderr
        wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 20, what="every process of the run to exit")
        code, st = status_json(path)
        assert code == 1 and st["state"] == "stopped", st
        # graceful: both tasks saved at a step (SIGTERM, not SIGKILL) and said so
        saved = [int((tmp_path / f"saved-{i}").read_text()) for i in (0, 1)]
        assert all(s >= 1 for s in saved)
        log = tfcluster("logs", str(path), "worker:0").stdout
        assert f"tfcluster-preempted global_step={saved[0]}" in log
        assert "interrupted; every task stopped" in (tmp_path / "runs" / "t" / run_id / "supervisor.log").read_text()
    finally:
        _cleanup(tmp_path)


# TRAINER with epochs of 10 steps, as the worker prints them (the panel's epoch and in-epoch bar).
EPOCH_TRAINER = TRAINER.replace(
    'global_batch=64 time=%.3f" % time.time()',
    'global_batch=64 epochs=50 steps_per_epoch=10 time=%.3f" % time.time()').replace(
    """    for step in range(1, steps + 1):
        time.sleep(0.2)
        print("tfcluster-step epoch=0 step=%d global_step=%d loss=%.4f accuracy=%.4f time=%.3f"
              % (step, step, 1 / step, 1 - 1 / (step + 1), time.time()), flush=True)""",
    """    for step in range(1, steps + 1):
        time.sleep(0.2)
        print("tfcluster-step epoch=%d step=%d global_step=%d loss=%.4f accuracy=%.4f time=%.3f"
              % ((step - 1) // 10, (step - 1) % 10 + 1, step, 1 / step, 1 - 1 / (step + 1), time.time()), flush=True)
        if step % 10 == 0:
            print("tfcluster-epoch epoch=%d loss=%.4f accuracy=%.4f" % (step // 10, 1 / step, 0.5), flush=True)""")
# a panel row: task, host, state, attempt, epoch i/N, the in-epoch bar then i/10, global step
PANEL_ROW = re.compile(r"^(worker:[01])\s+localhost\s+training\s+1\s+(\d+)/50\s+\S*\s*(\d+)/10\s+(\d+)\s")


def _panel_rows(screen: str) -> dict[str, tuple[int, int, int]]:
    """key -> (epoch, step in epoch, global step) of each task row on the screen."""
    rows = {}
    for line in screen.splitlines():
        m = PANEL_ROW.match(line.strip())
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    return rows


def test_attach_in_a_terminal_shows_the_live_panel_and_ctrl_c_leaves_the_run_going(tmp_path, tmux):
    assert EPOCH_TRAINER.count("epochs=50") == 1 and "tfcluster-epoch" in EPOCH_TRAINER  # (the replaces applied)
    path = script_spec(tmp_path, EPOCH_TRAINER, extra="env: {STEPS: '500'}\n",
                       watchdog="{stop_grace: 5, printed_progress: true}")  # (it prints its records)
    try:
        detach(path)
        run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
        wait_for(lambda: min(t["global_step"] or 0 for t in status_json(path)[1]["tasks"]) >= 12, 30, interval=0.5,
                 what="both tasks past their first epoch")
        cmd = terminal_command("attach", path) + "; echo ATTACH-EXIT=$?; sleep 600"
        tmux("new-session", "-d", "-x", "160", "-y", "45", "-s", "at", cmd)

        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", "at").stdout

        first: dict = {}
        wait_for(lambda: len(first.update(_panel_rows(screen())) or first) == 2, 30,
                 what="the live panel with a row per task")
        shown = screen()
        assert "attached to run " + run_id in shown and f"run dir {tmp_path / 'runs' / 't' / run_id}" in shown, shown
        assert sum(line.strip().startswith(("worker:0 ", "worker:1 ")) for line in shown.splitlines()) == 2, shown
        for key, (epoch, step, global_step) in first.items():
            # replayed from the record: already past epoch 1, and the figures agree with each other
            assert epoch >= 2 and 1 <= step <= 10 and global_step == (epoch - 1) * 10 + step, (key, shown)
        # it follows the run: the rows move on
        later: dict = {}
        wait_for(lambda: later.update(_panel_rows(screen())) or
                 (len(later) == 2 and all(later[k][2] >= first[k][2] + 5 for k in first)), 30,
                 what="the rows to advance")
        # (its printed step lines feed the rows, printed_progress: on, and, being its output too,
        # may show above them: a task's output is shown as it is, docs/concepts/trust.md)

        tmux("send-keys", "-t", "at", "C-c")
        wait_for(lambda: "ATTACH-EXIT=" in screen(), 20, what="attach to return after Ctrl-C")
        after = screen()
        assert "ATTACH-EXIT=0" in after and f"detached from run {run_id}; it goes on" in after, after
        code, st = status_json(path)
        assert code == 0 and st["state"] == "running", st
        steps = {t["key"]: t["global_step"] for t in st["tasks"]}
        wait_for(lambda: all(t["global_step"] > steps[t["key"]] for t in status_json(path)[1]["tasks"]), 20,
                 interval=0.5, what="the run to go on training after the detach")
        # status's rows are the panel's: epoch/step agree with the global step
        for t in status_json(path)[1]["tasks"]:
            assert t["global_step"] == (t["epoch"] - 1) * 10 + t["step"], t
        down = tfcluster("down", str(path), timeout=90)
        assert down.returncode == 0 and f"run {run_id}: stopped" in down.stderr, down.stderr
        wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 20, what="every process of the run to exit")
    finally:
        _cleanup(tmp_path)


def test_second_up_is_refused_naming_the_running_run(tmp_path):
    path = _spec(tmp_path, steps=600)
    try:
        detach(path)
        run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
        again = tfcluster("up", str(path), "--detach")
        assert again.returncode == 1
        errors = [l for l in again.stderr.splitlines() if l.startswith("tfcluster: error:")]
        assert errors == [f"tfcluster: error: run {run_id} of t is still running (supervisor pid "
                          f"{supervisor_pid(tmp_path)}); see `tfcluster status {path}`, stop it with "
                          f"`tfcluster down {path}`, or start another anyway with --force"], again.stderr
        assert (tmp_path / "runs" / "t" / "latest").resolve().name == run_id
        forced = tfcluster("up", str(path), "--detach", "--force")  # past the refusal: the preflight finds the ports taken
        assert forced.returncode == 1 and re.search(r"is in use by pid \d+ of user \S+ \(.*\) \(task worker:0\)", forced.stderr), \
            forced.stderr  # (the holder: the running run's task)
    finally:
        _cleanup(tmp_path)


def test_terminal_closed_before_every_task_is_ready_stops_the_run(tmp_path, tmux):
    # The tasks take 60 s to open their ports: the terminal goes away while `up --detach` waits.
    path = script_spec(tmp_path, "import time\nprint('warming up', flush=True)\ntime.sleep(60)\n"
                       + textwrap.dedent(TRAINER),
                       watchdog="{stop_grace: 2, startup_timeout: 120}")
    out = tmp_path / "terminal.txt"
    try:
        cmd = f"{sys.executable} -m launcher up {path} --detach > {out} 2>&1; echo EXIT=$? >> {out}"
        assert tmux("new-session", "-d", "-s", "launch", "-c", str(ROOT), cmd).returncode == 0
        wait_for(lambda: out.exists() and out.read_text().count("warming up") == 2, 60, what="both tasks to start")
        run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
        tmux("kill-server")  # SIGHUP: the foreground hands the stop to the supervisor, as Ctrl-C would
        wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 30, what="the run to stop")
        code, st = status_json(path)
        assert code == 1 and st["state"] == "stopped", st
        assert "running detached" not in out.read_text()
    finally:
        _cleanup(tmp_path)


def test_problem_before_ready_fails_in_the_foreground_with_its_one_line(tmp_path):
    import socket

    path = _spec(tmp_path, steps=5)
    port = json.loads(tfcluster("plan", str(path), "--json").stdout)["tasks"][1]["port"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        res = tfcluster("up", str(path), "--detach")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tfcluster: error: port {port} on localhost is in use by pid "
                                                   f"{os.getpid()} of user {pwd.getpwuid(os.getuid()).pw_name} ("), \
        res.stderr  # (this test holds it)
    assert lines[0].endswith("(task worker:1); stop what holds it or change ports.base in the spec"), res.stderr
    assert not (tmp_path / "runs").exists()
    assert tfcluster("up", str(tmp_path / "nope.yaml"), "--detach").returncode == 2


def test_run_that_fails_before_ready_exits_like_a_foreground_up(tmp_path):
    path = script_spec(tmp_path, "import sys; print('bad', flush=True); sys.exit(3)\n")
    res = tfcluster("up", str(path), "--detach")
    assert res.returncode == 1, res.stdout + res.stderr
    # Whichever worker exits first fails the attempt, and the other is killed at once, maybe
    # before it printed (a loaded machine starts it late): the failed one's line is shown.
    failed = re.search(r"(worker:\d) failed: exit code 3", res.stderr)
    assert failed and f"[{failed.group(1)}] bad" in res.stdout, res.stdout + res.stderr
    assert "running detached" not in res.stdout
    code, st = status_json(path)
    assert code == 1 and st["state"] == "failed", st


def test_logs_by_attempt_and_status_of_a_foreground_run(tmp_path):
    path = script_spec(tmp_path, """\
        import json, os, sys
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
        for i in range(3):
            print("attempt", attempt, "line", i, flush=True)
        if index == 1 and attempt == 0:
            os.kill(os.getpid(), 9)
    """, extra="restart: {max_restarts: 1}\n")
    assert tfcluster("up", str(path)).returncode == 0
    first = tfcluster("logs", str(path), "worker:1", "--attempt", "1").stdout.splitlines()
    second = tfcluster("logs", str(path), "worker:1", "--attempt", "2").stdout.splitlines()
    assert first == [f"attempt 0 line {i}" for i in range(3)], first
    assert second == [f"attempt 1 line {i}" for i in range(3)], second
    both = tfcluster("logs", str(path), "--attempt", "2").stdout.splitlines()
    assert sorted(both) == sorted(f"[worker:{k}] attempt 1 line {i}" for k in (0, 1) for i in range(3)), both
    assert tfcluster("logs", str(path), "worker:0", "--tail", "1").stdout == "attempt 1 line 2\n"
    missing = tfcluster("logs", str(path), "--attempt", "3")
    assert missing.returncode == 1 and "has no attempt 3; attempts: 1, 2" in missing.stderr
    code, st = status_json(path)
    assert code == 0 and st["state"] == "succeeded" and st["attempts"] == 2 and not st["detached"], st
    assert {t["key"]: t["restarts"] for t in st["tasks"]} == {"worker:0": 1, "worker:1": 1}


# ---------------------------------------------------------------- with TensorFlow

# 90 steps: after step 10, 80 for status and down, two CLI starts, to land in. At 0.05 s a step
# that was 4-6 s, and in three suites run side by side at load 10-12 the training ended before
# `down` came (every worker logged step 90; the outcome: interrupted, nothing saved). At 1 s a step
# the window is 80 s; the resumed run, which needs no window, goes at full speed.
CUSTOM = "python -m worker --loop custom --epochs 3 --steps-per-epoch 30 --step-delay {delay} --progress-every 5"


@pytest.mark.tf
def test_down_of_a_detached_tf_run_saves_and_the_next_up_resumes(tmp_path, tfds_dir):
    """A detached real TensorFlow run: ``down`` stops it through its supervisor with graceful
    preemption (zero steps lost), and the next ``up`` resumes at the saved step."""
    spec = write_spec(tmp_path, tfds_dir, CUSTOM.format(delay=1))
    spec.write_text(spec.read_text().replace("stop_grace: 3", "stop_grace: 30"))
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "is running detached" in res.stdout
        log = run_dir(spec) / "logs" / "worker-0.progress"  # (its records: the control channel's)
        wait_for(lambda: log.exists() and re.search(r"tfcluster-step epoch=0 step=10 ", log.read_text()), 180,
                 what="worker:0 at step 10")
        st = json.loads(tfcluster("status", str(spec), "--json").stdout)
        assert st["state"] == "running" and {t["state"] for t in st["tasks"]} == {"running"}, st
        w0 = [t for t in st["tasks"] if t["key"] == "worker:0"][0]
        assert w0["global_step"] >= 10 and 0 <= w0["accuracy"] <= 1 and w0["examples_per_sec"] > 0, w0
        down = tfcluster("down", str(spec), timeout=120)
        assert down.returncode == 0, down.stderr
        saved = [int(p["global_step"]) for p in recorded(run_dir(spec), "preempted")]
        assert len(saved) == 1 and saved[0] >= 10, recorded(run_dir(spec), "step")[-3:]
        assert recorded(run_dir(spec), "preempted", "worker:1")[0]["global_step"] == str(saved[0])  # both saved that step
        status = tfcluster("status", str(spec))
        assert status.returncode == 1 and ": stopped," in status.stdout.splitlines()[0], status.stdout
        assert_no_processes(spec)
        text = spec.read_text()
        assert CUSTOM.format(delay=1) in text
        spec.write_text(text.replace(CUSTOM.format(delay=1), CUSTOM.format(delay=0)))
        result = up(spec)
        assert result.returncode == 0, result.stdout[-3000:]
        assert int(progress(result.stdout, "start")[0]["global_step"]) == saved[0]  # zero steps redone
        assert int(progress(result.stdout, "result")[0]["steps_run"]) == 90 - saved[0]
    finally:
        tfcluster("down", str(spec))
