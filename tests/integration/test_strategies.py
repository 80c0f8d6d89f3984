"""The single-host strategies end to end through ``tfcluster up``: one task, no TF
cluster, the CNN trained with ``model.fit`` and then the custom loop, the replica count each
strategy reports, the test split evaluated after every epoch (``--epoch-eval``, which ``tfcluster
compare`` turns on; under parameter_server: test_pss.py's fit with the evaluator), resume after
a SIGKILL (fit and custom loop), graceful preemption (SIGTERM: the step is saved, the restart
resumes there). (multi_worker_mirrored and parameter_server train, with both loops, in
test_worker_metrics.py; the TPU error path on a machine without a TPU, the worker's one line and
exit 2 not retried, in test_compare.py's tpu configuration, through ``up``'s own path.)"""

from __future__ import annotations

import signal

import pytest

from tests.support.tfrun import (assert_no_processes, check_epoch_eval, events, kill_task, last_step_before, progress,
                                 run_and_act, up, with_epoch_eval, write_spec)
import launcher.record.events as ev

pytestmark = [pytest.mark.integration, pytest.mark.tf]
TRAIN = "python -m worker --epochs 2 --steps-per-epoch 12 --batch-size 16 --progress-every 4"


def tf_class(strategy: str) -> str:
    """The ``tf.distribute`` class ``strategy`` must build, as TensorFlow's public API names it
    here (module.qualname, the form of the start line's ``strategy_class``): the worker's own
    echo of the strategy name says nothing about what it built, so the default strategy standing
    in for OneDeviceStrategy, or MirroredStrategy for CentralStorageStrategy, fails this."""
    import tensorflow as tf

    cls = {"default": type(tf.distribute.get_strategy()), "one_device": tf.distribute.OneDeviceStrategy,
           "mirrored": tf.distribute.MirroredStrategy,
           "central_storage": tf.distribute.experimental.CentralStorageStrategy}[strategy]
    return f"{cls.__module__}.{cls.__qualname__}"


@pytest.mark.parametrize("strategy, replicas", [
    ("default", 1), ("one_device", 1), ("mirrored", 2), ("central_storage", 2)])
def test_single_host_strategy_trains_with_fit_then_custom_loop(tmp_path, tfds_dir, strategy, replicas):
    # One task process per loop, in one run: fit, then the custom loop on the same state dir;
    # both evaluate the test split after every epoch ($TFCLUSTER_EPOCH_EVAL, as compare sets it).
    command = f"sh -c '{TRAIN} --loop fit && {TRAIN} --loop custom'"
    spec = with_epoch_eval(write_spec(tmp_path, tfds_dir, command, tasks="{worker: 1}", strategy=strategy,
                                      extra="devices: {cpus: 2}\n"))
    result = up(spec)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    starts, results = progress(result.stdout, "start"), progress(result.stdout, "result")
    assert len(starts) == len(results) == 2, result.stdout[-3000:]
    for start, res in zip(starts, results):
        assert (start["strategy"], start["replicas"], start["global_batch"]) == (strategy, str(replicas),
                                                                                 str(16 * replicas))
        assert start["strategy_class"] == tf_class(strategy), start
        assert 0.2 < float(res["accuracy"]) <= 1.0, res  # above chance (10 classes)
    # The same seed, model, data and global batch: both loops take the same steps.
    epochs = progress(result.stdout, "epoch")
    assert [e["epoch"] for e in epochs] == ["1", "2", "1", "2"], result.stdout[-3000:]
    for loop_epochs, res in zip((epochs[:2], epochs[2:]), results):
        check_epoch_eval(loop_epochs, res)
    fit, custom = epochs[1], epochs[3]
    assert abs(float(fit["loss"]) - float(custom["loss"])) < 1e-3, (fit, custom)
    assert [e["task"] for e in events(spec) if isinstance(e, ev.Start)] == ["worker:0"]
    assert_no_processes(spec)


