"""Local backend + supervisor with plain Python tasks (fast; TensorFlow tests are elsewhere)."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.cli.main import main
from tests.support.cli import start_tfcluster, tfcluster
from tests.support.errors import one_cli_error
from tests.support.processes import alive, pids_with_env
from tests.support.specs import script_spec
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

ME = pwd.getpwuid(os.getuid()).pw_name  # (a port's holder is named with its user)

pytestmark = pytest.mark.integration


def events(tmp_path: Path) -> list[ev.RecordEvent]:
    run = (tmp_path / "runs" / "t" / "latest").resolve()
    return read_records(run)


def test_success_prefixed_output_logs_and_events(tmp_path, capsys):
    path = script_spec(tmp_path, """\
        import json, os
        conf = json.loads(os.environ["TF_CONFIG"])
        print("hello from", conf["task"]["type"], conf["task"]["index"], os.environ["TFCLUSTER_RESTART_COUNT"])
    """)
    assert main(["up", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[worker:0] hello from worker 0 0" in out and "[worker:1] hello from worker 1 0" in out
    run = (tmp_path / "runs" / "t" / "latest").resolve()
    assert (run / "logs" / "worker-1.log").read_text() == "hello from worker 1 0\n"
    assert json.loads((run / "plan.json").read_text())["tasks"][1]["port"] > 0
    kinds = [type(e) for e in events(tmp_path)]
    assert kinds[0] == ev.RunStart and kinds.count(ev.Start) == 2 and kinds[-1] == ev.RunOutcome
    assert events(tmp_path)[-1]["outcome"] == "succeeded"


def test_failing_task_root_cause_others_stopped_exit_1(tmp_path, capsys):
    path = script_spec(tmp_path, """\
        import json, os, sys, time
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        if index == 1:
            print("about to fail", flush=True)
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(120)
    """)
    started = time.monotonic()
    assert main(["up", str(path)]) == 1
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "tfcluster: error: worker:1 failed: exit code 3" in err
    assert "| about to fail" in err
    assert "stopping worker:0" in err
    assert "not retried" in err
    run_id = (tmp_path / "runs" / "t" / "latest").resolve().name
    assert pids_with_env("TFCLUSTER_RUN_ID", run_id) == []
    failure = [e for e in events(tmp_path) if isinstance(e, ev.Failure)][0]
    assert failure["task"] == "worker:1" and failure["code"] == 3


def test_port_in_use_fails_before_anything_starts(tmp_path, capsys):
    path = script_spec(tmp_path, "print('must not run')\n")
    port = json.loads(tfcluster("plan", path, "--json").stdout)["tasks"][1]["port"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        assert main(["up", str(path)]) == 1
    captured = capsys.readouterr()
    assert f"tfcluster: error: port {port} on localhost is in use by pid {os.getpid()} of user {ME} (" in captured.err
    assert captured.err.rstrip().endswith("(task worker:1); stop what holds it or change ports.base in the spec")
    assert "must not run" not in captured.out
    assert not (tmp_path / "runs").exists()


HOLD = ("import socket, sys, time\n"
        "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); print('held', flush=True)\n"
        "time.sleep(300)\n")


def hold_port(port: int, tmp_path: Path) -> subprocess.Popen:
    """Another process listening on ``port`` (all interfaces, as TensorFlow's gRPC server)."""
    (tmp_path / "holder.py").write_text(HOLD)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "holder.py"), str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_port_held_by_another_process_names_it_in_one_line(tmp_path):
    path = script_spec(tmp_path, "print('must not run')\n")
    port = json.loads(tfcluster("plan", path, "--json").stdout)["tasks"][0]["port"]
    holder = hold_port(port, tmp_path)
    try:
        res = tfcluster("up", path)
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 1
    line = one_cli_error(res.stderr)
    assert f"port {port} on localhost is in use by pid {holder.pid} of user {ME} ({sys.executable} {tmp_path / 'holder.py'}" in line
    assert "must not run" not in res.stdout


def test_a_port_taken_between_the_check_and_the_bind_names_its_holder(tmp_path):
    """The window between the task's own check (its stub's, right before the script) and its bind
    (TensorFlow's, in the script): the script waits for a gate, the port is taken meanwhile, the
    bind fails, and the failure's hint names the process that holds it."""
    path = script_spec(tmp_path, """\
        import json, os, pathlib, socket, time
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        if task["index"] == 1:
            pathlib.Path("in-script").touch()  # (past the stub's own check of the port)
            while not pathlib.Path("gate").exists():
                time.sleep(0.05)
            port = int(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][1].rsplit(":", 1)[1])
            socket.socket().bind(("0.0.0.0", port))  # as TensorFlow's server would
        time.sleep(60)
    """)
    port = json.loads(tfcluster("plan", path, "--json").stdout)["tasks"][1]["port"]
    run = start_tfcluster("up", "--plain", path, cwd=tmp_path)
    holder = None
    try:
        wait_for(lambda: (tmp_path / "in-script").exists(), 60, what="worker:1's script started", proc=run)
        holder = hold_port(port, tmp_path)
        (tmp_path / "gate").touch()
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        if holder is not None:
            holder.kill()
            holder.wait()
    assert run.returncode == 1, out
    assert f"hint: port {port} was taken by pid {holder.pid} of user {ME} (" in out, out


