"""A detached real TensorFlow run: ``down`` stops it through its supervisor with graceful
preemption (zero steps lost), and the next ``up`` resumes at the saved step."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.tfrun import assert_no_processes, progress, recorded, run_dir, up, write_spec
from tests.support.cli import tfcluster
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.tf]
# 90 steps: after step 10, 80 for status and down, two CLI starts, to land in. At 0.05 s a step
# that was 4-6 s, and in three suites run side by side at load 10-12 the training ended before
# `down` came (every worker logged step 90; the outcome: interrupted, nothing saved). At 1 s a step
# the window is 80 s; the resumed run, which needs no window, goes at full speed.
CUSTOM = "python -m worker --loop custom --epochs 3 --steps-per-epoch 30 --step-delay {delay} --progress-every 5"


def test_down_of_a_detached_tf_run_saves_and_the_next_up_resumes(tmp_path, tfds_dir):
    spec = write_spec(tmp_path, tfds_dir, CUSTOM.format(delay=1))
    spec.write_text(spec.read_text().replace("stop_grace: 3", "stop_grace: 30"))
    try:
        res = tfcluster("up", str(spec), "--detach", timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "is running detached" in res.stdout
        log = run_dir(spec) / "logs" / "worker-0.progress"  # (its records: the control channel's)
        wait_for(lambda: log.exists() and re.search(r"tfcluster-step epoch=0 step=10 ", log.read_text()), 180,
                 what="worker:0 at step 10")
        st = json.loads(tfcluster("status", str(spec), "--json").stdout)
        assert st["state"] == "running" and {t["state"] for t in st["tasks"]} == {"running"}, st
        w0 = [t for t in st["tasks"] if t["key"] == "worker:0"][0]
        assert w0["global_step"] >= 10 and 0 <= w0["accuracy"] <= 1 and w0["examples_per_sec"] > 0, w0
        down = tfcluster("down", str(spec), timeout=120)
        assert down.returncode == 0, down.stderr
        saved = [int(p["global_step"]) for p in recorded(run_dir(spec), "preempted")]
        assert len(saved) == 1 and saved[0] >= 10, recorded(run_dir(spec), "step")[-3:]
        assert recorded(run_dir(spec), "preempted", "worker:1")[0]["global_step"] == str(saved[0])  # both saved that step
        status = tfcluster("status", str(spec))
        assert status.returncode == 1 and ": stopped," in status.stdout.splitlines()[0], status.stdout
        assert_no_processes(spec)
        text = spec.read_text()
        assert CUSTOM.format(delay=1) in text
        spec.write_text(text.replace(CUSTOM.format(delay=1), CUSTOM.format(delay=0)))
        result = up(spec)
        assert result.returncode == 0, result.stdout[-3000:]
        assert int(progress(result.stdout, "start")[0]["global_step"]) == saved[0]  # zero steps redone
        assert int(progress(result.stdout, "result")[0]["steps_run"]) == 90 - saved[0]
    finally:
        tfcluster("down", str(spec))
