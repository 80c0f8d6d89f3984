"""``--epoch-eval`` (what ``tfcluster compare`` turns on with $TFCLUSTER_EPOCH_EVAL=1): after every
epoch the test split is evaluated and the epoch line carries test_loss/test_accuracy, under
fit and the custom loop, a single-host strategy and parameter_server. The last epoch's test
figures are the final evaluation's (same weights), which checks them independently."""

from __future__ import annotations

import pytest

from tests.support.tfrun import assert_no_processes, progress, up, write_spec

pytestmark = [pytest.mark.integration, pytest.mark.tf]


@pytest.mark.parametrize("strategy, tasks, loop", [
    ("mirrored", "{worker: 1}", "custom"),
    ("parameter_server", "{chief: 1, ps: 1, worker: 1}", "fit"),
])
def test_epoch_lines_carry_the_test_split_metrics(tmp_path, tfds_dir, strategy, tasks, loop):
    extra = "devices: {cpus: 2}\n" if strategy == "mirrored" else ""
    spec = write_spec(tmp_path, tfds_dir, f"python -m worker --epochs 2 --batch-size 32 --loop {loop}",
                      tasks=tasks, strategy=strategy, extra=extra)
    # $TFCLUSTER_EPOCH_EVAL through the spec's env, as compare sets it.
    text = spec.read_text().replace("  TF_CPP_MIN_LOG_LEVEL: \"2\"\n",
                                    "  TF_CPP_MIN_LOG_LEVEL: \"2\"\n  TFCLUSTER_EPOCH_EVAL: \"1\"\n")
    spec.write_text(text)
    result = up(spec)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    task = "chief:0" if strategy == "parameter_server" else "worker:0"
    epochs, res = progress(result.stdout, "epoch", task), progress(result.stdout, "result", task)
    assert [e["epoch"] for e in epochs] == ["1", "2"], result.stdout[-3000:]
    for e in epochs:
        assert 0.0 <= float(e["test_accuracy"]) <= 1.0 and float(e["test_loss"]) > 0, e
        assert int(e["global_step"]) > 0
    assert float(epochs[-1]["test_accuracy"]) == pytest.approx(float(res[0]["accuracy"]), abs=1e-4)
    assert float(epochs[-1]["test_loss"]) == pytest.approx(float(res[0]["loss"]), abs=1e-3)
    assert float(res[0]["accuracy"]) > 0.2  # above chance (10 classes)
    assert_no_processes(spec)