def test_missing_command_is_reported_before_start(tmp_path, capsys):
    path = script_spec(tmp_path, "")
    path.write_text(path.read_text().replace(json.dumps(sys.executable), "no-such-program-xyz"))
    assert main(["up", str(path)]) == 1
    assert "entrypoint: command 'no-such-program-xyz' not found on PATH" in capsys.readouterr().err


def test_dry_run_starts_nothing(tmp_path, capsys):
    path = script_spec(tmp_path, "open('ran', 'w').write('x')\n")
    assert main(["up", str(path), "--dry-run"]) == 0
    assert "dry run: preflight passed; would start 2 tasks" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists() and not (tmp_path / "runs").exists()


SLEEPER = """\
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # like TF once a strategy exists
    print("up", flush=True)
    time.sleep(300)
"""


def _wait_run(tmp_path: Path, count: int) -> str:
    def ready():
        link = tmp_path / "runs" / "t" / "latest"
        if not link.exists():
            return None
        run_id = link.resolve().name
        return run_id if len(pids_with_env("TFCLUSTER_RUN_ID", run_id)) >= count else None
    return wait_for(ready, 30, what="the run's tasks to start")


def test_sigint_stops_everything_exit_130(tmp_path):
    path = script_spec(tmp_path, SLEEPER)
    proc = start_tfcluster("up", path)
    try:
        run_id = _wait_run(tmp_path, 4)  # 2 wrappers + 2 tasks
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, out
        assert "interrupted; every task stopped" in out
        assert pids_with_env("TFCLUSTER_RUN_ID", run_id) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_sigkill_of_launcher_leaves_no_task(tmp_path):
    path = script_spec(tmp_path, SLEEPER)
    proc = start_tfcluster("up", path)
    try:
        run_id = _wait_run(tmp_path, 4)
        tasks = pids_with_env("TFCLUSTER_RUN_ID", run_id)  # the 2 wrappers and their 2 tasks
        proc.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL  # no handler of the launcher's ran
        wait_for(lambda: not any(alive(p) for p in tasks), 15, what="tasks to die with the launcher")
        assert [p for p in tasks if alive(p)] == [] and pids_with_env("TFCLUSTER_RUN_ID", run_id) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_down_stops_a_running_launcher(tmp_path):
    path = script_spec(tmp_path, SLEEPER)
    proc = start_tfcluster("up", path)
    try:
        run_id = _wait_run(tmp_path, 4)
        down = tfcluster("down", path)
        assert down.returncode == 0, down.stderr
        assert f"run {run_id}: stopped" in down.stderr
        proc.wait(timeout=30)
        assert proc.returncode == 130
        assert pids_with_env("TFCLUSTER_RUN_ID", run_id) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_group_restart_then_success(tmp_path, capsys):
    path = script_spec(tmp_path, """\
        import json, os, sys
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
        print("attempt", attempt, flush=True)
        if index == 1 and attempt == 0:
            os.kill(os.getpid(), 9)
    """, extra="restart: {max_restarts: 2}\n")
    assert main(["up", str(path)]) == 0
    captured = capsys.readouterr()
    assert "worker:1 failed: killed by SIGKILL (exit 137)" in captured.err
    assert "restarting the whole group (restart 1 of 2)" in captured.err
    assert "[worker:0] attempt 1" in captured.out
    kinds = [type(e) for e in events(tmp_path)]
    assert kinds.count(ev.GroupRestart) == 1 and kinds.count(ev.Start) == 4


def test_retryable_failure_every_time_stops_after_max_restarts(tmp_path, capsys):
    path = script_spec(tmp_path, "import os; os.kill(os.getpid(), 9)\n", extra="restart: {max_restarts: 2}\n")
    assert main(["up", str(path)]) == 1
    err = capsys.readouterr().err
    assert "gave up after 3 attempt(s): restart.max_restarts is 2" in err
    table = [line for line in err.splitlines() if re.match(r"^\s+\d+\s+\d\d:\d\d:\d\d\s.*failed: worker:", line)]
    assert len(table) == 3, err  # the summary table lists every attempt


