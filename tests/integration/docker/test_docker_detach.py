"""``up --detach`` with backend docker: the supervisor runs here; when it is SIGKILLed the
containers stop by their lifeline, ``status`` says "supervisor lost" (exit 3) and ``down``
removes what is left."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.support.waits import wait_for

from tests.support.docker_helpers import containers_exited, docker_spec, leftovers, tfcluster_at_repo

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1500)]

# Listens on its TF port (so the run becomes ready) and prints a step line every 0.2 s.
SERVE = ("python -c \"import json,os,socket,time; c=json.loads(os.environ['TF_CONFIG']); "
         "s=socket.socket(); s.bind(('0.0.0.0', int(c['cluster']['worker'][c['task']['index']].rsplit(':',1)[1]))); "
         "s.listen(); [print('tfcluster-step epoch=0 step=%d global_step=%d loss=0.5 accuracy=0.5' % (i, i), "
         "flush=True) or time.sleep(0.2) for i in range(1, 3000)]\"")


def test_detached_docker_run_supervisor_killed_status_lost_down_cleans(tmp_path, docker_engine, worker_image):
    spec = docker_spec(tmp_path, docker_engine.url, SERVE)
    try:
        res = tfcluster_at_repo("up", str(spec), "--detach", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "is running detached" in res.stdout
        st = tfcluster_at_repo("status", str(spec), "--json")
        data = json.loads(st.stdout)
        assert st.returncode == 0 and data["state"] == "running" and data["backend"] == "docker", data
        assert len(leftovers(docker_engine, "dk")[0]) == 2
        os.kill(int(data["supervisor_pid"]), signal.SIGKILL)
        st = tfcluster_at_repo("status", str(spec))
        assert st.returncode == 3, st.stdout + st.stderr
        assert "supervisor lost" in st.stdout.splitlines()[0] and "clean up: tfcluster down" in st.stdout

        wait_for(lambda: containers_exited(docker_engine, "dk"), 60, 0.5, what="the lifeline to stop both containers")
        down = tfcluster_at_repo("down", str(spec), timeout=120)
        assert down.returncode == 0 and "removed" in down.stderr, down.stderr
        assert leftovers(docker_engine, "dk") == ([], [])
        data = json.loads(tfcluster_at_repo("status", str(spec), "--json").stdout)
        assert data["state"] == "stopped", data
    finally:
        tfcluster_at_repo("down", str(spec), timeout=120)
