"""What `tfcluster up` shows: the live panel in a real terminal (tmux), plain lines in a pipe,
--quiet / --verbose, TF's start-up noise kept out of the console but in the logs, the final report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.support.tfrun import run_dir, write_spec
from tests.support.cli import terminal_command, tfcluster
from tests.support.prereq import require_tool
from tests.support.processes import pids_with_env
from tests.support.specs import script_spec
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration]

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795424840.896830    7274 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.",
    "E0000 00:00:1795424845.812272    7276 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)",
]

# A user's own script that feeds the panel with progress records (on its control channel, as the
# docs say: docs/concepts/runs.md), after TF-like start-up noise; and prints a record-like line.
SCRIPT = f"""
    import os, sys, time
    key = os.environ["TFCLUSTER_TASK"]
    say = lambda line: os.write(int(os.environ["TFCLUSTER_CONTROL_FD"]), (line + "\\n").encode())
    for line in {NOISE!r}:
        print(line, file=sys.stderr, flush=True)
    print("E0000 00:00:1795424845.812272    7276 grpc_server_lib.cc:490] UNAVAILABLE: failed to connect", flush=True)
    print("tfcluster-epoch epoch=9 loss=0.0001 accuracy=1.0000", flush=True)  # (printed: its output, not a record)
    say("tfcluster-start epoch=0 step=0 global_step=0 global_batch=8 epochs=1 steps_per_epoch=4")
    for i in range(1, 5):
        time.sleep(0.05)
        say(f"tfcluster-step epoch=0 step={{i}} global_step={{i}} time={{time.time():.3f}}")
    say("tfcluster-epoch epoch=1 loss=0.5000 accuracy=0.7500")
    say(f"tfcluster-result task={{key}} steps_run=4 examples_per_sec=100.0 loss=0.4000 accuracy=0.8000")
