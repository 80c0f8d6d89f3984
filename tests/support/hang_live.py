"""What the hang watchdog's tests on every backend share: the user's script
(tests/support/hang_script.py), where each kind of hang stops in it, and ``tfcluster stacks`` on
the live run while its task is stuck, before the watchdog acts (an explicit hang_timeout leaves
that window): every live task's stacks on stdout, each its own, nothing of them on the console."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable

from tests.support.cli import ROOT
from tests.support.waits import wait_line
import launcher.record.events as ev
from launcher.backends import pyspy
from tests.support.records import kinds, of, read_records

SCRIPT = ROOT / "tests" / "support" / "hang_script.py"
# Its stand-in without TensorFlow (the same modes, functions and lines to stop at, the same LIES):
# for the decisions on local (tests/integration/test_hang.py).
STUB = ROOT / "tests" / "support" / "hang_stub.py"
TASKS = ("worker:0", "worker:1")
# MODE: the function the stuck task stops in and the statement it stops at.
STUCK = {"generator": ("retry_forever", "time.sleep(1)"), "silent": ("silent_stall", "time.sleep(100000)"),
         "busy": ("on_train_batch_end", "while True: n += 1"), "deadlock": ("on_train_batch_end", "with held:")}
# faulthandler's header of each thread's stack: none of it may reach a run's console.
FAULTHANDLER = "(most recent call first)"
NATIVE = "native frames (py-spy dump --native, pid "
HELD = pyspy.HELD.format(limit=pyspy.PAUSE_LIMIT)  # (said instead, where py-spy would hold a task too long)


def lies(script: Path = SCRIPT) -> list[str]:
    """The script's LIES (``--lies``): every line of tfcluster's protocol it prints, as it prints them."""
    tree = ast.parse(script.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LIES")
    return ast.literal_eval(node.value)


def check_output_is_data(record: Path, status: subprocess.CompletedProcess, out: str,
                         keys: tuple[str, ...] = TASKS, script: Path = SCRIPT, restarted: bool = True) -> None:
    """A run of the script with ``--lies --stall-once`` (its first attempt stuck, its second trained
    to the end) ended 0 (``restarted``; else a run of ``--lies`` that restart.max_restarts: 0 ended
    at its stall, failed), and nothing the tasks printed steered it: each task's log holds every
    line of LIES as printed (twice: stdout and stderr), its progress file none of them; no fake
    progress or goodput in ``status`` (``status``: ``status --json``): no global step of theirs,
    goodput an upper bound (the script reports no step); the hang was found by the count (one
    failure, ``stuck``), in spite of the fake beats that rose every second; no preemption or lost
    lease was taken from a printed line; nothing of the protocol in ``up``'s plain output (``out``)
    but what the tasks printed."""
    events = read_records(record)
    outcome = of(events, ev.RunOutcome)
    assert outcome and (outcome[-1].outcome, outcome[-1].attempts) == (
        ("succeeded", 2) if restarted else ("failed", 1)), outcome
    failures = of(events, ev.Failure)
    assert len(failures) == 1 and failures[0].reason.startswith("stuck "), failures
    assert not of(events, ev.HostPreempted, ev.OutputFault, ev.HostLost), kinds(events)
    for key in keys:
        log = (record / "logs" / f"{key.replace(':', '-')}.log").read_bytes().decode("utf-8", "replace")
        lines = log.split("\n")
        for lie in lies(script):
            assert lines.count(lie) >= 2, (key, lie, log[-3000:])
        progress = record / "logs" / f"{key.replace(':', '-')}.progress"
        text = progress.read_text() if progress.exists() else ""
        assert "99999" not in text and "stacks=" not in text and "fake" not in text, (key, text[-3000:])
    view = json.loads(status.stdout)
    for task in view["tasks"]:
        assert (task.get("global_step") or 0) < 99990 and (task.get("examples_per_sec") or 0) < 1e8, task
    assert view["goodput"]["exact"] is False, view["goodput"]  # (no step of the script's own: an upper bound)
    assert "no word for" not in out, out[-4000:]
    for line in out.splitlines():  # the protocol in the tasks' lines: only what they printed
        if re.match(r"\[\w+:\d+\] (\(standby\) )?tfcluster-", line):
            text = line.split("] ", 1)[1]
            assert text in lies(script) or re.fullmatch(r"tfcluster-beat n=\d+ tf=1 in=0\.00", text), line


def _number(statement: str, after: int = 0, script: Path = SCRIPT) -> int:
    """The number of the script's first line after line ``after`` that is ``statement`` (its comment aside)."""
    lines = script.read_text().splitlines()
    return next(n for n in range(after + 1, len(lines) + 1) if lines[n - 1].split("  #")[0].strip() == statement)


def stuck_line(mode: str, name: str = "train.py", script: Path = SCRIPT) -> str:
    """What the failure quotes for ``mode``'s hang in ``script`` run as ``name``, e.g.
    ``train.py:51 in retry_forever(): time.sleep(1)`` (read from the script: its lines may move)."""
    func, statement = STUCK[mode]
    start = next(n for n, line in enumerate(script.read_text().splitlines(), 1) if f"def {func}(" in line)
    return f"{name}:{_number(statement, start, script)} in {func}(): {statement}"


