"""The local backend starts what the request says (launcher/backends/process.py's ``StartRequest``):
a standby is told so and given its promotion file, a cold start neither; only a request with
``fork`` is offered to the run's zygote; and what the handle says of its process is typed. Real
processes (a few lines of Python each), no TensorFlow."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from launcher.app.up import plan_for
from launcher.backends.base import StartRequest
from launcher.backends.local import LocalBackend
from launcher.backends.process import LocalProcess
from launcher.backends.zygotes import LocalZygote
from launcher.contract import envnames
from launcher.loader.load import load_spec
from launcher.record.writer import RunRecord
from tests.support.specs import script_spec
from tests.support.waits import wait_for

TELLS = f"""
import os
for name in ({envnames.STANDBY!r}, {envnames.STANDBY_ENV!r}, {envnames.RESTART_COUNT!r}):
    print(name + "=" + os.environ.get(name, "<unset>"), flush=True)
"""


def _started(tmp_path: Path, monkeypatch, requests) -> tuple[dict, list, Path]:
    """Each of ``requests`` (a function of the plan) started on a local run of TELLS; what each
    task printed, the commands offered to the zygote, and the run's dir."""
    offered: list = []
    monkeypatch.setattr(LocalZygote, "socket_for", lambda self, argv, env: (offered.append(list(argv)), (None, argv))[1])
    loaded = load_spec(script_spec(tmp_path, TELLS))
    plan = plan_for(loaded.spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    backend = LocalBackend.from_spec(loaded, record)
    lines: dict[str, list[str]] = {}
    lock = threading.Lock()

    def sink(key: str, line: str) -> None:
        with lock:
            lines.setdefault(key, []).append(line)

    try:
        handles = [backend.tasks.start(r, sink) for r in requests(plan)]
        wait_for(lambda: all(h.poll() is not None for h in handles), 30, 0.05, what="the tasks exiting")
        for h in handles:
            h.drain(5)
        assert [h.poll() for h in handles] == [0] * len(handles), lines
        infos = [h.info() for h in handles]
        assert all(isinstance(i, LocalProcess) and i.pgid == i.pid and i.local_group() == i.pid for i in infos)
        json.dumps([i.to_json() for i in infos])  # the record's shape: plain JSON
    finally:
        backend.close()
        record.close()
    return lines, offered, record.dir


def test_a_standby_is_told_so_and_a_cold_start_is_not(tmp_path, monkeypatch):
    told = {envnames.RESTART_COUNT: "1"}
    lines, offered, run_dir = _started(tmp_path, monkeypatch, lambda plan: [
        StartRequest(plan.task("worker:0"), told, standby=True), StartRequest(plan.task("worker:1"), told)])
    standby, cold = lines["worker:0"], lines["worker:1"]
    assert f"{envnames.STANDBY}=1" in standby and f"{envnames.RESTART_COUNT}=1" in standby
    promotion = next(x for x in standby if x.startswith(envnames.STANDBY_ENV + "=")).split("=", 1)[1]
    assert Path(promotion).parent == run_dir / "standby"  # beside the run's record (see promote)
    assert cold == [f"{envnames.STANDBY}=<unset>", f"{envnames.STANDBY_ENV}=<unset>", f"{envnames.RESTART_COUNT}=1"]
    assert offered == []  # neither asked to be forked: the zygote is not even asked


def test_only_a_request_to_fork_is_offered_to_the_zygote(tmp_path, monkeypatch):
    lines, offered, _ = _started(tmp_path, monkeypatch, lambda plan: [
        StartRequest(plan.task("worker:0"), {}, fork=True), StartRequest(plan.task("worker:1"), {}, fork=False)])
    assert len(offered) == 1 and offered[0][0] == sys.executable and offered[0][-1] == "task.py"
    assert set(lines) == {"worker:0", "worker:1"}
