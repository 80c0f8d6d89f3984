"""GCE's preemption notice, on the ssh lab: a small metadata server of the test's own
listens on 127.0.0.1 inside h2's network namespace (GCE_METADATA_HOST points there; on h1 and h3
nothing listens at that address, as on a VM that is not preempted). When the test flips its
instance/preempted flag to TRUE, h2's task wrapper sends the graceful SIGTERM at once: the tasks
are stopped that way before any SIGTERM from the OS, h2 counts as preempted (host_preempted, no
host_wait), and its task moves to the spare h3.

The tasks are stand-ins (tests/support/group_task.py: each says it was stopped on its SIGTERM, and
the group of the next attempt ends once both are up): what is checked is the notice's path, the
wrapper's and the supervisor's. What TensorFlow makes of the notice is checked once, with
TensorFlow's own preemption handler (every worker saves the one step they agree on after the
notice, and the group resumes there on the spare h3), in test_ssh_tf_users.py:
test_the_preemption_handler_saves_on_the_gce_notice_and_resumes_on_the_spare. The reference
worker's agreed save on a SIGTERM, its state copied to the spare's disk and 0 steps redone, is
test_ssh_elastic.py's: test_a_spare_replaces_a_host_shutting_down_without_spending_a_restart."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from tests.support.tfrun import run_and_act
from tests.support.waits import wait_for

from .conftest import PY, task_processes
from tests.support.ssh_helpers import GCE_PORT as PORT, GCE_SERVER as SERVER, NOTICE, bring_back, group_task, preempt
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh]



def test_the_gce_notice_stops_the_tasks_before_the_os_sigterm_and_the_task_moves_to_the_spare(lab, make_spec, tmp_path):
    flag = tmp_path / "preempted"
    flag.write_text("FALSE")
    out_dir = tmp_path / "out"
    server = subprocess.Popen(["ip", "netns", "exec", lab.host("h2").netns, PY, "-c", SERVER, str(flag), str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = tmp_path / "preempted.log"
    try:
        spec = make_spec(
            group_task(out_dir, 2, hold=1),  # attempt 0 runs until stopped; attempt 1 ends once both are up
            hosts=["h1", "h2", "h3"], env={"GCE_METADATA_HOST": f"127.0.0.1:{PORT}"},
            restart={"max_restarts": 0}, elastic={"host_wait": 60},
            watchdog={"startup_timeout": 120, "stop_grace": 15},
        )
        os_sigterm: list[float] = []

        def notice(_proc):
            flag.write_text("TRUE")

        def os_shutdown(_proc):  # after the notice's stop, as GCE's ACPI soft-off comes after the notice
            def go():
                os_sigterm.append(time.time())
                preempt(lab, "h2")
            threading.Thread(target=go, daemon=True).start()

        up = r"^\[worker:\d\] group of 2 attempt 0"  # (the notice once both tasks run: the second such line)
        # The OS shutdown once both tasks stopped: worker:1's exit 143 (its wrapper's SIGTERM) then
        # reaches the supervisor before any lost session, and worker:0 must be SIGTERMed for the
        # notice alone (it was SIGKILLed when the shutdown came later than that exit).
        code, out = run_and_act(spec, [
            (up, lambda p: None), (up, notice),
            (r"\[worker:0\] stopped in attempt 0", os_shutdown),
        ], timeout=300)
        wait_for(lambda: os_sigterm, NOTICE + 30, what="the OS shutdown of h2 to have started")
    finally:
        server.kill()
        bring_back(lab, "h2")
    assert code == 0, out[-6000:]
    assert "taskwrap: GCE preemption notice (metadata /computeMetadata/v1/instance/preempted is TRUE)" in out
    assert "h2: GCE preemption notice; its tasks save and stop now" in out, out[-4000:]
    # h1's wrapper polled nothing that answered: only h2's tasks saw the notice.
    assert "[worker:0] taskwrap: GCE preemption notice" not in out
    # Both tasks of the first attempt were stopped the graceful way (the SIGTERM a save answers).
    assert "[worker:0] stopped in attempt 0" in out and "[worker:1] stopped in attempt 0" in out, out[-4000:]
    assert "h2 lost (preempted: GCE notice at " in out and "worker:1 moved to h3" in out, out[-4000:]
    assert {p.name: p.read_text() for p in out_dir.iterdir()} == {
        "0-2-worker-0": "h1", "0-2-worker-1": "h2", "1-2-worker-0": "h1", "1-2-worker-1": "h3"}
    # The notice, the stop and the host_preempted event all came before the OS SIGTERM.
    run = spec.parent / "runs" / "sshtest" / "latest"
    recorded = read_records(run)
    [preempted] = [e for e in recorded if isinstance(e, ev.HostPreempted)]
    assert preempted["host"] == "h2" and preempted["time"] < os_sigterm[0], (preempted, os_sigterm)
    true_served = [float(line.split()[0]) for line in log.read_text().splitlines() if line.endswith(" TRUE")]
    # (<=: the event's time is kept to the millisecond, and the suite saw both at 948.305)
    assert true_served and true_served[0] <= preempted["time"] < os_sigterm[0], (true_served, preempted, os_sigterm)
    assert not [e for e in recorded if isinstance(e, ev.GroupRestart)]  # a preemption spends no restart
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")
