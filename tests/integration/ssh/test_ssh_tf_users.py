"""A TensorFlow user's own scripts over ssh, on the lab's sshd hosts (each task a cold start of
tfcluster's stub on its host, warm standbys promoted for the next attempt):

* a Keras 3 script (``import keras``) trains under MultiWorkerMirroredStrategy with tf_keras;
* TensorFlow's preemption handler (examples/preemption_handler.py, as docs/your-script.md shows it):
  h2's GCE preemption notice has every worker save the step they agree on and exit 42 before the
  Spot VM's OS shutdown ends h2; the group restarts on the spare h3 without spending
  restart.max_restarts (0) and resumes from that save.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

import pytest

from tests.support.keras_scripts import KERAS3, check_keras3_run
from tests.support.ssh_helpers import GCE_PORT as PORT, GCE_SERVER as SERVER, NOTICE, bring_back, preempt
from tests.support.tfrun import run_and_act, up
from tests.support.waits import wait_for

from .conftest import PY, ROOT, task_processes

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.tf]


def test_a_keras3_script_trains_over_ssh_with_tf_keras(lab, make_spec, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(KERAS3)
    spec = make_spec([PY, str(script)], env={"TF_CPP_MIN_LOG_LEVEL": "2"}, ssh={"require": ["tensorflow", "tf_keras"]})
    result = up(spec, timeout=400)
    check_keras3_run(result.returncode, result.stdout + result.stderr)
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")


@pytest.mark.timeout(900)  # two attempts over ssh, and the hosts' shutdown
def test_the_preemption_handler_saves_on_the_gce_notice_and_resumes_on_the_spare(lab, make_spec, tmp_path):
    flag = tmp_path / "preempted"
    flag.write_text("FALSE")
    server = subprocess.Popen(["ip", "netns", "exec", lab.host("h2").netns, PY, "-c", SERVER, str(flag), str(PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        spec = make_spec(
            [PY, str(ROOT / "examples" / "preemption_handler.py"), "600"],
            hosts=["h1", "h2", "h3"], env={"TF_CPP_MIN_LOG_LEVEL": "2", "GCE_METADATA_HOST": f"127.0.0.1:{PORT}"},
            restart={"max_restarts": 0}, elastic={"host_wait": 60},
            watchdog={"startup_timeout": 120, "stop_grace": 15},
            ssh={"require": ["tensorflow", "tf_keras"]},
        )
        os_sigterm: list[float] = []

        def notice(_proc):
            flag.write_text("TRUE")

        def os_shutdown(_proc):  # after the notice's save, as GCE's ACPI soft-off comes after the notice
            def go():
                os_sigterm.append(time.time())
                preempt(lab, "h2")
            threading.Thread(target=go, daemon=True).start()

        code, out = run_and_act(spec, [(r"^\[worker:1\] step 20 loss", notice),
                                       (r"restart\.preemption_exit_codes|h2 lost", os_shutdown)], timeout=600)
        wait_for(lambda: os_sigterm, NOTICE + 30, what="the OS shutdown of h2 to have started")
    finally:
        server.kill()
        bring_back(lab, "h2")
    starts = {k: [int(m.group(1)) for m in re.finditer(rf"^\[{re.escape(k)}\] training from step (\d+) to", out, re.M)]
              for k in ("worker:0", "worker:1")}
    ends = {k: re.findall(rf"^\[{re.escape(k)}\] step (\d+) loss", out, re.M)[-1:] for k in ("worker:0", "worker:1")}
    assert code == 0, f"each worker's starts {starts}, last steps {ends}\n" + out[-6000:]
    assert "h2: GCE preemption notice; its tasks save and stop now" in out, out[-4000:]
    assert "worker:1 moved to h3" in out, out[-4000:]
    # Both resumed from the one save, which came after the notice (step 20).
    assert starts["worker:0"][0] == starts["worker:1"][0] == 0, starts
    assert starts["worker:0"][-1] == starts["worker:1"][-1] >= 20, starts
    last = [int(m.group(1)) for m in re.finditer(r"^\[worker:0\] step (\d+) loss", out, re.M)]
    assert last[-1] == 600, last[-5:]
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")
