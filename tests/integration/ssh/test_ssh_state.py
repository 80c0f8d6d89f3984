"""The state dir over ssh when hosts do not share a disk (``state.sync``), against real sshd hosts
whose ``lab.private`` dir is a tmpfs of their own (the ssh lab): a file written there through one
host is invisible to the others and to this machine, like VMs with their own disks."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.tfrun import last_step_before, progress, run_and_act
from tests.support.waits import wait_for

from tests.support.cli import tfcluster

from tests.support.ssh_helpers import private_state
from .conftest import PY
from tests.support.ssh_helpers import pidfiles

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

SHOW = "print('ran', flush=True)"


def _on(lab, host: str, script: str) -> str:
    """Run a shell snippet on ``host`` where it sees its private dir; its output."""
    proc = lab.host(host).exec_private("sh", "-c", script, check=False)
    return (proc.stdout + proc.stderr).decode(errors="replace")


# ---------------------------------------------------------------- auto detection


def test_auto_detects_private_and_shared_state_dirs(lab, make_spec, tmp_path):
    private = private_state(lab, tmp_path)
    spec = make_spec([PY, "-c", SHOW], state={"dir": private})
    proc = tfcluster("up", "--dry-run", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert f"state dir {private}: copy (h2 cannot see a file written through h1)" in proc.stderr

    shared = str(tmp_path / "shared-state")
    spec = make_spec([PY, "-c", SHOW], state={"dir": shared})
    proc = tfcluster("up", "--dry-run", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert f"state dir {shared}: shared (every host sees a file written through h1)" in proc.stderr
    assert os.listdir(shared) == []  # the marker is removed


def test_copy_with_an_evaluator_away_from_the_chief_is_refused(lab, make_spec, tmp_path):
    spec = make_spec([PY, "-c", SHOW], tasks={"worker": 2, "evaluator": {"count": 1, "hosts": ["h2"]}},
                     state={"dir": private_state(lab, tmp_path), "sync": "copy"})
    proc = tfcluster("up", str(spec))
    assert proc.returncode == 1
    assert ("evaluator:0 is on host h2 but with state.sync: copy the chief's checkpoints are only on h1; put it "
            "there (tasks.evaluator.hosts: [h1]) or use shared storage") in proc.stderr
    assert "ran" not in proc.stdout


# ---------------------------------------------------------------- a copy that fails


def test_a_copy_that_fails_on_a_full_disk_is_reported_and_never_used(lab, make_spec, tmp_path):
    state = private_state(lab, tmp_path)
    chief_dir = f"{state}/backup/chief"
    _on(lab, "h1", f"mkdir -p {chief_dir} && cd {chief_dir} && head -c 4000000 /dev/urandom > ckpt-7.data-00000-of-00001"
                   f" && echo i > ckpt-7.index && echo 'model_checkpoint_path: \"ckpt-7\"' > checkpoint")
    # h2: an older backup, and a disk with less room than the chief's backup needs.
    fill = f"{lab.private}/{tmp_path.name}-fill"
    _on(lab, "h2", f"mkdir -p {chief_dir} && echo 'model_checkpoint_path: \"ckpt-1\"' > {chief_dir}/checkpoint"
                   f" && head -c 100000000 /dev/zero > {fill}")
    try:
        free = _on(lab, "h2", f"df -k --output=avail {lab.private} | tail -1")
        assert int(free) < 3000, free  # under 3 MB left
        spec = make_spec([PY, "-c", SHOW], state={"dir": state, "sync": "copy"}, restart={"max_restarts": 0})
        proc = tfcluster("up", str(spec))
        assert proc.returncode == 1, proc.stderr
        failed = [line for line in proc.stderr.splitlines() if "state copy from h1 failed" in line]
        assert failed and "host h2: state copy from h1 failed: No space left on device" in failed[0], proc.stderr
        assert "the partial copy was discarded" in failed[0]
        assert "ran" not in proc.stdout  # the attempt failed before any task started
        left = _on(lab, "h2", f"ls -A {state} {chief_dir}; cat {chief_dir}/checkpoint")
        assert ".tfcluster-incoming" not in left and "ckpt-7" not in left and 'ckpt-1"' in left, left
    finally:
        _on(lab, "h2", f"rm -f {fill}")


def test_a_copy_whose_link_is_cut_is_reported_and_never_used(lab, make_spec, tmp_path):
    """h2 stops hearing the launcher in the middle of the copy: an nft quota lets through its
    first 4 MB from the launcher (the connection, the preflight, the copy's start) and drops the
    rest, so the cut lands inside the 30 MB copy whatever the machine's speed. The copy stalls,
    fails within 2 x ssh.lease (at least 10 s) with one line, and its half-written temp dir is
    never renamed into place (it is removed once the connection's end reaches h2)."""
    from tests.labs.ssh import GATEWAY
    from tests.support.ssh_helpers import firewall, firewall_flush

    state = private_state(lab, tmp_path)
    chief_dir = f"{state}/backup/chief"
    _on(lab, "h1", f"mkdir -p {chief_dir} && cd {chief_dir} && head -c 30000000 /dev/urandom > ckpt-7.data-00000-of-00001"
                   f" && echo i > ckpt-7.index && echo 'model_checkpoint_path: \"ckpt-7\"' > checkpoint")
    spec = make_spec([PY, "-c", SHOW], state={"dir": state, "sync": "copy"}, restart={"max_restarts": 0})
    h2 = lab.host("h2")
    firewall(h2, f"ip saddr {GATEWAY} quota over 4 mbytes drop")
    try:
        code, out = run_and_act(spec, [], timeout=60)
    finally:
        firewall_flush(h2)
    assert code == 1, out[-3000:]
    failed = [line for line in out.splitlines() if "state copy from h1 failed" in line]
    assert failed and "host h2: state copy from h1 failed: no progress for 10 s (link down?)" in failed[0], \
        out[-3000:]
    assert "\nran" not in out and "] ran" not in out  # no task started
    wait_for(lambda: ".tfcluster-incoming" not in _on(lab, "h2", f"ls -A {state}"), 60,
             what="h2's unpack to remove its temp dir")
    assert "ckpt-7" not in _on(lab, "h2", f"ls -AR {state}")


# ---------------------------------------------------------------- training resumes on both hosts


def _train_spec(make_spec, lab, tmp_path, *extra_args, steps=12, max_restarts=2):
    return make_spec(
        [PY, "-m", "worker", "--epochs", "2", "--steps-per-epoch", str(steps), "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1", *extra_args],
        workers=2, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, restart={"max_restarts": max_restarts},
        ssh={"require": ["tensorflow", "tf_keras"]}, state={"dir": private_state(lab, tmp_path)},
    )


def _starts(out: str) -> list[tuple[int, int]]:
    """(worker:0, worker:1) global_step of each attempt's tfcluster-start."""
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    return [(int(a["global_step"]), int(b["global_step"])) for a, b in zip(w0, w1)]


@pytest.mark.tf
def test_sigkilled_worker_resumes_at_the_same_step_on_both_hosts_and_the_model_comes_back(lab, make_spec, tmp_path):
    """fit resumes from BackupAndRestore's backup/, copied from h1 to h2 before the restart (the
    custom loop's checkpoints/custom/ is copied in test_sigterm_on_one_host_...). Also the ssh
    backend's MultiWorkerMirroredStrategy run trained to its end over ssh, each worker on its own
    host saying its task (the cluster's addresses: test_ssh_backend.py's
    test_tasks_run_on_their_hosts_with_tf_config_addresses)."""
    spec = _train_spec(make_spec, lab, tmp_path)

    def kill_worker1(_proc):
        os.kill(pidfiles(spec, 2)["worker-1.0.pid"][1], signal.SIGKILL)

    code, out = run_and_act(spec, [(r"state dir .*: copy \(h2 cannot see", lambda p: None),
                                   (r"\[worker:1\] tfcluster-step epoch=0 step=8 ", kill_worker1)], timeout=280)
    assert code == 0, out[-5000:]
    assert "run succeeded" in out, out[-3000:]
    assert "[worker:0] worker: worker:0" in out and "[worker:1] worker: worker:1" in out, out[-3000:]
    starts = _starts(out)
    assert len(starts) == 2 and starts[0] == (0, 0), starts
    n0, n1 = starts[1]
    # both resumed from the chief's backup (every 3 steps) before the kill
    last_seen = last_step_before(out, "worker:1 failed", "worker:1")
    assert n0 == n1 and n0 % 3 == 0 and 6 <= n0 <= last_seen + 3, (starts, last_seen)
    assert "state: copied h1's latest backup" in out and " to h2 in " in out
    (res,) = progress(out, "result", "worker:0")
    assert int(res["steps_run"]) == 24 - n0, res  # the rest of both epochs, nothing more
    local = spec.parent / "runs" / "sshtest" / "state" / "final_model"
    assert (local / "saved_model.pb").is_file() and (local / "variables").is_dir()
    assert "fetched final_model, tensorboard from h1" in out
    assert list((local.parent / "tensorboard" / "train").glob("events.out.tfevents.*"))  # for tfcluster tensorboard


@pytest.mark.tf
def test_ctrl_c_saves_on_both_hosts_and_a_rerun_resumes_there(lab, make_spec, tmp_path):
    """Ctrl-C is graceful preemption (every worker saves the agreed step, 0 steps lost); the
    rerun's first attempt copies that backup from h1 to h2 and both resume at that step, which
    their start lines say (the rerun is stopped once both train: its end is the other tests')."""
    spec = _train_spec(make_spec, lab, tmp_path, max_restarts=0)
    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step epoch=0 step=5 ",
                                    lambda p: os.killpg(p.pid, signal.SIGINT))], timeout=200)
    assert code == 130, out[-4000:]
    saved = {int(p["global_step"]) for k in ("worker:0", "worker:1") for p in progress(out, "preempted", k)}
    assert len(saved) == 1 and min(saved) >= 5, out[-4000:]
    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step ", lambda p: os.killpg(p.pid, signal.SIGINT))],
                            timeout=280)
    assert code == 130, out[-5000:]
    assert _starts(out) == [(min(saved), min(saved))], out[-4000:]


@pytest.mark.tf
def test_sigterm_on_one_host_loses_no_step_and_both_hosts_resume_there(lab, make_spec, tmp_path):
    """A host shutting down (SIGTERM to worker:1 only): both workers save the agreed step on their
    own disks, the chief's save is copied to h2, and the restarted group resumes there. The custom
    loop (its CheckpointManager's checkpoints/custom/ is what is copied; fit's backup/ is
    test_sigkilled_worker_...'s)."""
    spec = _train_spec(make_spec, lab, tmp_path, "--loop", "custom", "--save-freq", "50")  # no periodic save before the end

    def term_worker1(_proc):
        os.kill(pidfiles(spec, 2)["worker-1.0.pid"][1], signal.SIGTERM)

    code, out = run_and_act(spec, [(r"\[worker:1\] tfcluster-step epoch=0 step=5 ", term_worker1)], timeout=280)
    assert code == 0, out[-5000:]
    saved = {int(p["global_step"]) for k in ("worker:0", "worker:1") for p in progress(out, "preempted", k)}
    assert len(saved) == 1 and min(saved) >= 5, out[-4000:]
    assert _starts(out) == [(0, 0), (min(saved), min(saved))], out[-4000:]