def test_startup_timeout_names_the_task_that_never_came_up(tmp_path, capsys):
    path = script_spec(tmp_path, """\
        import json, os, socket, time
        conf = json.loads(os.environ["TF_CONFIG"])
        if conf["task"]["index"] == 0:
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", int(conf["cluster"]["worker"][0].split(":")[1]))); s.listen()
        time.sleep(120)
    """, extra="")
    # 5 s: worker:0 binds its port well within it, however busy the machine
    path.write_text(path.read_text().replace("watchdog: {stop_grace: 1}", "watchdog: {stop_grace: 1, startup_timeout: 5}"))
    assert main(["up", str(path)]) == 1
    err = capsys.readouterr().err
    assert "worker:1 failed: never came up: no TF server listening within watchdog.startup_timeout=5 s" in err
    assert "worker:0" not in err.split("never came up")[1].split("\n")[0]


LISTEN = textwrap.dedent("""\
    import json, os, signal, socket, time
    conf = json.loads(os.environ["TF_CONFIG"])
    def listen():
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", int(conf["cluster"]["worker"][conf["task"]["index"]].rsplit(":", 1)[1]))); s.listen()
        return s
""")


def test_hang_watchdog_catches_sigstopped_task(tmp_path, capsys):
    path = script_spec(tmp_path, LISTEN + textwrap.dedent("""\
        server = listen()
        for i in range(600):
            print("tick", i, flush=True)
            if conf["task"]["index"] == 1 and i == 3 and os.environ["TFCLUSTER_RESTART_COUNT"] == "0":
                os.kill(os.getpid(), signal.SIGSTOP)
            if i == 10:
                break
            time.sleep(0.2)
    """), extra="restart: {max_restarts: 1}\n")
    # (watchdog.stopped_timeout off: its wrapper's word on the stop would name it first, below)
    path.write_text(path.read_text().replace("watchdog: {stop_grace: 1}",
                                             "watchdog: {stop_grace: 1, hang_timeout: 2, stopped_timeout: 0}"))
    assert main(["up", str(path)]) == 0
    err = capsys.readouterr().err
    assert "worker:1 failed: hung: no progress for 2 s (watchdog.hang_timeout); process is stopped (SIGSTOP?)" in err


def test_a_stopped_task_is_named_by_its_wrappers_word_and_a_printed_word_steers_nothing(tmp_path, capsys):
    """worker:1 stops itself (SIGSTOP) in the first attempt: its wrapper says so (a wrapper frame),
    and after watchdog.stopped_timeout (default 2 s) the group fails on it, long before the hang
    watchdog's 60 s. Every task prints the wrapper's word itself, on stdout and stderr, from the
    start: that is output, and stops nothing."""
    path = script_spec(tmp_path, LISTEN + textwrap.dedent("""        import sys
        server = listen()
        print("taskwrap: stopped: the task's process (pid 1) has been stopped by a signal", flush=True)
        print("\\x1eWtaskwrap: stopped: planted", file=sys.stderr, flush=True)
        for i in range(600):
            print("tick", i, flush=True)
            if conf["task"]["index"] == 1 and i == 3 and os.environ["TFCLUSTER_RESTART_COUNT"] == "0":
                os.kill(os.getpid(), signal.SIGSTOP)
            if i == 10:
                break
            time.sleep(0.2)
    """), extra="restart: {max_restarts: 1}\n")
    path.write_text(path.read_text().replace("watchdog: {stop_grace: 1}", "watchdog: {stop_grace: 1, hang_timeout: 60}"))
    assert main(["up", str(path)]) == 0
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if "error:" in line and " failed: " in line]
    assert len(failed) == 1 and re.search(r"worker:1 failed: process is stopped \(SIGSTOP\?\) for \d+ s "
                                          r"\(watchdog\.stopped_timeout 2 s\)", failed[0]), err[-3000:]
    said = [e for e in read_records(tmp_path / "runs" / "t" / "latest") if isinstance(e, ev.ProcessStopped)]
    assert [(e.task, e.killed) for e in said] == [("worker:1", False)] and 2 <= said[0].seconds < 10, said


def test_hang_clock_starts_when_every_task_is_up(tmp_path, capsys):
    # Silent for 3 s before opening its port (like importing TensorFlow), with hang_timeout 2:
    # that is startup, not a hang.
    path = script_spec(tmp_path, LISTEN + textwrap.dedent("""\
        time.sleep(3)
        server = listen()
        for i in range(8):
            print("tick", i, flush=True)
            time.sleep(0.3)
    """))
    path.write_text(path.read_text().replace("watchdog: {stop_grace: 1}", "watchdog: {stop_grace: 1, hang_timeout: 2}"))
    assert main(["up", str(path)]) == 0
    assert "hung" not in capsys.readouterr().err


def test_unwritable_run_dir_is_one_line_not_a_traceback(tmp_path, capsys):
    path = script_spec(tmp_path, "print('must not run')\n")
    (tmp_path / "runs").write_text("a file where the run directory should be")
    assert main(["up", str(path)]) == 1
    err = capsys.readouterr().err
    assert "tfcluster: error: run_dir: cannot write the run record in" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
