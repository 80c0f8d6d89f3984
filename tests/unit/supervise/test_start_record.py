"""A group's start records its tasks' processes in launcher.json once, with every task of the
group, through the real supervisor (a scripted backend: tests/support/fakes.py); a task
restarted alone (parameter_server) is recorded at once."""

from __future__ import annotations

from launcher.record.writer import RunRecord
from tests.support.fakes import Script, ScriptedTasks, scripted, supervise

MWMS = """\
    name: s
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 4}
    restart: {max_restarts: 1, backoff: 0}
    watchdog: {stop_grace: 0}
"""


def _spy(monkeypatch) -> list[dict]:
    """Each launcher.json write: task key -> what it says of the task's process (its attempt, pid)."""
    writes: list[dict] = []
    real = RunRecord._write_launcher

    def spy(self):
        writes.append({k: dict(v) for k, v in self._tasks.items()})
        real(self)

    monkeypatch.setattr(RunRecord, "_write_launcher", spy)
    return writes


def test_each_group_start_writes_launcher_json_once_with_every_task(tmp_path, monkeypatch):
    writes = _spy(monkeypatch)
    backend = scripted(ScriptedTasks({("worker:2", 0): Script(code=137, polls=2)}, default=Script(code=0, polls=4)))
    result = supervise(tmp_path, MWMS, backend)
    assert result.code == 0, result.console
    started = [{k: v["attempt"] for k, v in w.items()} for w in writes if w]  # (create's own write has none)
    keys = {f"worker:{i}" for i in range(4)}
    assert started == [dict.fromkeys(keys, 0), dict.fromkeys(keys, 1)]


PS = """\
    name: s
    strategy: parameter_server
    entrypoint: python -m worker
    tasks: {chief: 1, worker: 2, ps: 1}
    restart: {max_restarts: 2}
    watchdog: {stop_grace: 0}
"""


def test_a_worker_restarted_alone_is_recorded_at_once(tmp_path, monkeypatch):
    writes = _spy(monkeypatch)
    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=1, polls=2), ("chief:0", 0): Script(code=0, polls=12)},
                                     default=Script(code=None, polls=0)))
    supervise(tmp_path, PS, backend)
    assert [k for k, _ in backend.tasks.started] == ["chief:0", "worker:0", "worker:1", "ps:0", "worker:1"]
    started = [w for w in writes if w]
    assert len(started) == 2 and len(started[0]) == 4  # the group, once; then worker:1 alone, at once
    assert set(started[1]) == set(started[0])
