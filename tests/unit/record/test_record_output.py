"""A run's output.log is its console's lines (``attach`` and ``logs`` without a task show it); a
task's log holds what it printed, and also what was asked of it out of band (its stacks)."""

from __future__ import annotations


def test_a_line_kept_off_the_console_goes_to_the_tasks_log_alone(tmp_path):
    from launcher.app.up import plan_for
    from launcher.loader.load import load_spec
    from launcher.record.writer import RunRecord
    from tests.support.specs import script_spec

    plan = plan_for(load_spec(script_spec(tmp_path, "pass\n")).spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    key = plan.keys[0]
    record.log_line(key, "epoch 1")
    record.log_line(key, "Thread 0x00007f (most recent call first):", console=False)
    record.log_line(key, "epoch 2")
    record.close()
    assert (record.dir / "output.log").read_text() == f"[{key}] epoch 1\n[{key}] epoch 2\n"
    assert record.log_path(key).read_text() == "epoch 1\nThread 0x00007f (most recent call first):\nepoch 2\n"
