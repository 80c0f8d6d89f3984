"""What a run on ssh hosts shows its user when things end badly: a task whose wrapper is killed
is one line of the launcher's, never the remote shell's report of it (that report quoted the
host agent's whole source, ~300 lines, into the task's log and the console); a terminal that
goes away stops the run as Ctrl-C does, on every host."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from launcher.remote import source as remote_source
from tests.support.cli import ROOT, start_tfcluster, tfcluster
from tests.support.terminal import up_in_a_terminal_closed_when
from tests.support.waits import wait_for

from tests.support.ssh_helpers import pidfiles
from .conftest import PY, task_processes
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(240)]

# Lines only the host agent's source has: if any reaches a log or the console, a shell quoted it.
AGENT_TELLS = ("def _prepare(req):", "class _Drainer(object):", "Remote host agent: preflight")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_a_sigkilled_first_task_of_a_host_is_one_line_not_the_agent_source(lab, make_spec):
    """worker:0 is h1's first task: the host agent became its wrapper. SIGKILL to the wrapper's
    group (a user's `kill -9 -PGID`, the OOM killer's choice, the launcher's own SIGKILL) kills
    the process its login shell waits for; bash then printed "line 1: PID Killed python3 -S -c
    '<agent.py>' TAG" into worker:0's output. The group stop that follows SIGKILLs worker:1's
    wrapper (also an agent) on h2 the same way."""
    assert all(tell in remote_source("agent.py") for tell in AGENT_TELLS)  # the tells are still tells
    script = ("import os,time; n=int(os.environ['TFCLUSTER_RESTART_COUNT']); print('ATTEMPT', n, flush=True); "
              "time.sleep(120 if n == 0 else 0)")
    spec = make_spec([PY, "-c", script], workers=2, restart={"max_restarts": 1})
    proc = start_tfcluster("up", spec, stderr=subprocess.PIPE)
    try:
        wrapper, _task = pidfiles(spec, 2, timeout=60)["worker-0.0.pid"]
        # Both tasks have printed their first line: a kill before Python got that far (a busy
        # machine) would leave no "ATTEMPT 0" to check the log for.
        logs = spec.parent / "runs" / "sshtest" / "latest" / "logs"
        wait_for(lambda: all("ATTEMPT 0" in _read(logs / f"worker-{i}.log") for i in (0, 1)), 60,
                 what="both tasks to print ATTEMPT 0", detail=lambda: str([_read(logs / f"worker-{i}.log") for i in (0, 1)]))
        os.killpg(wrapper, signal.SIGKILL)  # lab hosts are namespaces of this machine: same pids
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    run = (spec.parent / "runs" / "sshtest" / "latest").resolve()
    shown = {"the console": out + err, "worker-0.log": (run / "logs" / "worker-0.log").read_text(),
             "worker-1.log": (run / "logs" / "worker-1.log").read_text(),
             "output.log": (run / "output.log").read_text()}
    for where, text in shown.items():
        leaked = [tell for tell in AGENT_TELLS if tell in text]
        assert not leaked, f"the agent's source reached {where}: {text[-2000:]}"
        assert "Killed" not in text, f"a shell's kill report reached {where}: {text[-2000:]}"
    # Each task's log is its own lines only: attempt 0, then attempt 1.
    for key in ("worker-0", "worker-1"):
        assert shown[f"{key}.log"].splitlines() == ["ATTEMPT 0", "ATTEMPT 1"], shown[f"{key}.log"]
    # The kill: one line of the launcher's (and its row in the final report's attempt table), with
    # the exit status the shell reported, not a lost connection.
    kills = [line for line in err.splitlines() if line.startswith("tfcluster:") and "worker:0" in line
             and "SIGKILL" in line]
    assert kills == ["tfcluster: error: worker:0 failed: killed by SIGKILL (exit 137) (attempt 1 of 2)"], err
    events = read_records(run)
    assert [e["code"] for e in events if isinstance(e, ev.Exit) and e["task"] == "worker:0"] == [137, 0]
    wait_for(lambda: not any(task_processes(lab).values()), 20, what="nothing of the run left on any host",
             detail=lambda: str(task_processes(lab)))


# Each task serves its port, prints a line every 0.2 s, and on SIGTERM says it saved and exits
# 143, as the reference worker does.
SAVER = str(ROOT / "tests" / "support" / "saver_task.py")


def test_closing_the_terminal_of_an_ssh_up_stops_the_tasks_on_both_hosts_gracefully(lab, make_spec):
    """`tfcluster up` of two workers on h1 and h2, its live panel in a tmux window that is killed
    mid-run: each task gets the graceful SIGTERM over ssh (each says it saved, as the reference
    worker does), the run is `stopped` with its record closed, and nothing is left on any host.
    Stand-in tasks: the stop is Ctrl-C's, and that the workers so stopped save the step they agree
    on over ssh and the next `up` resumes there on both hosts is checked with TensorFlow by
    test_ssh_state.py's test_ctrl_c_saves_on_both_hosts_and_a_rerun_resumes_there."""
    spec = make_spec([PY, SAVER, "0.2"], workers=2, restart={"max_restarts": 0},
                     watchdog={"startup_timeout": 120, "stop_grace": 30})
    latest = spec.parent / "runs" / "sshtest" / "latest"
    outcome = up_in_a_terminal_closed_when(
        spec, latest, lambda: "line 10\n" in _read(latest / "logs" / "worker-1.log"), "worker:1's 10th line")
    assert outcome["outcome"] == "interrupted" and "the terminal of `tfcluster up` went away" in outcome["reason"]
    status = tfcluster("status", str(spec))
    assert status.returncode == 1 and ": stopped, attempt 1," in status.stdout.splitlines()[0], status.stdout
    run = latest.resolve()
    for key in ("worker-0", "worker-1"):  # the graceful path on both hosts: SIGTERM, and each saved
        log = _read(run / "logs" / f"{key}.log")
        assert re.search(r"^saved at \d+$", log, re.M), (key, log[-2000:])
    events = read_records(run)
    assert sorted(e["task"] for e in events if isinstance(e, ev.Stopped)) == ["worker:0", "worker:1"], events
    wait_for(lambda: not any(task_processes(lab).values()), 30, what="nothing of the run left on any host",
             detail=lambda: str(task_processes(lab)))


def test_a_terminal_sees_how_many_hosts_answered_the_preflight_and_a_pipe_does_not(lab, make_spec, monkeypatch):
    """While the hosts answer the preflight, a terminal shows how many did (a line redrawn in
    place: ``probing hosts 1/2``); the same run with its output in a pipe writes no such line."""
    from tests.support.cli import output_on_terminal, tfcluster_argv

    spec = make_spec([PY, "-c", "print('done')"])
    monkeypatch.setenv("TERM", "xterm")
    shown = output_on_terminal(tfcluster_argv("up", spec), timeout=120).decode(errors="replace")
    assert re.search(r"(connecting to|probing) hosts \d/2", shown), shown[-3000:]
    piped = tfcluster("up", str(spec))
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert not re.search(r"hosts \d+/\d+", piped.stdout + piped.stderr), piped.stderr[-3000:]
