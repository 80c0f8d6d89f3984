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
import tempfile
from pathlib import Path

import pytest

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

# As agent.py runs it since it keeps in a small interpreter: start, say the reply, become the keeper
# (this process exec'd: ``python -S zygotehost.py --keeper FD``), which ends its server itself.
BECOMES = DRIVER.split("try:")[0] + """sys.exit(zygotehost.become_keeper(Lines(), {"lease": 0}, [], proc, order,
                                   {"run_dir": sys.argv[1], "workdir": None}))
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


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _keeping(tmp_path: Path) -> tuple[subprocess.Popen, str, Path]:
    """A driver that became its server's keeper: (it, the socket, the run dir), once exec'd."""
    run_dir = _run_dir(tmp_path, "run")
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2}
    driver = subprocess.Popen([sys.executable, "-S", "-c", BECOMES, str(run_dir), json.dumps(order)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env_of())
    sock = said(driver)["socket"]
    wait_for(lambda: "zygotehost.py --keeper " in Path(f"/proc/{driver.pid}/cmdline").read_bytes().replace(b"\0", b" ")
             .decode(), 30, what="the agent exec'd as a small keeper")
    wait_for(lambda: ready_pids(run_dir), 30, what="its server ready")
    return driver, sock, run_dir


def test_the_keeper_is_a_small_interpreter_of_its_own_and_still_keeps_its_server(tmp_path):
    """At "keep" the agent's process becomes ``python -S zygotehost.py --keeper FD`` (the same
    pid, the same channel): its server stays its child and serves; killed, its end is said at
    once (exit 137, as a shell says it); asked, a new one starts on the same socket, the keeper's
    child too; its channel closed, the keeper stops it, removes its socket's dir and exits 0."""
    driver, sock, run_dir = _keeping(tmp_path)
    try:
        (first,) = ready_pids(run_dir)
        assert _parent(first) == driver.pid
        assert ask(sock, GRANDPARENT)[:2] == (0, f"{first}\n")
        os.kill(first, signal.SIGKILL)
        assert said(driver, 10) == {"ended": 137, "cold": ""}
        driver.stdin.write('.{"restart":true}\n.')
        driver.stdin.flush()
        assert said(driver) == {"restarted": {"socket": sock}}
        code, out, _err = ask(sock, GRANDPARENT)  # (served once the new one's import is done)
        second = ready_pids(run_dir)[1]
        assert _parent(second) == driver.pid and (code, out) == (0, f"{second}\n")
        driver.stdin.close()
        assert driver.wait(timeout=30) == 0
        assert not os.path.exists(f"/proc/{second}") and not os.path.exists(os.path.dirname(sock))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_a_keeper_killed_takes_its_server_with_it_at_once_a_stopped_one_too(tmp_path):
    """The server needs no wrapper of its own: when its keeper dies without a word (SIGKILL), the
    kernel kills it (zygote.py --parent, PR_SET_PDEATHSIG), even while it is stopped (SIGSTOP),
    which a SIGTERM would not end. (Its exec into the small keeper did not: it served after it.)"""
    driver, sock, run_dir = _keeping(tmp_path)
    (server,) = ready_pids(run_dir)
    try:
        assert ask(sock, "print('served')")[:2] == (0, "served\n")
        os.kill(server, signal.SIGSTOP)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        assert _ends_within(server, 10), f"the server {server} outlived its keeper"
    finally:
        for pid in (server,):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- kept warm past the run (ssh.keep_warm) --------------------------------------------------------

def _run_dir(tmp_path: Path, name: str) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir(mode=0o700)
    for file in TASK_FILES:
        shutil.copy(HERE / file, run_dir / file)
    return run_dir


def _warm_run(run_dir: Path, order: dict, tmpdir: Path) -> tuple[subprocess.Popen, dict]:
    """A run's agent (the driver) for ``order``, its temp dir ``tmpdir`` (where the user's warm dir is)."""
    driver = subprocess.Popen([sys.executable, "-S", "-c", DRIVER, str(run_dir), json.dumps(order)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**env_of(), "TMPDIR": str(tmpdir)})
    return driver, said(driver)