RESUMABLE = "python -m worker --batch-size 16 --progress-every 5 --save-freq 5 --step-delay 0.05"


# central_storage and one_device: tf_keras' BackupAndRestore refuses them unless sync.py lets them
# in. The custom loop resumes from its CheckpointManager instead. (mirrored with the custom loop and
# one_device with fit: in test_sigkill_then_sigterm_in_one_run below; fit's resume from the backup
# under a strategy BackupAndRestore takes as it is, MultiWorkerMirrored's: test_goodput.py.)
@pytest.mark.parametrize("strategy, loop", [("central_storage", "fit")])
def test_sigkill_resumes_from_the_backup(tmp_path, tfds_dir, strategy, loop):
    replicas = 1 if strategy == "one_device" else 2
    # 3 epochs of 20 steps, killed after global step 25: 35 steps left for the kill to land in.
    spec = write_spec(tmp_path, tfds_dir, f"{RESUMABLE} --epochs 3 --steps-per-epoch 20 --loop {loop}",
                      tasks="{worker: 1}", strategy=strategy, extra="devices: {cpus: 2}\nrestart: {max_restarts: 1}\n")
    code, out = run_and_act(spec, [(r"\[worker:0\] tfcluster-step epoch=1 step=5 ",
                                    lambda proc: kill_task(spec, "worker:0", signal.SIGKILL))])
    assert code == 0, out[-4000:]
    assert "worker:0 failed: killed by SIGKILL (exit 137)" in out
    first, resumed = progress(out, "start")
    assert first["global_step"] == "0" and resumed["replicas"] == str(replicas)
    assert first["strategy_class"] == resumed["strategy_class"] == tf_class(strategy), (first, resumed)
    # A backup every 5 steps: the resume is at the last backup before the kill, which came
    # after step 25 (20 if the kill came mid-save) and no later than 5 steps past the last step
    # line the task printed (the kill's relay takes a moment on a busy machine).
    step = int(resumed["global_step"])
    last_seen = last_step_before(out, "worker:0 failed")
    assert step % 5 == 0 and 20 <= step <= last_seen + 5, (resumed, last_seen)
    assert (resumed["epoch"], resumed["step"]) == (str(step // 20), str(step % 20)), resumed
    assert int(progress(out, "result")[0]["steps_run"]) == 60 - step
    assert_no_processes(spec)


@pytest.mark.parametrize("strategy, loop", [("default", "custom")])
def test_sigterm_saves_the_step_and_the_restart_resumes_there(tmp_path, tfds_dir, strategy, loop):
    """Graceful preemption under a single-host strategy: SIGTERM to the task (a spot VM's
    shutdown notice) saves the current step, exit 143 is retried, and the next attempt starts
    at exactly that step: zero steps lost."""
    # One epoch of 60 steps, SIGTERM after step 10: the save lands mid-epoch however slow the
    # machine (50 steps of margin).
    spec = write_spec(tmp_path, tfds_dir, f"{RESUMABLE} --epochs 1 --steps-per-epoch 60 --save-freq epoch "
                                          f"--loop {loop}", tasks="{worker: 1}",
                      strategy=strategy, extra="devices: {cpus: 2}\nrestart: {max_restarts: 1}\n")
    code, out = run_and_act(spec, [(r"\[worker:0\] tfcluster-step epoch=0 step=10 ",
                                    lambda proc: kill_task(spec, "worker:0", signal.SIGTERM))])
    assert code == 0, out[-4000:]
    [preempted] = progress(out, "preempted")
    saved = int(preempted["global_step"])
    # Saved mid-epoch although backups come once an epoch: the preemption save, not a backup;
    # at the step it was working on when the signal came (a step line at most 5 steps back).
    last_seen = last_step_before(out, "worker:0 failed")
    assert 10 <= saved < 60 and last_seen <= saved <= last_seen + 5, (preempted, last_seen)
    assert "worker:0 failed: killed by SIGTERM (exit 143)" in out, out[-3000:]
    first, resumed = progress(out, "start")
    assert first["global_step"] == "0" and int(resumed["global_step"]) == saved, (first, resumed)
    assert first["strategy_class"] == resumed["strategy_class"] == tf_class(strategy), (first, resumed)
    assert (resumed["epoch"], resumed["step"]) == ("0", str(saved)), resumed
    [result] = progress(out, "result")
    assert int(result["steps_run"]) == 60 - saved, result  # the rest, nothing redone
    assert 0.0 <= float(result["accuracy"]) <= 1.0
    assert_no_processes(spec)


@pytest.mark.parametrize("strategy, loop", [("mirrored", "custom"), ("one_device", "fit")])
def test_sigkill_then_sigterm_in_one_run(tmp_path, tfds_dir, strategy, loop):
    """Both faults of one task in one run (each a restart of the same process, with its own
    resume rule): a SIGKILL resumes from the last backup, mid-epoch; the next attempt's SIGTERM
    saves the step it is at and the third attempt starts exactly there. Backups every 25 steps
    (resuming mid-epoch: 20 steps an epoch), the kill after step 30, the SIGTERM at the resumed
    attempt's first step line: its save (at 30 to 49 unless the machine lags 20 steps behind a
    signal) is not a backup's step, so a resume from a backup instead of that save is seen."""
    replicas = 1 if strategy == "one_device" else 2
    spec = write_spec(tmp_path, tfds_dir, f"{RESUMABLE.replace('--save-freq 5', '--save-freq 25')} --epochs 4 "
                                          f"--steps-per-epoch 20 --loop {loop}", tasks="{worker: 1}",
                      strategy=strategy, extra="devices: {cpus: 2}\nrestart: {max_restarts: 2}\n")
    code, out = run_and_act(spec, [
        (r"\[worker:0\] tfcluster-step epoch=1 step=10 ", lambda proc: kill_task(spec, "worker:0", signal.SIGKILL)),
        (r"\[worker:0\] tfcluster-start ", lambda proc: None),  # the second attempt's: its steps follow
        (r"\[worker:0\] tfcluster-step ", lambda proc: kill_task(spec, "worker:0", signal.SIGTERM))])
    assert code == 0, out[-4000:]
    killed, termed = "worker:0 failed: killed by SIGKILL (exit 137)", "worker:0 failed: killed by SIGTERM (exit 143)"
    assert killed in out and termed in out and out.index(killed) < out.index(termed), out[-4000:]
    first, from_backup, from_save = progress(out, "start")
    assert first["global_step"] == "0" and from_backup["replicas"] == from_save["replicas"] == str(replicas)
    assert {s["strategy_class"] for s in (first, from_backup, from_save)} == {tf_class(strategy)}, (first, from_save)
    # The SIGKILL: resumed at the last backup before it (25; 50 if it landed 20 steps late).
    step = int(from_backup["global_step"])
    assert step % 25 == 0 and 25 <= step <= last_step_before(out, killed) + 5, (from_backup, out[-4000:])
    assert (from_backup["epoch"], from_backup["step"]) == (str(step // 20), str(step % 20)), from_backup
    # The SIGTERM: the step it was working on saved (a step line at most 5 steps back in its own
    # attempt), and the third attempt starts at exactly that step: nothing redone.
    [preempted] = progress(out, "preempted")
    saved = int(preempted["global_step"])
    second = out[out.index("[worker:0] tfcluster-start ", out.index(killed)):]
    last_seen = last_step_before(second, termed)
    assert step < saved < 80 and last_seen <= saved <= last_seen + 5, (preempted, last_seen)
    assert int(from_save["global_step"]) == saved, (from_save, preempted)
    assert (from_save["epoch"], from_save["step"]) == (str(saved // 20), str(saved % 20)), from_save
    [result] = progress(out, "result")
    assert int(result["steps_run"]) == 80 - saved, result
    assert 0.0 <= float(result["accuracy"]) <= 1.0
    assert_no_processes(spec)
