"""The ssh host agent's keep of its host's fork server (launcher/remote/zygotehost.py), with real
processes from a run dir of the shipped files (a server that imports ``json``): killed, its end is
said at once on the keeper's channel; asked, the keeper starts a new one on the same socket, which
serves (its forks' grandparent is the new server); the keeper's stdin closed, the new one ends and
its socket's dir is removed. The lease's bytes on the same stdin do not disturb the asking."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from launcher.remote import HERE, TASK_FILES, taskwrap_path
from tests.support.waits import wait_for

GRANDPARENT = "import os; print(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])"
# As agent.py runs it: start, say the reply, keep; the first server ended at its end as well.
DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import zygotehost
order = json.loads(sys.argv[2])
proc, said = zygotehost.start(order, sys.argv[1], None)
sys.stdout.write(json.dumps(said) + "\\n")
sys.stdout.flush()
class Lines:
    fd, buf = 0, b".."
try:
    code = zygotehost.keep(Lines(), {"lease": 0}, [], proc, order, {"run_dir": sys.argv[1], "workdir": None})
finally:
    zygotehost.end(proc, 2.0)
sys.exit(code)
"""


def env_of(server: bool = False) -> dict:
    """The keeper's environment, or (``server``) the one it gives the server (its interpreter's dir
    first on PATH, as boot.py gives a task), which a task must share."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return {**env, "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "/usr/bin:/bin")} \
        if server else env


def said(driver: subprocess.Popen, timeout: float = 30) -> dict:
    ready, _, _ = select.select([driver.stdout], [], [], timeout)
    assert ready, f"the keeper said nothing in {timeout} s"
    return json.loads(driver.stdout.readline())


def ready_pids(run_dir: Path) -> list[int]:
    logs = list(run_dir.glob("zygote.*.log"))
    text = logs[0].read_text() if logs else ""
    return [int(l.split("pid=")[1].split()[0]) for l in text.splitlines() if " ready pid=" in l]


def ask(sock: str, code: str) -> tuple[int, str, str]:
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", sock, "--zygote-wait", "30", "--",
                          sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env_of(server=True))
    p.wait(timeout=60)
    return p.returncode, p.stdout.read(), p.stderr.read()


def test_a_killed_server_is_said_at_once_and_started_again_on_the_same_socket_when_asked(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    for name in TASK_FILES:
        shutil.copy(HERE / name, run_dir / name)
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2}
    driver = subprocess.Popen([sys.executable, "-S", "-c", DRIVER, str(run_dir), json.dumps(order)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env_of())
    try:
        sock = said(driver)["socket"]
        code, out, err = ask(sock, GRANDPARENT)
        (first,) = ready_pids(run_dir)
        assert (code, out, err) == (0, f"{first}\n", ""), err
        os.kill(first, signal.SIGKILL)
        assert said(driver, 10) == {"ended": 137, "cold": ""}
        code, out, err = ask(sock, "print('ran')")  # (not asked yet: refused at once, cold)
        assert (code, out) == (0, "ran\n") and "no zygote serves" in err, err
        driver.stdin.write('..{"restart":true}\n.')  # (with the lease's bytes around it)
        driver.stdin.flush()
        assert said(driver) == {"restarted": {"socket": sock}}
        code, out, err = ask(sock, GRANDPARENT)
        second = ready_pids(run_dir)[1]
        assert (code, out, err) == (0, f"{second}\n", "") and second != first, err
        driver.stdin.write('{"restart":true}\n')  # (it serves: the same socket, nothing started)
        driver.stdin.flush()
        assert said(driver) == {"restarted": {"socket": sock}} and len(ready_pids(run_dir)) == 2
        driver.stdin.close()
        assert driver.wait(timeout=30) == 0
        wait_for(lambda: not os.path.exists(f"/proc/{second}"), 10, what=f"the new server ({second}) ending")
        assert not os.path.exists(os.path.dirname(sock))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
