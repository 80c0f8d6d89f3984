"""A run that stops making progress is found, named and shown (launcher/supervise/hangwatch.py): 2
local workers stuck one way or another. Each run ends, its ``failure`` event names the stuck task,
``up`` shows the stuck user-code line and its stacks, the record holds every task's stacks, goodput
counts ``hung``, and nothing is left running.

These are the watchdog's decisions, so the tasks are the stand-in of a user's MultiWorkerMirrored
fit script (tests/support/hang_stub.py: no TensorFlow, each step one call of an eager context the
liveness counts, as it counts TensorFlow's, its all-reduce waiting inside that call for the peers):
a Python start instead of two TensorFlow imports. The script itself, with TensorFlow, stuck the
same ways: on the ssh, slurm and docker labs (test_*_hang.py); a stall inside TensorFlow on local:
test_hang_tf.py; a straggler (what TensorFlow's collectives make of a slow task's time), below.

That a legitimate pause (a callback's 25 s upload) is neither a hang under the default
hang_timeout auto nor a straggler is a decision on the beats' times, checked at unit speed through
the hang watch and the straggler samples (tests/unit/supervise/test_hangwatch.py,
test_straggler.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

from launcher.record.status import load_run
from tests.support.cli import start_tfcluster, tfcluster
from tests.support.hang_live import SCRIPT, STUB, check_failure, check_output_is_data, lies, stuck_line
from tests.support.specs import local_spec
from tests.support.tfrun import assert_no_processes, events, run_dir
from tests.support.waits import wait_for, wait_line
import launcher.record.events as ev

pytestmark = [pytest.mark.integration]

RUN_TIMEOUT = 400


def hang_spec(tmp_path: Path, *args: str, watchdog: str = "{startup_timeout: 240, stop_grace: 2, hang_timeout: 12}",
              extra: str = "", script: Path = STUB) -> Path:
    """2 workers running ``script`` (the stand-in, by default) as train.py with ``args``."""
    shutil.copy(script, tmp_path / "train.py")
    words = ", ".join(f'"{a}"' for a in args)
    return local_spec(tmp_path, f"[{sys.executable}, train.py, {words}]", name="demo",
                      env={"TF_CPP_MIN_LOG_LEVEL": "'2'"}, watchdog=watchdog, extra=extra)


def test_what_a_task_prints_never_steers_the_run_and_its_real_stall_is_still_found(tmp_path):
    """docs/concepts/trust.md, rule 9: every task prints every line of tfcluster's protocol (odd
    arguments and all: ``stacks=9``, ``stacks=100``, a step at global step 99999, a standby's
    ``promoted``, the wrapper's GCE notice), then fake beats every second, and trains; worker:1
    stalls in the first attempt. The hang watch still finds the stall (the fake beats are not its
    count) and takes every task's stacks with its own signal (the tasks answer and live on: not
    the 9 or 100 the lines name); the restart trains to the end, exit 0. The logs hold every line
    as printed; the record holds no fake progress or goodput."""
    assert lies(STUB) == lies(SCRIPT)  # (the stand-in tells the script's lies)
    spec = hang_spec(tmp_path, "generator", "--task", "worker:1", "--lies", "--stall-once",
                     extra="restart: {max_restarts: 1, warm_standby: false}\n")
    result = tfcluster("up", spec, timeout=RUN_TIMEOUT)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    line = stuck_line("generator", script=STUB)
    assert "worker:1 failed: stuck " in out and line in out, out[-4000:]
    status = tfcluster("status", spec, "--json")
    check_failure(run_dir(spec), status, "worker:1", line)
    check_output_is_data(run_dir(spec), status, result.stdout, script=STUB)
    assert_no_processes(spec)


@pytest.mark.parametrize("mode,task", [("generator", "worker:1"), ("silent", "worker:1"), ("busy", "worker:1"),
                                       ("deadlock", "worker:0")])
def test_the_stuck_task_is_named_at_its_user_code_line_with_its_stacks(tmp_path, mode, task):
    line = stuck_line(mode, script=STUB)  # e.g. train.py:51 in retry_forever(): time.sleep(1)
    spec = hang_spec(tmp_path, mode, "--task", task)
    result = tfcluster("up", spec, timeout=RUN_TIMEOUT)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-4000:]
    assert (run_dir(spec) / "events.jsonl").is_file(), out[-4000:]
    failure = [e for e in events(spec) if isinstance(e, ev.Failure)]
    assert len(failure) == 1 and failure[0]["task"] == task, (failure, out[-4000:])
    assert failure[0]["reason"].startswith("stuck ") and line in failure[0]["reason"], failure
    assert f"{task} failed: stuck " in result.stderr and line in result.stderr, out[-4000:]
    assert f"stacks of {task} (" in result.stderr and "(in user code)" in result.stderr, out[-4000:]
    other = "worker:0" if task == "worker:1" else "worker:1"
    stopping = [ln for ln in result.stderr.splitlines() if "stopping " in ln and "SIGTERM" in ln]
    assert stopping and all(task not in ln for ln in stopping), (stopping, out[-4000:])  # killed, not stopped
    assert not [e for e in events(spec) if isinstance(e, ev.Stopped) and e["task"] == task], events(spec)
    record = run_dir(spec)
    for key in (task, other):  # every live task's stacks, in the record
        text = (record / "stacks" / "1" / f"{key.replace(':', '-')}.txt").read_text()
        assert "(most recent call first):" in text, text
        # and its native frames after them (py-spy, installed with the test extra): a C frame of a library
        native = text.split("native frames (py-spy dump --native, pid ", 1)
        assert len(native) == 2 and re.search(r"\(lib[^)]*\.so", native[1]), text[-3000:]
    goodput = load_run(record).to_json()["goodput"]
    assert goodput["badput"]["hung"] >= 10.0, goodput
    assert "tfcluster-beat" not in (record / "logs" / "worker-0.log").read_text(), "beats are progress, not log lines"
    assert_no_processes(spec)


def test_a_task_that_keeps_the_others_waiting_is_named_a_straggler_while_it_lasts(tmp_path):
    # worker:1's callback sleeps 0.3 s after every batch: worker:0 waits for it in each all-reduce.
    # With TensorFlow: that the peers' time waiting in the all-reduce is counted inside it is
    # TensorFlow's to show.
    # (straggler_after 12: six 2-second windows instead of the default's minute; the verdict's rule
    # is the same, tested against fakes in tests/unit/supervise/test_straggler.py)
    spec = hang_spec(tmp_path, "slow", "--task", "worker:1", "--pause", "0.3", "--steps", "1000000",
                     watchdog="{startup_timeout: 240, stop_grace: 2, straggler_after: 12}", script=SCRIPT)
    proc = start_tfcluster("up", spec, "--plain")
    seen: list[str] = []
    try:
        wait_line(proc, r"tfcluster: worker:1 holds the others back: they spend \d+ % of their time inside", seen, 300)
        threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True).start()  # (it keeps flowing)
        said = tfcluster("status", spec, timeout=60)
        assert re.search(r"^straggler: worker:1 holds the others back: .* it \d+ %", said.stdout, re.M), said.stdout
        as_json = json.loads(tfcluster("status", spec, "--json", timeout=60).stdout)
        assert as_json["straggler"]["task"] == "worker:1", as_json["straggler"]
        assert [(e["task"], bool(e.get("why"))) for e in events(spec) if isinstance(e, ev.Straggler)] == [("worker:1", True)]
        assert not any("worker:0 holds" in line for line in seen), "".join(seen[-40:])
    finally:
        tfcluster("down", spec, timeout=120)
        proc.wait(timeout=60)
    assert_no_processes(spec)


def test_tfcluster_stacks_prints_every_live_tasks_stacks(tmp_path):
    # Trains on (no hang), a metrics thread on each worker: `stacks` shows both workers' threads.
    spec = hang_spec(tmp_path, "silent", "--after", "1000000", "--steps", "1000000",
                     watchdog="{startup_timeout: 240, stop_grace: 2, hang_timeout: 0}")
    proc = start_tfcluster("up", spec, "--plain")
    seen: list[str] = []
    try:
        def both_metrics() -> bool:
            seen.append(proc.stdout.readline())
            return all(any(s.startswith(f"[{k}] {k} metrics: ok") for s in seen) for k in ("worker:0", "worker:1"))
        wait_for(both_metrics, 240, interval=0, what="both workers training", detail=lambda: "".join(seen[-30:]))
        # (its output keeps flowing to a reader: a thread drains it while `stacks` runs)
        drain = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
        drain.start()
        result = tfcluster("stacks", spec, timeout=120)
        assert result.returncode == 0, result.stderr
        for key in ("worker:0", "worker:1"):
            assert f"== {key} ==" in result.stdout, result.stdout
        assert result.stdout.count("in metrics_thread") == 2, result.stdout
        # (each worker's main thread, training at the script's top level; which thread faulthandler
        # calls "Current" depends on the one that dumped, the task's own stacks thread)
        assert len(re.findall(r'train\.py", line \d+ in <module>', result.stdout)) == 2, result.stdout
        assert result.stdout.count("native frames (py-spy dump --native, pid ") == 2, result.stdout
        one = tfcluster("stacks", spec, "worker:1", timeout=120)
        assert one.returncode == 0 and "== worker:1 ==" in one.stdout and "== worker:0 ==" not in one.stdout, one
        # Nothing of it on the run's console or in the task's output: the stacks went to the record (on the
        # task's control channel).
        assert not any("most recent call first" in s for s in seen), "".join(seen[-40:])
        assert "most recent call first" in (run_dir(spec) / "stacks" / "live" / "worker-1.txt").read_text()
        assert "most recent call first" not in (run_dir(spec) / "logs" / "worker-1.log").read_text()  # (not output)
        assert "most recent call first" not in (run_dir(spec) / "output.log").read_text()  # (what attach shows)
    finally:
        tfcluster("down", spec, timeout=120)
        proc.wait(timeout=60)
    assert_no_processes(spec)
