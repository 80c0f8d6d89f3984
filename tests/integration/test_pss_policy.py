"""ParameterServer supervision with plain Python tasks (fast, no TensorFlow): servers that are
silent by design versus the hang watchdog."""

from __future__ import annotations

from pathlib import Path

from launcher.cli.main import main
from tests.support.processes import pids_with_env
from tests.support.specs import script_spec
from tests.support.waits import wait_for

import pytest

pytestmark = pytest.mark.integration

# chief: prints a line every 0.2 s for CHIEF_STEPS (25: ~5 s) then exits 0; ps/worker: listen on their port and
# print nothing, like tf.distribute.Server(...).join(). With SIGSTOP_PS set, ps:0 stops itself.
TASK = """\
    import json, os, signal, socket, time
    conf = json.loads(os.environ["TF_CONFIG"])
    kind, index = conf["task"]["type"], conf["task"]["index"]
    me = conf["cluster"][kind][index]
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(me.rsplit(":", 1)[1])))
    s.listen()
    print(kind, index, "serving", flush=True)
    if kind == "chief":
        for i in range(int(os.environ.get("CHIEF_STEPS", "25"))):
            print("step", i, flush=True)
            time.sleep(0.2)
    else:
        if kind == "ps" and os.environ.get("SIGSTOP_PS") == "1" and os.environ["TFCLUSTER_RESTART_COUNT"] == "0":
            time.sleep(1)
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(600)
"""


def pss_spec(tmp_path: Path, env: str = "{}") -> Path:
    return script_spec(tmp_path, TASK, tasks="{chief: 1, worker: 2, ps: 1}", strategy="parameter_server",
                       watchdog="{stop_grace: 1, hang_timeout: 2}",
                       extra=f"env: {env}\nrestart: {{max_restarts: 1}}\n")


def run_id(tmp_path: Path) -> str:
    return (tmp_path / "runs" / "t" / "latest").resolve().name


def test_silent_pss_servers_are_not_hung(tmp_path, capsys):
    path = pss_spec(tmp_path)
    assert main(["up", str(path)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "hung" not in err
    assert "run succeeded after 1 attempt(s)" in err
    wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id(tmp_path)), 15, what="no process left")


def test_sigstopped_ps_is_named_hung_and_cluster_restarts(tmp_path, capsys):
    # the chief trains 10 s: well after ps:0's stop (1 s) and the 2 s hang_timeout, however slow;
    # watchdog.stopped_timeout off: its wrapper's word on the stop would name it first
    path = pss_spec(tmp_path, env='{SIGSTOP_PS: "1", CHIEF_STEPS: "50"}')
    path.write_text(path.read_text().replace("hang_timeout: 2}", "hang_timeout: 2, stopped_timeout: 0}"))
    assert main(["up", str(path)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "ps:0 failed: hung: no progress for 2 s (watchdog.hang_timeout); process is stopped (SIGSTOP?)" in err
    assert "restarting the whole group (restart 1 of 1)" in err
    wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id(tmp_path)), 15, what="no process left")
