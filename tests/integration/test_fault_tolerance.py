"""Fault tolerance with real TensorFlow workers: group restarts that resume where the backup or
the agreed save left them, a hang in the final evaluation, graceful preemption, a warm standby
promoted. Every case ends with no process of the run left. (A SIGKILLed worker's group restart
resuming at its backup: test_goodput.py, in the run that checks its goodput. Ctrl-C (SIGINT to
``up``) saving every worker at the step they agree on, exit 130, and the next ``up`` resuming there
with both loops: test_worker_resize.py, whose every resize starts so.)

What the supervisor decides from an exit code or a silence (exit 1 not retried, restart.max_restarts
spent, the startup and hang watchdogs naming a task, unused standbys stopped) is checked at unit
speed through the real supervisor with scripted tasks (tests/unit/supervise/test_supervisor_scripted.py,
"decisions once checked with TensorFlow"); a SIGSTOPped peer named as the root cause by its process state,
with real TensorFlow, in test_faults.py."""

from __future__ import annotations

import signal

import pytest

from tests.support.tfrun import assert_no_processes, events, kill_task, progress, run_and_act, write_spec
import launcher.record.events as ev

pytestmark = [pytest.mark.integration, pytest.mark.tf]
TRAIN = "python -m worker --epochs 2 --steps-per-epoch 30 --step-delay 0.05 --progress-every 5"


def _sigstop_when(tmp_path, tfds_dir, entrypoint: str, line: str, task: str):
    """Run ``entrypoint`` with watchdog.hang_timeout 12 s and one restart, SIGSTOP ``task`` at
    the output line matching ``line``; (spec, exit code, output, the console's failure lines
    of ``task``). 12 s, not 8: the final evaluation and save print nothing, and with the suite's
    two shards at once they once took more than 8 s after the last epoch line (a restarted
    attempt that had trained to the end was then taken for hung)."""
    spec = write_spec(tmp_path, tfds_dir, entrypoint, extra="restart: {max_restarts: 1}\n")
    spec.write_text(spec.read_text().replace("watchdog: {startup_timeout: 120, stop_grace: 3}",
                                             "watchdog: {startup_timeout: 120, stop_grace: 3, hang_timeout: 12}"))
    code, out = run_and_act(spec, [(line, lambda proc: kill_task(spec, task, signal.SIGSTOP))])
    return spec, code, out, [text for text in out.splitlines() if f"error: {task} failed: " in text]


def test_a_hang_in_the_final_evaluation_resumes_at_the_end_not_at_step_0(tmp_path, tfds_dir):
    """Training is over (the last epoch line), the final evaluation and save run, and a worker
    hangs there: the restart must not train again. The backup outlives fit until the final model
    is saved (were it deleted at fit's end, as tf_keras does, every step would be trained again)."""
    spec, code, out, failed = _sigstop_when(tmp_path, tfds_dir, TRAIN + " --save-freq 5",
                                            r"\[worker:1\] tfcluster-epoch epoch=2 global_step=60 ", "worker:1")
    assert code == 0, out[-4000:]
    # Named by the hang watchdog, or first by TensorFlow's own heartbeat check in worker:0.
    assert len(failed) == 1 and "process is stopped (SIGSTOP?)" in failed[0], out[-4000:]
    starts = progress(out, "start", "worker:0")
    assert len(starts) == 2 and int(starts[1]["global_step"]) == 60, starts  # at the end, not at 0
    assert starts[1]["epoch"] == "2" and starts[1]["step"] == "0", starts
    results = progress(out, "result", "worker:0")
    assert len(results) == 1 and results[0]["steps_run"] == "0", results
    state = tmp_path / "runs" / "demo" / "state"
    assert (state / "final_model" / "saved_model.pb").is_file()
    assert not (state / "backup").exists()  # removed once the final model was saved
    assert_no_processes(spec)


CUSTOM = "python -m worker --loop custom --epochs 2 --steps-per-epoch 30 --step-delay 0.05 --progress-every 5"
# model.fit with the default --save-freq epoch: the preemption save lands mid-epoch all the same.
FIT = "python -m worker --epochs 2 --steps-per-epoch 30 --step-delay 0.05 --progress-every 5"


