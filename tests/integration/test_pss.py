"""ParameterServerStrategy end to end with real TensorFlow processes: the coordinator (tf_keras
fit and the custom loop; fit's evaluation of the test split after every epoch), ps/worker servers
stopped at the end, a worker restarted alone (its
standby promoted), a dead ps restarting the cluster from the last checkpoint, and the evaluator
sidecar (PSS, and MWMS's restarted alone; MWMS's evaluation of every epoch's checkpoint:
test_tensorboard.py). Every case ends with no process of the run left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.tfrun import (ROOT, assert_no_processes, check_epoch_eval, events, kill_task, progress, run_and_act,
                                 run_dir, tensorboard_scalars, up, wait_line, with_epoch_eval, write_spec)
from tests.support.cli import tfcluster
from tests.support.processes import task_pids
from tests.support.waits import read_rest, wait_for
import launcher.record.events as ev

pytestmark = [pytest.mark.integration, pytest.mark.tf]
RUN_TIMEOUT = 240
PSS_TASKS = "{chief: 1, worker: 2, ps: 1, evaluator: 1}"


def pss_spec(tmp_path: Path, tfds_dir: Path, entrypoint: str, tasks: str = PSS_TASKS, extra: str = "", **kw) -> Path:
    return write_spec(tmp_path, tfds_dir, entrypoint, tasks=tasks, extra=extra, strategy="parameter_server", **kw)


def run_with_kill(spec: Path, wait_pattern: str, key: str, then: str | None = None) -> str:
    """Start the run, SIGKILL task ``key`` once ``wait_pattern`` is printed, optionally wait for
    ``then``, and return the launcher's whole output."""
    steps = [(wait_pattern, lambda proc: kill_task(spec, key, signal.SIGKILL))]
    if then:
        steps.append((then, lambda proc: None))
    code, out = run_and_act(spec, steps, RUN_TIMEOUT)
    assert code == 0, out[-5000:]
    return out


def test_pss_fit_with_evaluator_succeeds_and_every_task_is_stopped(tmp_path, tfds_dir):
    """The chief also evaluates the test split after every epoch ($TFCLUSTER_EPOCH_EVAL, as
    ``tfcluster compare`` sets it: worker/pss/fit.py's own evaluation, not the sidecar's)."""
    spec = with_epoch_eval(pss_spec(tmp_path, tfds_dir, "python -m worker --epochs 2 --steps-per-epoch 10 "
                                                        "--progress-every 5"))
    result = up(spec, timeout=RUN_TIMEOUT)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    (res,) = progress(out, "result", "chief:0")
    check_epoch_eval(progress(out, "epoch", "chief:0"), res)
    assert res["global_step"] == "20" and res["epochs_run"] == "2", res
    # Steps this attempt, as every strategy's result line says (the final report's steps column).
    assert res["steps_run"] == "20", res
    assert re.search(r"chief:0\s+\S+\s+succeeded\s+0\s+1\s+20\s", out), out[-3000:]
    assert float(res["accuracy"]) > 0.3 and float(res["examples_per_sec"]) > 0, res
    assert [s["global_step"] for s in progress(out, "epoch", "chief:0")] == ["10", "20"]
    assert len(progress(out, "server", "worker:0")) == len(progress(out, "server", "ps:0")) == 1
    # The evaluator evaluated both epoch checkpoints; the final one is the chief's final model.
    evals = progress(out, "eval", "evaluator:0")
    assert [(e["checkpoint"], e["global_step"]) for e in evals] == [("ckpt-001", "10"), ("ckpt-002", "20")], evals
    assert abs(float(evals[-1]["accuracy"]) - float(res["accuracy"])) < 1e-3, (evals, res)
    assert progress(out, "eval_done", "evaluator:0")[0]["reason"] == "final"
    scalars = tensorboard_scalars(run_dir(spec).parent / "state" / "tensorboard" / "eval")
    assert sorted((t, s) for t, s, _ in scalars) == [("accuracy", 10), ("accuracy", 20), ("loss", 10), ("loss", 20)]
    # The coordinator's training scalars, next to eval/: the epoch lines' numbers at their global steps.
    train = {(t, s): v for t, s, v in tensorboard_scalars(run_dir(spec).parent / "state" / "tensorboard" / "train")}
    for e in progress(out, "epoch", "chief:0"):
        g = int(e["global_step"])
        assert (train[("loss", g)], train[("accuracy", g)]) == pytest.approx(
            (float(e["loss"]), float(e["accuracy"])), abs=6e-5), (train, e)
        assert train[("examples_per_sec", g)] == pytest.approx(float(e["examples_per_sec"]), abs=0.06) and \
            train[("examples_per_sec", g)] > 0, (train, e)
        assert train[("learning_rate", g)] == pytest.approx(1e-3), train
    assert sorted({s for _, s in train}) == [10, 20], train
    assert (run_dir(spec).parent / "state" / "final_model" / "saved_model.pb").is_file()
    # Success followed the chief; the servers, which never exit on their own, were stopped.
    evs = events(spec)
    exits = {e["task"]: e["code"] for e in evs if isinstance(e, ev.Exit)}
    stopped = {e["task"] for e in evs if isinstance(e, ev.Stopped)}
    assert exits["chief:0"] == 0 and exits.get("evaluator:0", 0) == 0, exits
    assert {"worker:0", "worker:1", "ps:0"} <= stopped, evs
    assert "ps:0" not in exits and "worker:0" not in exits
    assert evs[-1]["outcome"] == "succeeded"
    assert_no_processes(spec)


