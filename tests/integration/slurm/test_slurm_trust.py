"""A run record is data, not orders, on a real Slurm cluster: ``tfcluster down`` cancels a job id
its record names only once Slurm says the job is this user's, named and commented (``sbatch
--comment``) as this run's. A record on a shared disk is someone else's input."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support.slurm_helpers import assert_clean, job_id, latest_run
from tests.support.waits import wait_for

from tests.support.tfrun import wait_line

from .conftest import PY, start_tfcluster, tfcluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(300)]


# Each task says it started, then sleeps: the run holds its allocation while the test tampers.
SLEEPER = [PY, "-c", "import time; print('STARTED', flush=True); time.sleep(120)"]


def _other_job(lab, *args: str) -> str:
    return lab.run("sbatch", "--parsable", "-N1", "-n1", "-o", "/dev/null", *args, "--wrap", "sleep 300").stdout.strip()


def test_down_cancels_the_runs_job_but_not_jobs_of_another_run_or_user_that_a_tampered_record_names(lab, make_spec):
    spec = make_spec(SLEEPER)
    proc = start_tfcluster(lab, "up", str(spec))
    try:
        seen: list[str] = []
        for _ in range(2):
            wait_line(proc, r"\] STARTED", seen, 60)
        job = job_id(spec)
        os.killpg(proc.pid, signal.SIGKILL)  # the allocation outlives its launcher (down's own case)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # Another run of the same spec (same user, same job name, its own comment), and a job of
    # another user that even carries this run's comment: what a tamperer would name.
    run_id = latest_run(spec).name
    other_run = _other_job(lab, "--job-name=tfcluster-slurmtest", "--comment=tfcluster:slurmtest/20200101-000000-0000")
    other_user = _other_job(lab, "--uid=nobody", "--job-name=tfcluster-slurmtest",
                            f"--comment=tfcluster:slurmtest/{run_id}")
    record = latest_run(spec) / "launcher.json"
    info = json.loads(record.read_text())
    info["tasks"]["worker:0"]["slurm_job"] = other_run
    info["tasks"]["worker:1"]["slurm_job"] = other_user
    record.write_text(json.dumps(info))
    down = tfcluster(lab, "down", str(spec), timeout=90)
    assert down.returncode == 1, down.stderr
    lines = down.stderr.splitlines()
    assert f"cancelled slurm job {job}" in down.stderr
    (run_line,) = [line for line in lines if f"not cancelling slurm job {other_run}," in line]
    assert "its comment is 'tfcluster:slurmtest/20200101-000000-0000'" in run_line, down.stderr
    (user_line,) = [line for line in lines if f"not cancelling slurm job {other_user}," in line]
    assert "its user is 'nobody'" in user_line, down.stderr
    assert "could not be proven the run's own" in lines[-1] and "Traceback" not in down.stderr
    assert len(lines) <= 20, down.stderr
    live = lab.jobs()
    assert other_run in live and other_user in live, (live, down.stderr)  # both left alone
    wait_for(lambda: job not in lab.jobs(), 30, what=f"the run's own job {job} to end")
    lab.run("scancel", other_run, other_user)
    assert_clean(lab, spec)
