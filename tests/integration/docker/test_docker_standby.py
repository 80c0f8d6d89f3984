"""Warm standby on the docker backend (restart.warm_standby: auto): the next attempt's containers
wait with TensorFlow imported, without the tasks' DNS names; a killed container's restart
promotes them (the task's name and alias, the promotion file, SIGUSR1 through tini and the
lifeline wrapper), and no standby container outlives the run: success, failure, Ctrl-C, down.
The reference worker runs where its promotion is the point (a killed container's restart, a plain
TF_CONFIG script under the standby stub); where the engine's containers are (a standby killed or
cut off, the run's end), an entrypoint of one's own that speaks the protocol without TensorFlow
(tests/support/standby_task.py, on a volume) stands in: four standby and task imports of
TensorFlow less per test."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from tests.labs import docker as eng
from tests.support.docker_helpers import (docker_spec, latest_run_dir, launch_up, leftovers, reap,
                                          tfcluster_at_repo)
from tests.support.cli import ROOT
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1500)]

# Slow steps: the standbys (started after the first step) import TensorFlow while attempt 0 still
# trains (45 s of steps: a loaded machine imports slowly), and the kill lands before its last epoch.
WORKER = "python -m worker --epochs 6 --steps-per-epoch 15 --batch-size 16 --progress-every 5 --step-delay 0.5"
READY = "(standby) tfcluster-standby ready"


STUB = "env python /stub/standby_task.py ack"  # (not ``python SCRIPT``: it speaks the protocol itself)


def _stub_spec(tmp_path: Path, engine_url: str, restart: str = "max_restarts: 1") -> Path:
    """A spec of tests/support/standby_task.py on a volume, its standbys on: attempt 0 runs until
    stopped, a later one ends at once."""
    spec = docker_spec(tmp_path, engine_url, STUB, max_restarts=1,
                       extra=f"  volumes: ['{ROOT / 'tests' / 'support'}:/stub']\n")
    spec.write_text(spec.read_text().replace("restart: {max_restarts: 1}", f"restart: {{{restart}, warm_standby: true}}"))
    return spec


def _log(spec: Path, key: str) -> str:
    path = latest_run_dir(spec) / "logs" / f"{key.replace(':', '-')}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _progress(spec: Path, key: str) -> str:
    """What ``key`` said on its control channel (the protocol: the record's progress file)."""
    path = latest_run_dir(spec) / "logs" / f"{key.replace(':', '-')}.progress"
    return path.read_text(errors="replace") if path.exists() else ""


def _said(out: str, key: str) -> str:
    """``key``'s lines in ``up --verbose``'s output, in the order the run saw them: its printed
    lines and its protocol records (each on its own file in the record) together."""
    prefix = f"[{key}] "
    return "\n".join(line[len(prefix):] for line in out.splitlines() if line.startswith(prefix)) + "\n"


def _standbys_ready(spec: Path) -> bool:
    return all(READY in _progress(spec, k) for k in ("worker:0", "worker:1"))


def _events(spec: Path) -> list[ev.RecordEvent]:
    return read_records(latest_run_dir(spec))


def _containers(engine: eng.Engine, name: str = "dk") -> dict[str, dict]:
    """The run's containers: name -> labels."""
    client = engine.client()
    try:
        return {c.name: c.labels for c in client.containers.list(all=True, filters={"label": f"tfcluster.name={name}"})}
    finally:
        client.close()


def _kill_container(engine: eng.Engine, name: str) -> None:
    client = engine.client()
    try:
        client.containers.get(name).kill()  # SIGKILL: exit 137, a task death on docker
    finally:
        client.close()


def _wait_standbys(spec: Path, engine: eng.Engine, proc=None) -> dict[str, dict]:
    """Both standbys said ready; the run's four containers: two tasks, two standbys."""
    wait_for(lambda: _standbys_ready(spec), 600, 0.5, what="both standbys to say ready", proc=proc,
             detail=lambda: (_log(spec, "worker:1") + _progress(spec, "worker:1"))[-2000:])
    found = _containers(engine)
    standbys = sorted(n for n, labels in found.items() if labels.get("tfcluster.standby") == "1")
    run = latest_run_dir(spec).name
    assert standbys == [f"tfcluster-dk-{run}-worker-0-standby-1", f"tfcluster-dk-{run}-worker-1-standby-2"], found
    assert len(found) == 4 and all(labels.get("tfcluster.run_id") == run for labels in found.values()), found
    return found


def _trained_once_promoted(spec: Path, key: str) -> bool:
    """``key``'s promoted process said a step on its control channel (attempt 1 trains)."""
    return "tfcluster-step " in _progress(spec, key).partition("tfcluster-standby promoted\n")[2]


def test_killed_container_restarts_from_promoted_standbys(tmp_path, docker_engine, worker_image):
    """worker:1's container killed once both standbys wait and epoch 1 is backed up: the restart
    promotes both standbys, each the new attempt's task (its name, TF_CONFIG and restart count),
    which resumes from the backup and trains; then Ctrl-C ends the run. (Training on to the end
    adds nothing the promotion decides: a run that succeeds after its standbys' promotion is
    test_a_plain_tf_config_script_restarts_from_promoted_standbys's, a docker run trained to the
    end test_docker_backend.py's.)"""
    spec = docker_spec(tmp_path, docker_engine.url, WORKER, max_restarts=1)
    plan = tfcluster_at_repo("plan", str(spec))
    assert "warm standby: on (auto: tfcluster's worker)" in plan.stdout, plan.stdout + plan.stderr
    proc = launch_up(spec, "--verbose")  # (its tasks' records in its output, in order with their lines)
    try:
        _wait_standbys(spec, docker_engine, proc)
        wait_for(lambda: "tfcluster-epoch epoch=1 " in _progress(spec, "worker:0"), 600, 0.5, what="epoch 1's backup",
                 proc=proc)
        run = latest_run_dir(spec).name
        assert "tfcluster-epoch epoch=6 " not in _progress(spec, "worker:0"), "trained to the end before the kill"
        _kill_container(docker_engine, f"tfcluster-dk-{run}-worker-1")
        wait_for(lambda: all(_trained_once_promoted(spec, k) for k in ("worker:0", "worker:1")), 600, 0.5,
                 what="both promoted tasks to train a step", proc=proc,
                 detail=lambda: _progress(spec, "worker:1")[-2000:])
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        reap(proc)
    assert proc.returncode == 130, out[-6000:]
    assert "restarting the whole group (restart 1 of 1)" in out, out[-6000:]
    events = _events(spec)
    assert [e["attempt"] for e in events if isinstance(e, ev.StandbyStart)] == [1]
    promoted = {e["task"]: e for e in events if isinstance(e, ev.StandbyPromoted)}
    assert sorted(promoted) == ["worker:0", "worker:1"], [e for e in events if isinstance(e, (ev.StandbyStart, ev.StandbyPromoted, ev.StandbyStopped))]
    first = {e["task"]: e["container_id"] for e in events if isinstance(e, ev.Start) and e["attempt"] == 0}
    for key, e in promoted.items():
        # A container of its own, renamed like the task once its old container was removed.
        assert e["container"] == f"tfcluster-dk-{run}-{key.replace(':', '-')}" and e["container_id"] != first[key], e
    for key in ("worker:0", "worker:1"):
        log = _said(out, key)
        waiting, _, after = log.partition("tfcluster-standby promoted\n")
        assert after, log[-3000:]
        assert "(standby) tfcluster-standby waiting" in waiting
        # The promoted process is the new attempt's task: its TF_CONFIG and restart count.
        index = key.split(":")[1]
        assert re.search(rf"^worker: {key} strategy=multi_worker_mirrored loop=fit restart=1 ", after, re.M), after[:2000]
        assert f"(CollectiveAllReduceStrategy on /job:worker/replica:0/task:{index}/device:CPU:0), 2 task(s)" in after
        starts = re.findall(r"^tfcluster-start epoch=(\d+) step=\d+ global_step=(\d+)", after, re.M)
        assert starts and int(starts[0][1]) > 0, starts  # resumed from the backup
    # The launcher wrote each promotion file on the run's mount; the worker read and removed it.
    promotions = latest_run_dir(spec) / "standby"
    assert promotions.is_dir() and list(promotions.iterdir()) == []
    assert "standby promotion file" not in out
    assert leftovers(docker_engine, "dk") == ([], [])


def test_a_dead_standby_and_a_refused_promotion_start_their_tasks_cold(tmp_path, docker_engine, worker_image):
    """worker:0's standby container is killed while it waits (an OOM kill); worker:1's is cut off
    the run's network behind tfcluster's back, so the engine refuses its promotion: both tasks
    start cold, each said, and the run still succeeds with nothing left."""
    spec = _stub_spec(tmp_path, docker_engine.url)
    proc = launch_up(spec)
    try:
        _wait_standbys(spec, docker_engine, proc)
        run = latest_run_dir(spec).name
        client = docker_engine.client()
        try:
            client.containers.get(f"tfcluster-dk-{run}-worker-0-standby-1").kill()
            client.networks.get(f"tfcluster-dk-{run}").disconnect(f"tfcluster-dk-{run}-worker-1-standby-2")
        finally:
            client.close()
        _kill_container(docker_engine, f"tfcluster-dk-{run}-worker-1")
        out, _ = proc.communicate(timeout=900)
    finally:
        reap(proc)
    assert proc.returncode == 0, out[-6000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-6000:]
    assert re.search(r"worker:1: its warm standby could not be promoted \(the Docker engine at \S+ refused the "
                     r"promotion: .+\); starting it cold", out), out[-6000:]
    assert not [e for e in _events(spec) if isinstance(e, ev.StandbyPromoted)]
    starts = {e["task"]: e["container"] for e in _events(spec) if isinstance(e, ev.Start) and e["attempt"] == 1}
    assert starts == {k: f"tfcluster-dk-{run}-{k.replace(':', '-')}" for k in ("worker:0", "worker:1")}, starts
    for key in ("worker:0", "worker:1"):
        assert "tfcluster-standby promoted" not in _progress(spec, key)  # (its printed one is output only)
        assert re.search(rf"^standby-task key={key} attempt=1 ", _log(spec, key), re.M), _log(spec, key)[-2000:]
    assert leftovers(docker_engine, "dk") == ([], [])


def test_a_failed_run_leaves_no_standby(tmp_path, docker_engine, worker_image):
    # 137 made permanent: the kill fails the run while both standbys wait.
    spec = _stub_spec(tmp_path, docker_engine.url, "max_restarts: 1, permanent_exit_codes: [137]")
    proc = launch_up(spec)
    try:
        _wait_standbys(spec, docker_engine, proc)
        _kill_container(docker_engine, f"tfcluster-dk-{latest_run_dir(spec).name}-worker-1")
        out, _ = proc.communicate(timeout=300)
    finally:
        reap(proc)
    assert proc.returncode == 1, out[-4000:]
    assert "worker:1 failed: killed by SIGKILL (exit 137)" in out, out[-4000:]
    assert not [e for e in _events(spec) if isinstance(e, ev.StandbyPromoted)]
    assert leftovers(docker_engine, "dk") == ([], [])


def test_ctrl_c_leaves_no_standby(tmp_path, docker_engine, worker_image):
    spec = _stub_spec(tmp_path, docker_engine.url)
    proc = launch_up(spec)
    try:
        _wait_standbys(spec, docker_engine, proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        reap(proc)
    assert proc.returncode == 130, out[-4000:]
    assert leftovers(docker_engine, "dk") == ([], [])


def test_down_of_a_detached_run_removes_its_standbys(tmp_path, docker_engine, worker_image):
    spec = _stub_spec(tmp_path, docker_engine.url)
    try:
        res = tfcluster_at_repo("up", str(spec), "--detach", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        _wait_standbys(spec, docker_engine)
        down = tfcluster_at_repo("down", str(spec), timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
        assert leftovers(docker_engine, "dk") == ([], [])
    finally:
        tfcluster_at_repo("down", str(spec), timeout=180)


def test_a_plain_tf_config_script_restarts_from_promoted_standbys(tmp_path, docker_engine, worker_image):
    """A user's plain TF_CONFIG script (tests/support/plain_tf_config.py, not one tfcluster line) on
    a volume, warm_standby left out: each standby container runs it under the standby stub (passed
    as ``python -c``: nothing installed in the image for it). worker:1's container killed: both
    standbys are promoted and run the script, which goes on from its own progress file."""
    import shutil

    job = tmp_path / "job"
    (job / "state").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "support" / "plain_tf_config.py", job / "train.py")
    for path in (job, job / "state"):
        path.chmod(0o777)  # the containers' user writes the progress file
    # As many steps as the standbys take to be ready, then 30 more than the kill found (read at each start).
    (job / "steps").write_text("100000")
    spec = docker_spec(tmp_path, docker_engine.url, "python /job/train.py --steps @/job/steps --delay 0.2 --state /job/state",
                       max_restarts=1, extra=f"  volumes: ['{job}:/job']\n")
    plan = tfcluster_at_repo("plan", str(spec))
    assert "warm standby: on (auto: a Python entrypoint)" in plan.stdout, plan.stdout + plan.stderr
    proc = launch_up(spec, "--verbose")  # (its tasks' records in its output, in order with their lines)
    try:
        _wait_standbys(spec, docker_engine, proc)
        wait_for(lambda: "plain-step 5 " in _log(spec, "worker:1"), 600, 0.5, what="worker:1's step 5", proc=proc)
        run = latest_run_dir(spec).name
        _kill_container(docker_engine, f"tfcluster-dk-{run}-worker-1")
        last = int((job / "state" / "step").read_text()) + 30
        (job / "steps").write_text(str(last))
        out, _ = proc.communicate(timeout=900)
    finally:
        reap(proc)
    assert proc.returncode == 0, out[-6000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-6000:]
    events = _events(spec)
    assert sorted(e["task"] for e in events if isinstance(e, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    for key in ("worker:0", "worker:1"):
        log = _said(out, key)
        before, _, after = log.partition("tfcluster-standby promoted\n")
        assert after, log[-3000:]
        cold = json.loads(re.search(r"^plain-start (\{.*\})$", before, re.M).group(1))
        warm = json.loads(re.search(r"^plain-start (\{.*\})$", after, re.M).group(1))
        for said in (cold, warm):
            del said["pid"], said["ppid"], said["gppid"]
        assert warm == cold and cold["argv"][0] == "/job/train.py" and cold["path0"] == "/job", (cold, warm)
        assert f"plain-done {key} steps={last}" in after
    assert set(re.findall(r"plain-step \d+ sum=(\S+)", out)) == {"2"}
    assert (job / "state" / "step").read_text() == str(last)
    assert leftovers(docker_engine, "dk") == ([], [])