def test_pss_worker_killed_is_replaced_by_its_standby_alone_and_rejoins(tmp_path, tfds_dir):
    """A parameter_server worker SIGKILLed mid-training is restarted alone, within the attempt,
    from what is warm: its standby (on local a wrapper the run's zygote forks the task for, ready
    as soon as the first step was trained) is promoted instead of a cold start, a new standby for
    it is started at once, the chief recovers it (worker_lost, then worker_recovered after its
    relaunch) and training goes on to the end: no group restart, every step scheduled run (one
    more at most: at-least-once), the run succeeded in one attempt. (The supervisor's choice of
    promoting or starting cold, and of restarting one worker or the group, is checked at unit
    speed: tests/unit/supervise/test_supervisor_scripted.py, test_pss_*.)"""
    # 90 steps of 0.25 s: the kill comes at the standby's ready line, right after the first step
    # (local: no import to wait for), and training outlasts the relaunch and the chief's recovery.
    spec = pss_spec(tmp_path, tfds_dir,
                    "python -m worker --epochs 3 --steps-per-epoch 30 --step-delay 0.25 --progress-every 5",
                    tasks="{chief: 1, worker: 2, ps: 1}", extra="restart: {max_restarts: 2}\n")
    out = run_with_kill(spec, r"^\[worker:1\] \(standby\) tfcluster-standby ready", "worker:1",
                        then=r"\[chief:0\] tfcluster-worker_recovered task=worker:1 ")
    assert "worker:1 exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 2), training continues" in out
    assert "restarting the whole group" not in out
    assert "[worker:1] tfcluster-standby promoted" in out, out[-5000:]
    evs = events(spec)
    kinds = [(type(e), e.get("task")) for e in evs]
    at = kinds.index((ev.TaskRestart, "worker:1"))
    assert (ev.StandbyPromoted, "worker:1") in kinds[at:], kinds
    (promoted,) = [e for e in evs if isinstance(e, ev.StandbyPromoted)]
    restarted = [e for e in evs if isinstance(e, ev.Start) and e["task"] == "worker:1"][1]
    assert restarted["attempt"] == 0 and restarted["pid"] == promoted["pid"]  # the standby is the new worker:1
    later = [e for e in evs[at:] if isinstance(e, ev.StandbyStart)]
    assert [list(e["pids"]) for e in later] == [["worker:1"]], later  # its place taken by a new standby
    assert [e["task"] for e in evs if isinstance(e, ev.TaskRestart)] == ["worker:1"]
    assert len(progress(out, "start", "chief:0")) == 1  # the chief, and so training, never restarted
    assert len(progress(out, "server", "worker:1")) == 2 and len(progress(out, "server", "worker:0")) == 1
    (lost,) = progress(out, "worker_lost", "chief:0")
    (back,) = progress(out, "worker_recovered", "chief:0")
    assert lost["task"] == back["task"] == "worker:1" and float(back["time"]) > float(lost["time"])
    restarted_at = float(progress(out, "server", "worker:1")[1]["time"])
    assert float(back["time"]) >= restarted_at - 1.0  # rejoined after its relaunch, not before
    (res,) = progress(out, "result", "chief:0")
    # fit schedules 90 steps. A step in flight on the killed worker is rescheduled on another
    # worker; if the dead worker's update had already reached the ps it counts twice
    # (at-least-once), so at most one extra step per worker in flight.
    assert 90 <= int(res["global_step"]) <= 91 and res["epochs_run"] == "3", res
    assert evs[-1]["outcome"] == "succeeded" and evs[-1]["attempts"] == 1
    assert_no_processes(spec)