def _ask_in(sock: str, tmpdir: Path) -> tuple[int, str, str]:
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", sock, "--zygote-wait", "30", "--",
                          sys.executable, "-c", GRANDPARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**env_of(server=True), "TMPDIR": str(tmpdir)})
    p.wait(timeout=60)
    return p.returncode, p.stdout.read(), p.stderr.read()


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` ends within ``seconds`` (its pidfd's readiness)."""
    fd = os.pidfd_open(pid)
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def _end_run(driver: subprocess.Popen) -> None:
    driver.stdin.close()
    assert driver.wait(timeout=30) == 0


@pytest.fixture
def short_tmp():
    """A temp dir of a short path (a unix socket's is at most 107 bytes; pytest's tmp_path is long)."""
    path = Path(tempfile.mkdtemp(prefix="tw", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_server_kept_warm_outlives_its_run_serves_the_next_and_ends_once_no_run_held_it_for_that_long(
        tmp_path, short_tmp):
    tmpdir = short_tmp
    keep = 2.0
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2,
             "keep_warm": keep}
    first, got = _warm_run(_run_dir(tmp_path, "run1"), order, tmpdir)
    try:
        assert "warm" in got, got
        pid = got["warm"]["pid"]
        assert got["warm"] == {"pid": pid, "reused": False, "keep": keep}
        sock = got["socket"]
        assert Path(sock).parent.parent == tmpdir / f"tfcluster-warm-{os.geteuid()}"
        assert _ask_in(sock, tmpdir) == (0, f"{pid}\n", "")
        assert not _ends_within(pid, 2 * keep), "a server held by its run ended after keep_warm"
        _end_run(first)
        assert os.path.exists(f"/proc/{pid}"), "the warm server ended with its run"
        # The next run of the same order adopts it: its task is forked from the same server.
        second, got2 = _warm_run(_run_dir(tmp_path, "run2"), order, tmpdir)
        assert got2 == {"socket": sock, "warm": {"pid": pid, "reused": True, "keep": keep}}
        assert _ask_in(sock, tmpdir) == (0, f"{pid}\n", "")
        # Another environment: a server of its own, not that one.
        other, got3 = _warm_run(_run_dir(tmp_path, "run3"), {**order, "env": {"OTHER": "1"}}, tmpdir)
        assert got3["warm"]["reused"] is False and got3["warm"]["pid"] != pid and got3["socket"] != sock
        _end_run(other)
        _end_run(second)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") and not os.path.exists(Path(sock).parent),
                 keep + 15, what=f"the warm server {pid} ending {keep:g} s after its last run, its dir removed")
        wait_for(lambda: not os.path.exists(f"/proc/{got3['warm']['pid']}"), keep + 15, what="the other server ending")
        log = (tmp_path / "run2").glob("zygote.*.log")
        assert "of an earlier run" in next(log).read_text()
    finally:
        for p in (first,):
            if p.poll() is None:
                p.kill()
        for gone in tmpdir.glob("tfcluster-warm-*/*/z.sock"):
            subprocess.run(["pkill", "-KILL", "-f", str(gone)], check=False)


def test_a_warm_dir_not_the_users_alone_is_not_used_and_the_run_has_its_own_server(tmp_path, short_tmp):
    tmpdir = short_tmp
    planted = tmpdir / f"tfcluster-warm-{os.geteuid()}"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)  # (another user could plant a server or a symlink in it)
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2,
             "keep_warm": 30}
    run_dir = _run_dir(tmp_path, "run")
    driver, got = _warm_run(run_dir, order, tmpdir)
    try:
        assert "warm" not in got and "can be entered by others" in got["warm_off"], got
        (pid,) = wait_for(lambda: ready_pids(run_dir), 30, what="the run's own server")
        assert _ask_in(got["socket"], tmpdir) == (0, f"{pid}\n", "")
        assert not list(planted.iterdir())
        _end_run(driver)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 15, what="the run's own server ending with the run")
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_package_installed_again_is_not_served_from_the_server_kept_before(tmp_path, short_tmp):
    """Its import's file changed (pip install -U): the next run's server is a new one, which
    imports the new version; the old one ends once no run holds it."""
    mods = short_tmp / "mods"
    mods.mkdir()
    (mods / "tfc_fake_mod.py").write_text("VERSION = 1\n")
    order = {"argv": [sys.executable], "imports": ["tfc_fake_mod"], "env": {"PYTHONPATH": str(mods)}, "pad": "",
             "title": 64, "grace": 2, "keep_warm": 2.0}
    first, got = _warm_run(_run_dir(tmp_path, "run1"), order, short_tmp)
    _end_run(first)
    (mods / "tfc_fake_mod.py").write_text("VERSION = 22\n")  # (another size, another time)
    second, got2 = _warm_run(_run_dir(tmp_path, "run2"), order, short_tmp)
    try:
        assert got["warm"]["reused"] is False and got2["warm"]["reused"] is False, (got, got2)
        assert got2["warm"]["pid"] != got["warm"]["pid"] and got2["socket"] != got["socket"]
        wait_for(lambda: not os.path.exists(f"/proc/{got['warm']['pid']}"), 20, what="the old server ending")
    finally:
        _end_run(second)
        wait_for(lambda: not os.path.exists(f"/proc/{got2['warm']['pid']}"), 20, what="the new server ending")


def test_a_run_in_another_network_namespace_on_the_same_disk_gets_its_own_server(tmp_path, short_tmp):
    """Containers (or the lab's hosts) sharing a temp dir: a kept server's forks would run in its
    network, and its pid would mean another process in another pid namespace. A run of the same
    order in a new network namespace (unshare --net) does not adopt it."""
    from tests.support.prereq import require_root, require_tool

    require_root()
    unshare = require_tool("unshare", "util-linux")
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2,
             "keep_warm": 2.0}
    first, got = _warm_run(_run_dir(tmp_path, "run1"), order, short_tmp)
    driver = subprocess.Popen([unshare, "--net", sys.executable, "-S", "-c", DRIVER, str(_run_dir(tmp_path, "run2")),
                               json.dumps(order)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**env_of(), "TMPDIR": str(short_tmp)})
    try:
        got2 = said(driver)
        assert got2["warm"]["reused"] is False and got2["warm"]["pid"] != got["warm"]["pid"], (got, got2)
    finally:
        _end_run(driver)
        _end_run(first)
        for pid in (got["warm"]["pid"], got2["warm"]["pid"]):
            wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 20, what=f"the server {pid} ending")


def test_the_dir_of_a_killed_warm_server_is_removed_by_the_next_warm_start(tmp_path, short_tmp):
    """SIGKILLed (or killed by the OOM killer), a server kept warm cannot remove its dir: the next
    warm start on the host, whatever its key, removes the dirs whose socket nobody serves."""
    order = {"argv": [sys.executable], "imports": ["json"], "env": {}, "pad": "", "title": 64, "grace": 2,
             "keep_warm": 30.0}
    first, got = _warm_run(_run_dir(tmp_path, "run1"), order, short_tmp)
    _end_run(first)
    os.kill(got["warm"]["pid"], signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{got['warm']['pid']}"), 10, what="the killed server gone")
    left = Path(got["socket"]).parent
    assert left.exists()
    other, got2 = _warm_run(_run_dir(tmp_path, "run2"), {**order, "env": {"OTHER": "1"}, "keep_warm": 2.0}, short_tmp)
    try:
        assert not left.exists() and Path(got2["socket"]).parent.exists()
    finally:
        _end_run(other)
        wait_for(lambda: not os.path.exists(f"/proc/{got2['warm']['pid']}"), 20, what="the other server ending")


def test_a_warm_servers_own_copy_has_every_file_its_imports_and_its_waiters_need():
    """A server kept warm runs from its own copy of WARM_FILES (the run's dir may go first), and
    each task's waiter execs zygotewait.py from there with -S (no site-packages: tfcluster need
    not be installed on the host). masking.py was missing: every waiter's exec failed on its
    import, and every forked task's exit status was lost ("unknown (137)")."""
    import ast

    from launcher.remote.zygotewarm import WARM_FILES

    ours = {p.stem for p in HERE.glob("*.py")}
    todo, seen = ["zygote", "zygotewait"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse((HERE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name in ours]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "sibling" and node.args:
                todo += [node.args[0].value] if node.args[0].value in ours else []
            elif isinstance(node, ast.ImportFrom) and node.module in ours:
                todo.append(node.module)
    assert {f"{name}.py" for name in seen} <= set(WARM_FILES), sorted(seen)