def sections(text: str) -> dict[str, str]:
    """``tfcluster stacks``'s stdout by task: the text under each ``== TASK ==`` line."""
    parts = re.split(r"^== (\S+) ==$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def check_live_stacks(stacks: Callable[..., subprocess.CompletedProcess], mode: str, stuck: str,
                      name: str, native: bool = False, one_task: bool = True, script: Path = SCRIPT) -> None:
    """``stacks(*args)`` runs ``tfcluster stacks SPEC *args``: every live task's stacks are there,
    each a process of the script ``name`` in its ``fit`` (its ``<module>`` frame), the stuck one's
    alone in ``mode``'s function; ``worker:1`` alone with its TASK. Both exit 0. ``native``: each
    task's native frames follow (py-spy, installed with the test extra, run where the task runs):
    a frame of a shared library and the script's own ``fit`` line among them, or the line that says
    py-spy held the task too long and was ended (a busy host). ``script``: the script
    the tasks run (its stand-in, STUB, has its ``fit`` line elsewhere)."""
    fit = next(n for n, line in enumerate(script.read_text().splitlines(), 1) if line.startswith("model.fit("))
    func = STUCK[mode][0]
    every = stacks()
    assert every.returncode == 0, every.stdout[-4000:] + every.stderr[-2000:]
    found = sections(every.stdout)
    assert sorted(found) == list(TASKS), every.stdout[-4000:] + every.stderr[-2000:]
    for key, text in found.items():
        assert FAULTHANDLER in text and f'{name}", line {fit} in <module>' in text, (key, text[-3000:])
        own = re.search(rf'{re.escape(name)}", line \d+ in {func}$', text, re.M) is not None
        assert own == (key == stuck), (key, stuck, func, text[-3000:])  # each task's own stacks
        if native and HELD in text:  # py-spy held the task 4 s on a busy host: ended, the task runs on
            assert NATIVE not in text, (key, text[-3000:])
        elif native:
            dump = text.split(NATIVE, 1)
            assert len(dump) == 2 and re.search(r"\(lib[^)]*\.so", dump[1]), (key, text[-3000:])
            # (py-spy names the script by its path from the working directory, or its basename)
            assert re.search(rf"<module> \((\S*/)?{re.escape(name)}:{fit}\)", dump[1]), (key, dump[1][-3000:])
        if mode == "silent":  # (its metrics thread, on every task)
            assert re.search(rf'{re.escape(name)}", line \d+ in metrics_thread$', text, re.M), (key, text[-3000:])
    if not one_task:  # (a run that restarts once the watchdog acts: ``stacks TASK`` could land after it)
        return
    one = stacks("worker:1")
    assert one.returncode == 0 and sorted(sections(one.stdout)) == ["worker:1"], one.stdout[-4000:] + one.stderr
    assert FAULTHANDLER in one.stdout, one.stdout[-4000:]


def stacks_while_stuck(proc: subprocess.Popen, stacks: Callable[..., subprocess.CompletedProcess], mode: str,
                       stuck: str, name: str, timeout: float, native: bool = False, one_task: bool = True) -> str:
    """``proc`` (``up``, its output one text pipe, leading its own process group) is waited on
    until ``stuck`` says it is stuck, the live stacks are checked, then its output is read to its
    end (``timeout`` s in all for each part): that output, which shows no stacks text."""
    seen: list[str] = []
    wait_line(proc, rf"\[{stuck}\] {stuck} is stuck now \({mode}\)", seen, timeout)
    rest: list[str] = []
    drain = threading.Thread(target=lambda: rest.extend(proc.stdout), daemon=True)  # (it keeps flowing)
    drain.start()
    check_live_stacks(stacks, mode, stuck, name, native, one_task)
    drain.join(timeout)
    assert not drain.is_alive(), f"up ran on past {timeout:g} s:\n" + "".join(rest[-40:])
    proc.wait(timeout=30)
    out = "\n".join(seen) + "\n" + "".join(rest)
    assert FAULTHANDLER not in out, out[-4000:]  # the stacks went to the logs and the record, not the console
    return out


def check_failure(record: Path, status: subprocess.CompletedProcess, stuck: str, line: str) -> None:
    """The run's record: its one ``failure`` event names ``stuck`` at ``line``, every live task's
    stacks at the stall are in it, and goodput (``status --json``: ``status``) counts ``hung``."""
    events = read_records(record)
    failure = [e for e in events if isinstance(e, ev.Failure)]
    assert len(failure) == 1 and failure[0]["task"] == stuck, failure
    assert failure[0]["reason"].startswith("stuck ") and line in failure[0]["reason"], failure
    for key in TASKS:
        assert FAULTHANDLER in (record / "stacks" / "1" / f"{key.replace(':', '-')}.txt").read_text(), key
    goodput = json.loads(status.stdout)["goodput"]
    assert goodput["badput"]["hung"] > 0, goodput


def stop(proc: subprocess.Popen) -> None:
    """Never leave ``up`` behind (it leads its own process group): Ctrl-C, then kill."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
