"""A run record is data, not orders, on a real Docker engine: ``tfcluster down`` removes a container
the record names by id only once its labels (``tfcluster.run_id``, ``tfcluster.name``, set when
tfcluster created it) say it is the run's; a tampered record naming someone else's container, or a
container labelled for another run, gets one line each and exit 1, and that container runs on."""

from __future__ import annotations

import json

import pytest

from tests.support.docker_helpers import containers_exited, docker_spec, latest_run_dir, launch_up, leftovers, \
    tfcluster_at_repo
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(900)]


def test_down_removes_the_runs_containers_but_not_others_a_tampered_record_names(tmp_path, docker_engine,
                                                                                  worker_image):
    spec = docker_spec(tmp_path, docker_engine.url, "python -c \"import time; time.sleep(600)\"")
    proc = launch_up(spec)
    try:
        wait_for(lambda: len(leftovers(docker_engine, "dk")[0]) == 2, 120, 0.5, what="both containers", proc=proc)
        # The record names a container once it started: wait for both there (a container's start comes
        # before its line in launcher.json, and a kill between them left worker:1 out under load).
        wait_for(lambda: _named_in_record(spec) == {"worker:0", "worker:1"}, 60, 0.2,
                 what="launcher.json naming both tasks' containers", proc=proc)
        proc.kill()  # a crash: what it left is down's to remove, by the record
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_for(lambda: containers_exited(docker_engine, "dk"), 60, 0.5, what="the lifeline to stop both tasks")
    client = docker_engine.client()
    others = []
    try:
        # Someone else's container, and one labelled as another run of the same spec.
        plain = client.containers.run(worker_image, ["sleep", "300"], detach=True, labels={"com.example.app": "db"})
        forged = client.containers.run(worker_image, ["sleep", "300"], detach=True,
                                       labels={"tfcluster.run_id": "20200101-000000-0000", "tfcluster.name": "dk"})
        others = [plain, forged]
        record = latest_run_dir(spec) / "launcher.json"
        info = json.loads(record.read_text())
        info["tasks"]["worker:0"]["container_id"] = plain.id
        info["tasks"]["worker:1"]["container_id"] = forged.id
        record.write_text(json.dumps(info))
        result = tfcluster_at_repo("down", str(spec), timeout=120)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.splitlines()
        (line0,) = [line for line in lines if line.startswith("tfcluster: error: worker:0: not removing container")]
        assert "it has no tfcluster.run_id label (tfcluster did not create it)" in line0, result.stderr
        (line1,) = [line for line in lines if line.startswith("tfcluster: error: worker:1: not removing container")]
        assert "its label tfcluster.run_id is '20200101-000000-0000'" in line1, result.stderr
        assert "could not be proven the run's own" in lines[-1] and "Traceback" not in result.stderr
        for c in others:
            c.reload()
            assert c.status == "running", (c.name, c.status)
        # The run's own containers (found by the run's label) and its network are gone.
        own = [c for c in client.containers.list(all=True, filters={"label": "tfcluster.name=dk"})
               if c.labels.get("tfcluster.run_id") == latest_run_dir(spec).name]
        assert own == [] and leftovers(docker_engine, "dk")[1] == [], result.stderr
    finally:
        for c in others:
            c.remove(force=True)
        client.close()


def _named_in_record(spec) -> set:
    try:
        tasks = json.loads((latest_run_dir(spec) / "launcher.json").read_text()).get("tasks") or {}
    except (OSError, ValueError, TypeError):
        return set()
    return {k for k, v in tasks.items() if isinstance(v, dict) and v.get("container_id")}