"""


def test_a_pipe_gets_plain_prefixed_lines_without_noise_or_escape_codes_and_the_report(tmp_path):
    spec = script_spec(tmp_path, SCRIPT)
    result = tfcluster("up", spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(re.match(r"\[(worker:[01]|tfcluster)\] ", line) for line in lines), lines
    for noise in NOISE:
        assert noise not in result.stdout
    # An error line that looks like TF's chatter is shown; the records as people read them, never the
    # protocol; a printed record-like line as the task printed it.
    assert sum("grpc_server_lib.cc:490] UNAVAILABLE" in line for line in lines) == 2
    assert "tfcluster-step" not in result.stdout and "[tfcluster] epoch 1/1  loss 0.5000  accuracy 0.750" in result.stdout
    assert "[worker:1] tfcluster-epoch epoch=9 loss=0.0001 accuracy=1.0000" in result.stdout
    # The log files keep every line.
    log = ((tmp_path / "runs" / "t" / "latest").resolve() / "logs" / "worker-0.log").read_text()
    assert all(noise in log for noise in NOISE)

    # The final report: one row per task, the attempts table, where things are.
    err = result.stderr.splitlines()
    header = next(i for i, line in enumerate(err) if line.split()[:3] == ["task", "host", "state"])
    assert err[header + 1].split() == ["worker:0", "localhost", "succeeded", "0", "1", "4", "100.0", "0.4000", "0.8000"]
    assert err[header + 2].split()[:3] in (["worker:1", "localhost", "succeeded"], ["worker:1", "localhost", "stopped"])
    assert err[header + 3].split() == ["attempt", "started", "duration", "outcome"]
    logs_dir = (tmp_path / "runs" / "t" / "latest").resolve() / "logs"
    assert any(line.split() == ["task", "logs:", str(logs_dir.resolve())] for line in err), err
    assert err[-1].startswith("tfcluster: run succeeded after 1 attempt(s)")

    # The same facts in events.jsonl.
    events = read_records(logs_dir.parent)
    outcome = [e for e in events if isinstance(e, ev.RunOutcome)][-1]
    assert outcome["tasks"]["worker:0"] == {"state": "succeeded", "exit_code": 0, "attempts": 1, "steps_run": 4,
                                            "global_step": 4, "examples_per_sec": 100.0, "loss": 0.4,
                                            "accuracy": 0.8}
    assert outcome["locations"]["task logs"] == str(logs_dir.resolve())


def test_verbose_shows_the_noise_and_quiet_shows_only_launcher_messages_and_the_report(tmp_path):
    spec = script_spec(tmp_path, SCRIPT)
    verbose = tfcluster("up", spec, "--verbose")
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    for noise in NOISE:
        assert f"[worker:0] {noise}" in verbose.stdout
    quiet = tfcluster("up", spec, "--quiet")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout == ""
    assert all(line.startswith(("tfcluster: ", "  ")) for line in quiet.stderr.splitlines()), quiet.stderr
    assert any(line.split()[:3] == ["worker:0", "localhost", "succeeded"] for line in quiet.stderr.splitlines())


def _screen(sock: str, history: bool = False) -> str:
    cmd = ["tmux", "-L", sock, "capture-pane", "-p", "-t", "up"] + (["-S", "-"] if history else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout


def _wait_screen(sock: str, predicate, timeout: float, what: str) -> str:
    """The first screen ``predicate`` accepts (polled), or fail showing the last one."""
    last = [""]

    def accepted():
        last[0] = _screen(sock)
        return last[0] if predicate(last[0]) else None

    return wait_for(accepted, timeout, 0.3, what=what, detail=lambda: f"the screen:\n{last[0]}")


@pytest.mark.tf
def test_live_panel_in_a_terminal_then_the_final_report(tmp_path, tfds_dir):
    require_tool("tmux", "tmux")
    spec = write_spec(tmp_path, tfds_dir, "python -m worker --epochs 2 --steps-per-epoch 20 --step-delay 0.15")
    sock = f"tfcluster-test-{os.getpid()}-{tmp_path.name}"  # (suites side by side share tmp_path names)
    command = terminal_command("up", spec) + "; echo TFCLUSTER-EXIT=$?; sleep 600"
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", "up", "-x", "160", "-y", "45", command],
                   check=True, timeout=10)
    try:
        # A panel row per task, both training, with epoch i/2 and a step count inside the epoch.
        row = re.compile(r"^(worker:[01])\s+localhost\s+training\s+1\s+([12])/2\s+.*?(\d+)/20\s+(\d+)\s")

        def panel(screen: str):
            rows = {m.group(1): m for m in map(row.match, screen.splitlines()) if m}
            if len(rows) == 2 and all(int(m.group(3)) > 0 for m in rows.values()):
                return screen
            return None

        screen = _wait_screen(sock, panel, 240, "the panel's rows while training")
        lines = screen.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("demo "))
        assert re.match(r"demo\s+multi_worker_mirrored on local\s+attempt 1 of 1\s+\d\d:\d\d elapsed$",
                        lines[header]), lines[header]
        assert lines[header + 1] == f"run dir {run_dir(spec)}"
        # the tasks' lines scroll above the panel: as they are, or folded for the run with the
        # tasks that said them ("worker: strategy=...  (worker:0-1)", launcher/ui/peoplelines.py)
        above = [i for i, line in enumerate(lines)
                 if line.startswith("[worker:") or re.search(r"  \(worker:[0-9,-]+\)$", line.rstrip())]
        assert above and header > max(above), screen
        for line in lines:
            m = row.match(line)
            if m:  # the global step agrees with epoch and step in the epoch
                assert int(m.group(4)) == (int(m.group(2)) - 1) * 20 + int(m.group(3)), line
        assert "\x1b" not in screen

        final = _wait_screen(sock, lambda s: s if "TFCLUSTER-EXIT=" in s else None, 240, "the end of the run")
        assert "TFCLUSTER-EXIT=0" in final, final
        report = final.splitlines()
        top = next(i for i, line in enumerate(report) if line.split()[:3] == ["task", "host", "state"])
        for i, key in enumerate(("worker:0", "worker:1")):
            cells = report[top + 1 + i].split()
            assert cells[:6] == [key, "localhost", "succeeded", "0", "1", "40"], report[top + 1 + i]
            assert float(cells[6]) > 0 and 0 <= float(cells[8]) <= 1, cells
        assert any(line.strip().startswith("final model:") and line.strip().endswith("/runs/demo/state/final_model")
                   for line in report)
        assert any(line.startswith("tfcluster: run succeeded after 1 attempt(s)") for line in report)
        assert not any(line.startswith("task ") and "steps in epoch" in line for line in report)  # panel gone
        whole = _screen(sock, history=True)
        assert "Could not find cuda drivers" not in whole and "failed call to cuInit" not in whole
        # Heartbeats are in the rows, not scrolling above; epochs scroll as one line for the run each,
        # the strategy once; the protocol lines themselves stay in the task logs.
        epochs = [line for line in whole.splitlines() if line.startswith("epoch ")]
        assert [line.split("  ")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"], whole
        assert all(re.fullmatch(r"epoch [12]/2  loss \d\.\d{4}  accuracy [01]\.\d{3}  [\d,]+ ex/s  \(worker:0-1\)",
                                line) for line in epochs), epochs
        strategy = [line for line in whole.splitlines() if line.startswith("strategy ")]
        assert len(strategy) == 1 and re.fullmatch(r"strategy multi_worker_mirrored \(CollectiveAllReduceStrategy, "
                                                    r"2 replica\(s\), global batch \d+\)", strategy[0]), strategy
        assert "tfcluster-step " not in whole and "tfcluster-epoch" not in whole and "tfcluster-start" not in whole
        assert "tfcluster-epoch epoch=2 " in (run_dir(spec) / "logs" / "worker-0.progress").read_text()
        # The noise is kept where TensorFlow was imported: the run's zygote (launcher/remote/zygote.py)
        # imported it once for both workers, and says it in the run dir's zygote.log.
        kept = [(run_dir(spec) / name).read_text() for name in ("logs/worker-0.log", "zygote.log")
                if (run_dir(spec) / name).exists()]
        assert any("Could not find cuda drivers" in text for text in kept), kept
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=10)
        run_id = run_dir(spec).name if run_dir(spec).exists() else None
        if run_id:
            wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), timeout=30, what="every task to stop")


FAILING = f"""
    import os, sys
    for line in {NOISE!r}:
        print(line, flush=True)
    if os.environ["TFCLUSTER_TASK"] == "worker:0":
        print("Traceback (most recent call last):", flush=True)
        print("ValueError: bad input", flush=True)
        sys.exit(1)
"""


def test_a_failure_report_quotes_the_task_without_the_noise_unless_verbose(tmp_path):
    spec = script_spec(tmp_path, FAILING)
    result = tfcluster("up", spec)
    assert result.returncode == 1, result.stdout + result.stderr
    quoted = [line for line in result.stderr.splitlines() if line.startswith("  | ")]
    assert quoted == ["  | Traceback (most recent call last):", "  | ValueError: bad input"], result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    assert "[worker:0] ValueError: bad input" in result.stdout
    verbose = tfcluster("up", spec, "--verbose")
    quoted = [line[4:] for line in verbose.stderr.splitlines() if line.startswith("  | ")]
    assert quoted[:3] == NOISE and quoted[3:] == ["Traceback (most recent call last):", "ValueError: bad input"]
    report = verbose.stderr.splitlines()
    top = next(i for i, line in enumerate(report) if line.split()[:3] == ["task", "host", "state"])
    assert report[top + 1].split()[:5] == ["worker:0", "localhost", "failed", "1", "1"]