def test_a_pss_worker_throttled_to_a_quarter_of_its_time_is_named_a_straggler(tmp_path, tfds_dir):
    # worker:2's process runs 50 ms of every 200 (SIGSTOP/SIGCONT, as a host whose CPU is taken
    # by others): the coordinator's closures on it finish at a fraction of the others' rate.
    # (straggler_after 12: six 2-second windows instead of the default's minute)
    spec = pss_spec(tmp_path, tfds_dir, "python -m worker --epochs 500 --steps-per-epoch 20 --progress-every 5",
                    tasks="{chief: 1, worker: 3, ps: 1}",
                    watchdog="{startup_timeout: 120, stop_grace: 3, straggler_after: 12}")
    stop = threading.Event()

    def throttle(proc) -> None:
        pids = wait_for(lambda: task_pids(run_dir(spec).name, "worker:2"), 30, what="worker:2's process")

        def duty() -> None:
            while not stop.is_set():
                for sig, hold in ((signal.SIGSTOP, 0.15), (signal.SIGCONT, 0.05)):
                    for pid in pids:
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            return
                    stop.wait(hold)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        threading.Thread(target=duty, daemon=True).start()

    def end(proc) -> None:
        stop.set()
        assert tfcluster("down", str(spec), timeout=120).returncode == 0

    try:
        code, out = run_and_act(spec, [(r"\[chief:0\] tfcluster-step epoch=0 step=5 ", throttle),
                                       (r"tfcluster: worker:2 \d+ % slower than the median of the other workers", end)],
                                RUN_TIMEOUT)
    finally:
        stop.set()
    said = [e for e in events(spec) if isinstance(e, ev.Straggler)]
    assert [e["task"] for e in said][:1] == ["worker:2"], (said, out[-4000:])
    rates = re.search(r"\(([\d.]+) against ([\d.]+) calls/s over \d+ s\)", said[0]["why"])
    assert rates and float(rates.group(1)) <= 0.75 * float(rates.group(2)), said[0]  # (its words hold)
    assert not re.search(r"worker:[01] \d+ % slower", out), out[-4000:]
    assert_no_processes(spec)


