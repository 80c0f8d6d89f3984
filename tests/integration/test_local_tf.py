"""End to end on this machine with real TensorFlow workers under MultiWorkerMirroredStrategy.
(A user's own script reading plain TF_CONFIG, its arguments as given, run unmodified on 2 workers:
test_standby_plain_script.py; a user's Keras script training under MWMS with tf_keras:
test_keras_scripts.py.)"""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.support.tfrun import ROOT, progress, run_and_act, run_dir, up, write_spec
from tests.support.ports import free_base
from tests.support.processes import pids_with_env
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.tf]


def test_demo_trains_to_success(tmp_path, tfds_dir):
    """The demo spec as shipped trains to the end: the result, every epoch's checkpoint, the final
    model, the backup gone."""
    # The demo spec as shipped, moved to a temp dir, on free ports: two workers train.
    demo = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    demo["ports"] = {"base": free_base()}
    demo["env"] = {**demo.get("env", {}), "PYTHONPATH": str(ROOT), "TFDS_DATA_DIR": str(tfds_dir)}
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(demo))
    result = up(spec)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    final = progress(result.stdout, "result")
    assert len(final) == 1 and final[0]["epochs_run"] == "3"
    assert float(final[0]["accuracy"]) > 0.5 and float(final[0]["examples_per_sec"]) > 0
    assert progress(result.stdout, "result", "worker:1")[0]["accuracy"] == final[0]["accuracy"]
    state = tmp_path / "runs" / "demo" / "state"
    assert (state / "final_model" / "saved_model.pb").is_file()
    assert sorted(p.name for p in (state / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-001.index", "ckpt-002.index", "ckpt-003.index"]
    assert not (state / "backup").exists() or not any((state / "backup").iterdir())  # deleted after success
    logs = run_dir(spec) / "logs"
    assert "tfcluster-result" in (logs / "worker-1.progress").read_text()  # (its records: the control channel's)
    # (Ctrl-C mid-run, the agreed save and the next `up` resuming there: test_worker_resize.py.)


def test_tf_worker_exit_3_root_cause_others_stopped(tmp_path, tfds_dir):
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent("""\
        import json, os, sys, time
        import tensorflow as tf
        strategy = tf.distribute.MultiWorkerMirroredStrategy()  # from here on TF swallows SIGTERM
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            print("worker 1 giving up: disk full", flush=True)
            sys.exit(3)
        time.sleep(600)
    """))
    spec = write_spec(tmp_path, tfds_dir, f"python {script.name}")
    result = up(spec)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    err = result.stderr
    assert "tfcluster: error: worker:1 failed: exit code 3" in err
    assert "| worker 1 giving up: disk full" in err
    assert "stopping worker:0 (SIGKILL)" in err
    events = read_records(run_dir(spec))
    assert [e["task"] for e in events if isinstance(e, ev.Failure)] == ["worker:1"]
    assert pids_with_env("TFCLUSTER_RUN_ID", run_dir(spec).name) == []


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_launcher_signal_leaves_no_tf_worker(tmp_path, tfds_dir, how):
    spec = write_spec(tmp_path, tfds_dir, "python -m worker --epochs 50 --step-delay 0.05")
    def interrupt(proc) -> None:
        # Two wrappers, two TF workers, each worker's waiter (its parent), and the run's zygote
        # (launcher/remote/zygote.py) under its wrapper.
        pids = pids_with_env("TFCLUSTER_RUN_ID", run_dir(spec).name)
        zygote = [p for p in pids if b"zygote.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
        waiters = [p for p in pids if b"the waiter of task" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(pids) == 8 and len(zygote) == 2 and len(waiters) == 2, (pids, zygote, waiters)
        proc.send_signal(signal.SIGINT) if how == "SIGINT" else proc.kill()

    code, out = run_and_act(spec, [(r"tfcluster-first_step", interrupt)])
    run_id = run_dir(spec).name
    if how == "SIGINT":
        assert code == 130, out[-2000:]
        assert pids_with_env("TFCLUSTER_RUN_ID", run_id) == []
    else:
        wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 20, what="TF workers to die")
