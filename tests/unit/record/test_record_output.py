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


def test_the_console_follows_the_records_progress_as_it_follows_its_lines(tmp_path):
    """The supervisor never calls the console: a task's printed line reaches it through the log's
    line listeners, a progress record through the progress file's (as people's lines), and a
    line or record kept off the console (a standby being stopped) reaches only the files."""
    import io

    from launcher.app.up import plan_for
    from launcher.loader.load import load_spec
    from launcher.record.layout import progress_path
    from launcher.record.view import RunModel
    from launcher.record.writer import RunRecord
    from launcher.ui.console import Console
    from tests.support.specs import script_spec

    plan = plan_for(load_spec(script_spec(tmp_path, "pass\n")).spec)
    record = RunRecord(tmp_path / "runs", plan).create()
    key = plan.keys[0]
    out = io.StringIO()
    Console(out=out, err=io.StringIO(), color=False).listen(record, RunModel())
    record.log_line(key, "tfcluster-eval checkpoint=printed loss=0.1 accuracy=0.9")  # printed: the task's text
    record.progress_line(key, "tfcluster-eval checkpoint=ckpt-1 global_step=10 loss=0.5 accuracy=0.7")
    record.progress_line(key, "(standby) tfcluster-standby ready after=1.0s", console=False)
    record.log_line(key, "(standby) Killed", console=False)
    record.close()
    assert out.getvalue() == (f"[{key}] tfcluster-eval checkpoint=printed loss=0.1 accuracy=0.9\n"
                              f"[{key}] evaluated ckpt-1  loss 0.5000  accuracy 0.700\n")
    assert progress_path(record.dir, key).read_text() == (
        "tfcluster-eval checkpoint=ckpt-1 global_step=10 loss=0.5 accuracy=0.7\n"
        "(standby) tfcluster-standby ready after=1.0s\n")