def test_pss_ps_killed_restarts_cluster_and_resumes_from_epoch_backup(tmp_path, tfds_dir):
    spec = pss_spec(tmp_path, tfds_dir,
                    "python -m worker --epochs 3 --steps-per-epoch 10 --step-delay 0.2 --progress-every 5",
                    tasks="{chief: 1, worker: 2, ps: 1}", extra="restart: {max_restarts: 1}\n")
    out = run_with_kill(spec, r"\[chief:0\] tfcluster-epoch epoch=1 ", "ps:0")
    assert "ps:0 failed: killed by SIGKILL (exit 137)" in out
    assert "restarting the whole group (restart 1 of 1)" in out
    first, resumed = progress(out, "start", "chief:0")
    assert first["global_step"] == "0"
    # BackupAndRestore (per epoch under PSS) put the new chief at an epoch boundary >= 1 with
    # the optimizer's step counter restored to match.
    epoch = int(resumed["epoch"])
    assert epoch in (1, 2) and resumed["step"] == "0" and resumed["global_step"] == str(10 * epoch), resumed
    (res,) = progress(out, "result", "chief:0")
    assert res["global_step"] == "30" and res["epochs_run"] == str(3 - epoch), res
    assert len(progress(out, "server", "worker:0")) == 2  # the whole cluster was relaunched
    evs = events(spec)
    assert evs[-1]["outcome"] == "succeeded" and evs[-1]["attempts"] == 2
    assert_no_processes(spec)


