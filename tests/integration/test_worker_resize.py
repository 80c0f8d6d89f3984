"""The bundled worker resumed by a group of another size (an elastic MWMS group shrinks
when a host is lost with no spare, and grows back when it returns), with real TensorFlow on the
local backend: ``tfcluster up`` of 2 workers stopped gracefully in epoch 1 (SIGINT to the
launcher: every worker saves the step they agree on), ``up`` of the same spec with 1 worker
stopped the same way, then ``up`` with 2 workers again to the end (and 2 -> 3 workers); the runs
share the spec's state dir.

Per-replica batch 32 on digits (1437 training examples): 2 workers make 64 examples a step, 23
steps an epoch (one pass); 1 worker 32 a step, 45 steps. Each resume must start at the saved
global step, at the same examples of the interrupted epoch (6 steps of 64 done = 12 of 32;
41 of 32 = 20.5 of 64 -> 20, rounded down: half a step repeated, none skipped), print every
epoch line once with the global step that epoch's length gives, and run exactly the steps left.

Every resize starts with Ctrl-C (SIGINT to ``up``) mid-epoch: every worker saves the step they
agree on, ``up`` exits 130, and the next ``up`` starts at exactly that global step with nothing
redone, for both loops (the one graceful-preemption-by-Ctrl-C check with TensorFlow).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.tfrun import RUN_TIMEOUT, assert_no_processes, progress, start, up, write_spec
from tests.support.cli import ROOT
from tests.support.waits import read_rest, wait_line

pytestmark = [pytest.mark.integration, pytest.mark.tf]

EPOCHS = 3
TRAIN = f"python -m worker --loop {{loop}} --epochs {EPOCHS} --step-delay 0.05 --progress-every 5"
STEPS = {1: 45, 2: 23, 3: 15}  # steps per epoch (one pass over 1437 examples) by number of workers
BATCH = {1: 32, 2: 64, 3: 96}  # global batch by number of workers


def set_workers(spec, n: int) -> None:
    text = spec.read_text()
    spec.write_text(re.sub(r"tasks: \{worker: \d+\}", f"tasks: {{worker: {n}}}", text))


def run_and_stop(spec, should_stop, what: str) -> tuple[int, str]:
    """``tfcluster up spec``; at the first step line of worker:0 for which ``should_stop(fields)``
    holds, SIGINT to the launcher (graceful preemption); then to the end. Returns (exit code,
    output); the launcher's process group does not outlive the call."""
    proc = start(spec)
    seen: list[str] = []
    try:
        while True:
            try:
                wait_line(proc, r"^\[worker:0\] tfcluster-step ", seen, RUN_TIMEOUT)
            except AssertionError as exc:
                raise AssertionError(f"waiting for {what}: {exc}") from None
            if should_stop(progress(seen[-1], "step")[0]):
                break
        proc.send_signal(signal.SIGINT)
        rest = read_rest(proc, RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.returncode, "\n".join(seen) + "\n" + rest


def position(fields: dict) -> tuple[int, int, int]:
    """(epoch, steps done in it, global step) of a start or preempted line."""
    return int(fields["epoch"]), int(fields["step"]), int(fields["global_step"])


def saved_position(out: str, workers: int) -> tuple[int, int, int]:
    """Where every worker of the stopped run saved (they must agree)."""
    saved = {position(p) for i in range(workers) for p in progress(out, "preempted", f"worker:{i}")}
    assert len(saved) == 1 and len(progress(out, "preempted")) == 1, out[-3000:]
    return saved.pop()


def check_epoch_lines(out: str, start: tuple[int, int, int], steps: int) -> list[int]:
    """The epochs this run ended, each at the global step its length gives from where the run
    started: no step skipped, none run twice."""
    epoch, done, global_step = start
    lines = progress(out, "epoch")
    for i, line in enumerate(lines):
        assert int(line["epoch"]) == epoch + 1 + i, lines
        assert int(line["global_step"]) == global_step + (steps - done) + i * steps, (start, steps, lines)
    return [int(line["epoch"]) for line in lines]


def check_start(out: str, workers: int, at: tuple[int, int, int]) -> None:
    start = progress(out, "start")
    assert len(start) == 1, start
    start = start[0]
    assert int(start["replicas"]) == workers and int(start["global_batch"]) == BATCH[workers], start
    assert int(start["steps_per_epoch"]) == STEPS[workers], start
    assert position(start) == at, (start, at)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_shrink_to_one_worker_then_grow_back_to_two(tmp_path, tfds_dir, loop):
    spec = write_spec(tmp_path, tfds_dir, TRAIN.format(loop=loop))
    spec.write_text(spec.read_text().replace("stop_grace: 3", "stop_grace: 30"))

    # 2 workers, stopped in epoch 1.
    code, out1 = run_and_stop(spec, lambda f: f["epoch"] == "1", "worker:0's first step line in epoch 1")
    assert code == 130, out1[-3000:]
    check_start(out1, 2, (0, 0, 0))
    e1, d1, g1 = saved_position(out1, 2)
    assert e1 >= 1 and 0 < d1 < STEPS[2] and g1 == e1 * STEPS[2] + d1, (e1, d1, g1)
    epochs = check_epoch_lines(out1, (0, 0, 0), STEPS[2])
    assert_no_processes(spec)

    # Shrunk to 1 worker: the same examples of epoch e1 done, at half the batch twice the steps.
    set_workers(spec, 1)
    code, out2 = run_and_stop(spec, lambda f: int(f["global_step"]) >= g1 + 10,
                              f"worker:0's step line at global step {g1 + 10} or later")
    assert code == 130, out2[-3000:]
    resumed2 = (e1, 2 * d1, g1)
    check_start(out2, 1, resumed2)
    assert f"epoch {e1} with {d1} step(s) done -> epoch {e1} with {2 * d1} step(s) done" in out2
    e2, d2, g2 = saved_position(out2, 1)
    assert g2 - g1 == (e2 - e1) * STEPS[1] + d2 - 2 * d1 and g2 >= g1 + 10, (resumed2, (e2, d2, g2))
    epochs += check_epoch_lines(out2, resumed2, STEPS[1])
    assert_no_processes(spec)

    # Grown back to 2 workers, to the end: d2 steps of 32 are d2 / 2 of 64, rounded down.
    set_workers(spec, 2)
    result = up(spec)
    out3 = result.stdout
    assert result.returncode == 0, out3[-3000:] + result.stderr[-3000:]
    resumed3 = (e2, d2 // 2, g2) if d2 < STEPS[1] else (e2 + 1, 0, g2)
    check_start(out3, 2, resumed3)
    epochs += check_epoch_lines(out3, resumed3, STEPS[2])
    assert epochs == list(range(1, EPOCHS + 1)), epochs  # every epoch once, in order
    left = (STEPS[2] - resumed3[1]) + (EPOCHS - 1 - resumed3[0]) * STEPS[2]
    res = progress(out3, "result")
    assert len(res) == 1, out3[-3000:]
    res = res[0]
    assert int(res["steps_run"]) == left, (resumed3, res)
    assert int(res["epochs"]) == EPOCHS
    if loop == "fit":
        assert int(res["epochs_run"]) == EPOCHS - resumed3[0], res
    assert int(progress(out3, "epoch")[-1]["global_step"]) == g2 + left
    assert float(res["accuracy"]) > 0.2, res
    assert_no_processes(spec)


@pytest.mark.parametrize("loop", ["custom"])
def test_grow_from_two_to_three_workers(tmp_path, tfds_dir, loop):
    """d steps of 64 done are d x 64 / 96 of 96, rounded down (7 -> 4: 64 examples repeated).
    One loop: the conversion is the same function for both (worker/resize.py, unit-tested in
    tests/unit/worker/test_worker_resize.py), and fit's resume at another size is the shrink and
    grow back above."""
    spec = write_spec(tmp_path, tfds_dir, TRAIN.format(loop=loop))
    spec.write_text(spec.read_text().replace("stop_grace: 3", "stop_grace: 30"))
    code, out1 = run_and_stop(spec, lambda f: f["epoch"] == "1", "worker:0's first step line in epoch 1")
    assert code == 130, out1[-3000:]
    e1, d1, g1 = saved_position(out1, 2)
    assert_no_processes(spec)

    set_workers(spec, 3)
    result = up(spec)
    out2 = result.stdout
    assert result.returncode == 0, out2[-3000:] + result.stderr[-3000:]
    resumed = (e1, d1 * 64 // 96, g1)
    check_start(out2, 3, resumed)
    epochs = check_epoch_lines(out1, (0, 0, 0), STEPS[2]) + check_epoch_lines(out2, resumed, STEPS[3])
    assert epochs == list(range(1, EPOCHS + 1)), epochs
    left = (STEPS[3] - resumed[1]) + (EPOCHS - 1 - e1) * STEPS[3]
    res = progress(out2, "result")[0]
    assert int(res["steps_run"]) == left and float(res["accuracy"]) > 0.2, (resumed, res)
    assert_no_processes(spec)

def test_evaluator_knows_the_custom_loops_final_checkpoint_whatever_its_global_step(tmp_path, tfds_dir):
    """The evaluator's TF_CONFIG says 2 workers (64 a step: 23 steps an epoch, 69 in 3 epochs),
    but the checkpoints come from training at 32 a step (45 steps an epoch: ckpt-45, ckpt-90,
    ckpt-135), as after a shrink. ckpt-90 is past 69 yet only epoch 2: the evaluator must wait
    for ckpt-135, the checkpoint that records epoch 3."""
    state = tmp_path / "state"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TFDS_DATA_DIR=str(tfds_dir), TF_CPP_MIN_LOG_LEVEL="2")
    evaluator_env = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"],
                                                                "evaluator": ["localhost:3"]},
                                                    "task": {"type": "evaluator", "index": 0}}))
    flags = ["--loop", "custom", "--epochs", str(EPOCHS), "--model-dir", str(state)]
    evaluator = subprocess.Popen([sys.executable, "-m", "worker", *flags, "--eval-timeout", "120"], cwd=ROOT,
                                 env=evaluator_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True)
    seen: list[str] = []
    try:
        wait_line(evaluator, r"evaluator watching .*final checkpoint: the one recording epoch 3, else ckpt-69",
                  seen, RUN_TIMEOUT)
        train = subprocess.run([sys.executable, "-m", "worker", "--strategy", "default", *flags], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=RUN_TIMEOUT)
        assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
        assert int(progress("\n".join(f"[worker:0] {l}" for l in train.stdout.splitlines()),
                            "result")[0]["steps_run"]) == EPOCHS * STEPS[1]
        out = "\n".join(seen) + "\n" + read_rest(evaluator, RUN_TIMEOUT)
    finally:
        if evaluator.poll() is None:
            os.killpg(evaluator.pid, signal.SIGKILL)
            evaluator.wait(timeout=30)
    assert evaluator.returncode == 0, out[-3000:]
    evals = [l.split()[1] for l in out.splitlines() if l.startswith("tfcluster-eval ")]
    assert evals == ["checkpoint=ckpt-45", "checkpoint=ckpt-90", "checkpoint=ckpt-135"], out[-3000:]
    assert "tfcluster-eval_done reason=final checkpoint=ckpt-135 evaluated=3" in out, out[-3000:]
