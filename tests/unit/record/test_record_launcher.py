"""launcher.json as tasks start: written at once for a task started alone, once at the end of a
group's start (``RunRecord.tasks_starting``), also when a start in the group fails."""

from __future__ import annotations

import json

import pytest

from launcher.app.up import plan_for
from launcher.record.writer import RunRecord
from launcher.loader.load import parse_spec


def _record(tmp_path) -> RunRecord:
    spec = parse_spec("name: s\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\ntasks: {worker: 3}\n")
    return RunRecord(tmp_path / "runs", plan_for(spec)).create()


def _tasks(rec: RunRecord) -> dict:
    return json.loads((rec.dir / "launcher.json").read_text())["tasks"]


def test_a_task_started_alone_is_in_launcher_json_at_once(tmp_path):
    rec = _record(tmp_path)
    rec.task_started("worker:0", attempt=0, pid=11)
    assert _tasks(rec) == {"worker:0": {"attempt": 0, "pid": 11}}
    rec.task_started("worker:1", attempt=0, pid=12)
    assert set(_tasks(rec)) == {"worker:0", "worker:1"}
    rec.close()


def test_a_group_start_writes_launcher_json_once_at_its_end_with_every_task(tmp_path, monkeypatch):
    rec = _record(tmp_path)
    writes = []
    real = RunRecord._write_launcher
    monkeypatch.setattr(RunRecord, "_write_launcher", lambda self: (writes.append(set(self._tasks)), real(self)))
    with rec.tasks_starting():
        for i in range(3):
            rec.task_started(f"worker:{i}", attempt=0, pid=10 + i)
            assert _tasks(rec) == {}  # (as create wrote it) not yet: the group is still starting
    assert writes == [{"worker:0", "worker:1", "worker:2"}]
    assert _tasks(rec)["worker:2"] == {"attempt": 0, "pid": 12}
    rec.task_started("worker:0", attempt=1, pid=20)  # a restart alone afterwards: at once again
    assert len(writes) == 2 and _tasks(rec)["worker:0"]["pid"] == 20
    rec.close()


def test_a_start_that_fails_in_the_group_still_leaves_the_tasks_started_before_it(tmp_path):
    rec = _record(tmp_path)
    with pytest.raises(RuntimeError):
        with rec.tasks_starting():
            rec.task_started("worker:0", attempt=0, pid=10)
            raise RuntimeError("worker:1 could not start")
    assert set(_tasks(rec)) == {"worker:0"}
    rec.close()


def test_nested_group_starts_write_once_at_the_outer_end(tmp_path, monkeypatch):
    rec = _record(tmp_path)
    writes = []
    real = RunRecord._write_launcher
    monkeypatch.setattr(RunRecord, "_write_launcher", lambda self: (writes.append(set(self._tasks)), real(self)))
    with rec.tasks_starting():
        with rec.tasks_starting():
            rec.task_started("worker:0", attempt=0, pid=10)
        assert writes == []
        rec.task_started("worker:1", attempt=0, pid=11)
    assert writes == [{"worker:0", "worker:1"}]
    with rec.tasks_starting():
        pass  # nothing new started: no write
    assert len(writes) == 1
    rec.close()