def test_pss_custom_loop_partitioned_resumes_at_saved_step_after_ps_death_and_evaluator_follows(tmp_path, tfds_dir):
    spec = pss_spec(tmp_path, tfds_dir,
                    "python -m worker --loop custom --epochs 2 --steps-per-epoch 15 --save-freq 5 "
                    "--step-delay 0.2 --progress-every 5 --partition-min-size-kb 16",
                    tasks="{chief: 1, worker: 2, ps: 2, evaluator: 1}", extra="restart: {max_restarts: 1}\n")
    out = run_with_kill(spec, r"\[chief:0\] tfcluster-checkpoint global_step=10 ", "ps:0")
    assert "ps:0 failed: killed by SIGKILL (exit 137)" in out and "restarting the whole group" in out
    # The 128 KiB Dense kernel is split over both ps (the rest is under 16 KiB), in both attempts,
    # and the sharded checkpoint restores into it after the restart.
    shards = [l for l in out.splitlines() if l.startswith("[chief:0] worker: partitioned ")]
    assert len(shards) == 2 and all("dense/kernel into 2 shards on /job:ps/replica:0/task:0/device:CPU:0, "
                                    "/job:ps/replica:0/task:1/device:CPU:0" in l for l in shards), shards
    first, resumed = progress(out, "start", "chief:0")
    assert first["global_step"] == "0"
    # Checkpoints every 5 steps (joined, so exact): killed just after step 10 was saved.
    g = int(resumed["global_step"])
    assert g in (10, 15) and resumed["step"] == str(g % 15) and resumed["epoch"] == str(g // 15), resumed
    (res,) = progress(out, "result", "chief:0")
    assert res["global_step"] == "30" and res["steps_run"] == str(30 - g), res
    # The evaluator (relaunched with the cluster) evaluated the custom-loop checkpoints that
    # appeared after it started, ending with the final one.
    evals = progress(out, "eval", "evaluator:0")
    assert evals and evals[-1]["checkpoint"] == "ckpt-30" and evals[-1]["global_step"] == "30", evals
    assert abs(float(evals[-1]["accuracy"]) - float(res["accuracy"])) < 1e-3, (evals, res)
    assert_no_processes(spec)


def test_an_evaluator_killed_is_restarted_alone_by_its_standby_and_evaluates_to_the_final_checkpoint(tmp_path, tfds_dir):
    """MWMS with an evaluator, SIGKILLed once it evaluated the first epoch's checkpoint: training
    goes on (no group restart), its standby is promoted within the attempt, and the new evaluator
    evaluates the later checkpoints to the final one (eval_done final)."""
    spec = write_spec(tmp_path, tfds_dir, "python -m worker --epochs 3 --steps-per-epoch 40 --step-delay 0.15 "
                      "--progress-every 10", tasks="{worker: 2, evaluator: 1}", extra="restart: {max_restarts: 1}\n")
    steps = [(r"^\[evaluator:0\] \(standby\) tfcluster-standby ready", lambda proc: None),
             (r"^\[evaluator:0\] tfcluster-eval checkpoint=ckpt-001 ", lambda proc: kill_task(spec, "evaluator:0", signal.SIGKILL))]
    code, out = run_and_act(spec, steps, RUN_TIMEOUT)
    assert code == 0, out[-5000:]
    assert "evaluator:0 (sidecar) exited (killed by SIGKILL (exit 137)); restarting it alone (1 of 1), training goes on" \
        in out, out[-5000:]
    assert "[evaluator:0] tfcluster-standby promoted" in out and "(sidecar) failed" not in out, out[-5000:]
    evs = events(spec)
    (promoted,) = [e for e in evs if isinstance(e, ev.StandbyPromoted)]
    restarted = [e for e in evs if isinstance(e, ev.Start) and e["task"] == "evaluator:0"][1]
    assert promoted["task"] == "evaluator:0" and restarted["attempt"] == 0 and restarted["pid"] == promoted["pid"]
    assert len(progress(out, "start", "worker:0")) == 1  # training never restarted
    evals = [e["checkpoint"] for e in progress(out, "eval", "evaluator:0")]
    assert evals[0] == "ckpt-001" and evals[-1] == "ckpt-003" and "ckpt-002" in evals, evals
    (done,) = progress(out, "eval_done", "evaluator:0")
    assert done["reason"] == "final", done
    assert evs[-1]["outcome"] == "succeeded" and evs[-1]["attempts"] == 1
    assert_no_processes(spec)


def evaluator_proc(state: Path, tfds_dir: Path, *flags: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TFDS_DATA_DIR=str(tfds_dir), TF_CPP_MIN_LOG_LEVEL="2",
               TF_CONFIG=json.dumps({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
                                     "task": {"type": "evaluator", "index": 0}}))
    return subprocess.Popen([sys.executable, "-m", "worker", "--model-dir", str(state), *flags], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_evaluator_on_sigterm_evaluates_what_was_written_and_times_out_cleanly(tmp_path, tfds_dir):
    state = tmp_path / "state"
    (state / "checkpoints").mkdir(parents=True)
    proc = evaluator_proc(state, tfds_dir, "--epochs", "3", "--eval-timeout", "120")
    seen: list[str] = []
    try:
        wait_line(proc, r"evaluator watching .*final checkpoint: ckpt-003", seen, RUN_TIMEOUT)
        # What the chief's ModelCheckpoint writes after epoch 1 (not the final checkpoint) ...
        code = ("import sys; sys.path.insert(0, %r); import worker; from worker.model import build_cnn; "
                "build_cnn((8, 8, 1)).save_weights(%r)" % (str(ROOT), str(state / "checkpoints" / "ckpt-001")))
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        # ... then training ends and the launcher stops the sidecar with SIGTERM.
        proc.send_signal(signal.SIGTERM)
        out = "\n".join(seen) + "\n" + read_rest(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    evals = [l for l in out.splitlines() if l.startswith("tfcluster-eval ")]
    assert len(evals) == 1 and "checkpoint=ckpt-001 global_step=0 " in evals[0], out[-3000:]
    assert "tfcluster-eval_done reason=stopped evaluated=1" in out

    # A second evaluator: ckpt-001 predates it (skipped), nothing new comes, it gives up in time.
    proc = evaluator_proc(state, tfds_dir, "--epochs", "3", "--eval-timeout", "2")
    try:
        out = read_rest(proc, RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    assert "1 earlier checkpoint(s) skipped" in out and "tfcluster-eval " not in out
    assert "tfcluster-eval_done reason=timeout timeout=2 evaluated=0" in out
