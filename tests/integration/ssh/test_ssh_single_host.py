"""A single-host strategy over ssh (a single GPU VM over ssh is the common case):
`mirrored` with two CPU replicas as the one task on one remote host, killed with SIGKILL
mid-epoch, restarted and resumed from its backup in the remote state dir; the final model is
fetched back."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support.tfrun import last_step_before, progress, run_and_act

from .conftest import PY
from tests.support.ssh_helpers import pidfiles

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.tf]


def test_mirrored_on_one_ssh_host_resumes_after_sigkill_and_the_model_comes_back(lab, make_spec, tmp_path):
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", "2", "--steps-per-epoch", "12", "--batch-size", "16", "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        workers=1, hosts=["h1"], strategy="mirrored", devices={"cpus": 2}, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        restart={"max_restarts": 1}, ssh={"require": ["tensorflow", "tf_keras"]},
    )

    def kill_worker0(_proc):
        os.kill(pidfiles(spec, 1)["worker-0.0.pid"][1], signal.SIGKILL)  # the task itself, on h1

    # Killed after step 5: 7 steps (2 s) before the first epoch's end, which the TensorBoard
    # check below needs it to beat.
    code, out = run_and_act(spec, [(r"\[worker:0\] tfcluster-step epoch=0 step=5 ", kill_worker0)], timeout=280)
    assert code == 0, out[-5000:]
    assert "worker:0 failed: killed by SIGKILL" in out, out[-3000:]
    first, resumed = progress(out, "start")
    # Two replicas on the one host, no TF cluster; resumed from the backup (every 3 steps)
    # before the kill.
    assert (first["strategy"], first["replicas"], first["global_batch"]) == ("mirrored", "2", "32"), first
    step, last_seen = int(resumed["global_step"]), last_step_before(out, "worker:0 failed")
    assert first["global_step"] == "0" and step % 3 == 0 and 3 <= step <= last_seen + 3, (resumed, last_seen)
    [result] = progress(out, "result")
    assert int(result["steps_run"]) == 24 - int(resumed["global_step"]), result
    assert 0.0 <= float(result["accuracy"]) <= 1.0
    plan = json.loads((spec.parent / "runs" / "sshtest" / "latest" / "plan.json").read_text())
    [task] = plan["tasks"]
    assert task["host"] == "h1" and plan["cluster"] is None, plan
    local = spec.parent / "runs" / "sshtest" / "state" / "final_model"
    assert (local / "saved_model.pb").is_file(), out[-3000:]
    # The chief's TensorBoard scalars came back with it (written on h1 at each epoch's end; the
    # first attempt died before its first, so one file), and `tfcluster tensorboard` finds them.
    assert "fetched final_model, tensorboard from h1" in out, out[-3000:]
    train = local.parent / "tensorboard" / "train"
    assert len(list(train.glob("events.out.tfevents.*"))) == 1, list(train.iterdir())
    from launcher.loader.load import load_spec
    from launcher.app.tensorboard import logdir_of

    assert logdir_of(load_spec(str(spec))) == local.parent / "tensorboard"