@pytest.mark.parametrize("command", [CUSTOM, FIT], ids=["custom_loop", "fit"])
def test_host_sigterm_to_one_worker_saves_all_and_group_resumes(tmp_path, tfds_dir, command):
    spec = write_spec(tmp_path, tfds_dir, command, extra="restart: {max_restarts: 1}\n")
    # SIGTERM to one worker, like a spot VM's shutdown notice
    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step epoch=0 step=10 ",
                                    lambda proc: kill_task(spec, "worker:1", signal.SIGTERM))])
    assert code == 0, out[-4000:]
    # Both workers saved the same step, each to the end (whichever exited first, the other was
    # awaited, not killed mid-save by the group's stop).
    each = {t: [p["global_step"] for p in progress(out, "preempted", t)] for t in ("worker:0", "worker:1")}
    assert len(each["worker:0"]) == len(each["worker:1"]) == 1 and each["worker:0"] == each["worker:1"], each
    saved = set(each["worker:0"])
    assert "killed by SIGTERM (exit 143)" in out and "restarting the whole group" in out
    assert progress(out, "start")[1]["global_step"] == saved.pop()
    assert_no_processes(spec)


def test_repeated_kills_of_the_chief_mid_save_never_corrupt_the_backup(tmp_path, tfds_dir):
    # A backup every step: the chief (worker:0, which writes it) spends much of each step
    # saving, so SIGKILLs land mid-save. Every restart must restore and move forward.
    spec = write_spec(tmp_path, tfds_dir, "python -m worker --epochs 2 --steps-per-epoch 25 --save-freq 1 "
                      "--progress-every 1", extra="restart: {max_restarts: 3}\n")
    code, out = run_and_act(spec, [(rf"\[worker:0\] tfcluster-step epoch=\d+ step=\d+ global_step={8 + 12 * kill}\b",
                                     lambda proc: kill_task(spec, "worker:0", signal.SIGKILL)) for kill in range(3)])
    assert code == 0, out[-4000:]
    resumed = [int(s["global_step"]) for s in progress(out, "start")]
    assert len(resumed) == 4 and resumed[0] == 0
    # each attempt restores the step it reached (give or take the step being saved)
    assert all(resumed[i + 1] >= 8 + 12 * i - 1 for i in range(3)), resumed
    # the last attempt resumed inside epoch 2 (0-based 1) and so ran that epoch alone
    assert progress(out, "start")[-1]["epoch"] == "1", progress(out, "start")
    result = progress(out, "result")[0]
    assert (result["epochs"], result["epochs_run"]) == ("2", "1"), result
    assert_no_processes(spec)


def test_warm_standby_is_promoted_on_group_restart(tmp_path, tfds_dir):
    # On local the standby is ready as soon as the first step was trained (a wrapper that has the
    # run's zygote fork the task once promoted: no import to wait for); the kill comes at the next
    # step line after that in the second or third epoch (after the first epoch's backups, a
    # whole epoch before the end).
    spec = write_spec(tmp_path, tfds_dir, TRAIN.replace("--epochs 2", "--epochs 4") + " --save-freq 5",
                      extra="restart: {max_restarts: 1, warm_standby: true}\n")
    code, out = run_and_act(spec, [(r"\[worker:1\] \(standby\) tfcluster-standby ready", lambda proc: None),
                                   (r"\[worker:1\] tfcluster-step epoch=[12] step=\d+ ",
                                    lambda proc: kill_task(spec, "worker:1", signal.SIGKILL))])
    assert code == 0, out[-4000:]
    recorded = events(spec)
    standby = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    assert len(standby) == 1 and standby[0]["attempt"] == 1
    promoted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.StandbyPromoted)}
    restarted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.Start) and e["attempt"] == 1}
    assert promoted == restarted == {k: v for k, v in standby[0]["pids"].items()}  # the very processes
    assert "[worker:0] tfcluster-standby promoted" in out
    assert int(progress(out, "start")[1]["global_step"]) >= 30
    assert_no_processes(spec)
