"""Other users of the same machine (docs/concepts/trust.md, "Other users of the machine"), tried
with a second real user (tests/support/otheruser.py): a run dir they could swap is refused in one
line before anything runs, a run's record is theirs to read only with ``share: group``, and the
host agent never imports code from a run dir swapped after its preflight."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.contract.portcheck import port_holders
from launcher.remote import agent_source, task_files
from tests.support.cli import start_tfcluster, tfcluster, tfcluster_argv
from tests.support.otheruser import PYTHON, as_other, hold_port_as_other, other_can_read, release
from tests.support.specs import script_spec
from tests.support.waits import wait_for

from .conftest import RAW_CONTROL, assert_bounded

pytestmark = pytest.mark.timeout(300)

TASK = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran'); print('a line for the log')\n"


def _up(work: Path, run_dir: str, marker: Path, umask: int = 0o022, extra: str = "") -> subprocess.CompletedProcess:
    (work / "task.py").write_text(TASK)
    (work / "h.yaml").write_text(f"name: h\nstrategy: multi_worker_mirrored\nentrypoint: python task.py {marker}\n"
                                 f"tasks: {{worker: 1}}\nrun_dir: {run_dir}\n{extra}")
    return subprocess.run(tfcluster_argv("up", "h.yaml", "--plain"), cwd=work, capture_output=True, text=True,
                          timeout=180, umask=umask)


def test_a_run_dir_under_a_dir_everyone_can_write_is_refused_in_one_line(base):
    (base / "open").mkdir()
    (base / "open").chmod(0o777)
    marker = base / "ran"
    res = _up(base, str(base / "open" / "runs"), marker)
    assert_bounded(res, 1)
    assert f"h.yaml:5: run_dir: {base}/open is writable by others (mode 0777, owner root); fix: " in res.stderr, res.stderr
    assert not marker.exists() and not (base / "open" / "runs").exists()


def test_a_run_dir_the_other_user_made_first_in_a_sticky_dir_is_refused(base, mallory):
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    made = as_other("mkdir", "-m", "0755", str(sticky / "runs"))
    assert made.returncode == 0, made.stderr
    marker = base / "ran"
    res = _up(base, str(sticky / "runs"), marker)
    assert_bounded(res, 1)
    assert f"run_dir: {sticky}/runs is owned by {mallory.pw_name}, not by you or root" in res.stderr, res.stderr
    assert not marker.exists() and not (sticky / "runs" / "h").exists()
    # The sticky dir itself is fine: an entry of one's own there runs.
    res = _up(base, str(sticky / "mine"), marker)
    assert res.returncode == 0, res.stderr[-2000:]
    assert marker.read_text() == "ran"


def test_a_run_dir_reached_by_dotdot_after_a_symlink_is_judged_where_the_kernel_goes(base, mallory):
    """``run_dir: examples/../runs`` with ``examples`` a link into the other user's 0777 dir: the
    kernel makes the record in their dir (``..`` goes up from where the link leads), and ``up``
    refuses it in one line, nothing made there nor run."""
    opened = base / "open"
    (opened / "sub").mkdir(parents=True)
    opened.chmod(0o777)
    os.chown(opened, mallory.pw_uid, mallory.pw_gid)
    (base / "examples").symlink_to(opened / "sub")
    marker = base / "ran"
    res = _up(base, "examples/../runs", marker)
    assert_bounded(res, 1)
    assert f"run_dir: {opened} is owned by {mallory.pw_name}, not by you or root (mode 0777); fix: " in res.stderr, \
        res.stderr
    assert not marker.exists() and not (opened / "runs").exists() and not (base / "runs").exists()
    # Closed by its owner (root's, 0755): the run goes, its record where the kernel took the path.
    os.chown(opened, 0, 0)
    opened.chmod(0o755)
    res = _up(base, "examples/../runs", marker)
    assert res.returncode == 0 and marker.read_text() == "ran", res.stderr[-2000:]
    assert (opened / "runs" / "h" / "latest").is_symlink() and not (base / "runs").exists()
    status = tfcluster("status", "h.yaml", cwd=base)
    assert status.returncode == 0 and "succeeded" in status.stdout, status.stdout + status.stderr


def _modes(root: Path) -> dict[str, set[int]]:
    """The permission bits of every dir and regular file under ``root`` (symlinks aside)."""
    out: dict[str, set[int]] = {"dirs": set(), "files": set()}
    for dirpath, dirnames, filenames in os.walk(root):
        out["dirs"].add(stat.S_IMODE(os.lstat(dirpath).st_mode))
        for name in filenames:
            st = os.lstat(Path(dirpath) / name)
            if stat.S_ISREG(st.st_mode):
                out["files"].add(stat.S_IMODE(st.st_mode))
    return out


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_a_runs_record_and_state_are_private_whatever_the_umask(base, umask):
    marker = base / "ran"
    res = _up(base, "./runs", marker, umask=umask)
    assert res.returncode == 0, res.stderr[-2000:]
    run = next(p for p in (base / "runs" / "h").iterdir() if p.is_dir() and not p.is_symlink() and p.name != "state")
    assert {"plan.json", "events.jsonl", "launcher.json"} <= {p.name for p in run.iterdir()}
    assert _modes(base / "runs") == {"dirs": {0o700}, "files": {0o600}}
    # The other user can reach runs/ (its parent is 0755) but read nothing of the run's.
    for path in (run / "plan.json", run / "events.jsonl", run / "logs" / "worker-0.log"):
        assert path.exists()
        assert other_can_read(path) == 13, path
    assert other_can_read(marker) == 0  # (the check can tell: a file the task left world-readable is read)


def test_share_group_gives_the_group_read_and_nothing_more(base):
    state = base / "runs" / "h" / "state"
    state.mkdir(parents=True)
    state.chmod(0o777)  # one an older tfcluster's docker run left open: anyone could have planted a checkpoint
    res = _up(base, "./runs", base / "ran", umask=0o077, extra="share: group\n")
    assert_bounded(res, 1)
    assert f"run_dir: {state} is writable by others (mode 0777, owner root); fix: " in res.stderr
    assert not (base / "ran").exists()
    state.chmod(0o755)  # looked at and closed by its owner: the run takes it, and its mode
    res = _up(base, "./runs", base / "ran", umask=0o077, extra="share: group\n")
    assert res.returncode == 0, res.stderr[-2000:]
    run = next(p for p in (base / "runs" / "h").iterdir() if p.is_dir() and not p.is_symlink() and p.name != "state")
    assert _modes(run) == {"dirs": {0o750}, "files": {0o640}}, _modes(run)
    assert stat.S_IMODE(state.stat().st_mode) == 0o750
    # (runs/h, made by the test, keeps its 0755: it holds only the runs' names, each run dir its own mode)


# ---------------------------------------------------------------- the host agent: a swap after its preflight

PLANTED_BOOT = """import os
open(%r, "w").write(str(os.getuid()))
"""


def _agent(run_dir: Path, workdir: Path) -> tuple[subprocess.Popen, dict]:
    tag = "n/RUN/pids/worker-0.0.pid"
    agent = subprocess.Popen([sys.executable, "-S", "-c", agent_source(), tag], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir)
    req = {"require": [], "workdir": str(workdir), "run_dir": str(run_dir), "state_dir": str(run_dir.parent / "state"),
           "files": task_files(), "ports": [], "argv0": "",
           "gpus": False}
    agent.stdin.write(json.dumps(req).encode() + b"\n")
    agent.stdin.flush()
    return agent, json.loads(agent.stdout.readline())


def _go(agent: subprocess.Popen, run_dir: Path) -> tuple[int, str]:
    order = {"go": {"env": {}, "args": ["--pidfile", str(run_dir / "pids" / "worker-0.0.pid"), "--", "true"]}}
    out, err = agent.communicate(json.dumps(order).encode() + b"\n", timeout=60)
    return agent.returncode, (out + err).decode()


def test_the_agent_never_imports_a_run_dir_swapped_after_its_preflight(base, mallory):
    opened = base / "open"  # the admin's dir the run's remote_dir is in: 0755 at the preflight
    opened.mkdir()
    marks = base / "marks"
    marks.mkdir()
    marks.chmod(0o777)
    mark = marks / "planted-code-ran"
    run_dir = opened / "tfc" / "n" / "RUN"
    agent, reply = _agent(run_dir, base)
    try:
        assert reply["error"] is None and reply["unsafe"] is None, reply
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((run_dir / "boot.py").stat().st_mode) == 0o600
        # The window opens (the dir made writable by all), and the other user swaps the tree:
        # the run's dir moved away, one of theirs in its place, with a boot.py that leaves a mark.
        opened.chmod(0o777)
        plant = (f"mv {opened}/tfc {opened}/moved && mkdir -p {run_dir}/pids && "
                 f"printf %s \"$BOOT\" > {run_dir}/boot.py && cp {run_dir}/boot.py {run_dir}/taskwrap.py")
        swapped = subprocess.run(["runuser", "-u", mallory.pw_name, "--", "env", f"BOOT={PLANTED_BOOT % str(mark)}",
                                  "sh", "-c", plant], capture_output=True, text=True, timeout=30)
        assert swapped.returncode == 0, swapped.stderr
        code, out = _go(agent, run_dir)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
    assert code == 2, out
    assert f"refusing to run code from {run_dir}: {opened} is writable by others (mode 0777, owner root)" in out, out
    assert len(out.splitlines()) == 1 and not mark.exists()
    # The planted code was real: run as its owner would have it, it leaves the mark.
    ran = as_other(PYTHON, "-S", str(run_dir / "boot.py"))
    assert ran.returncode == 0 and mark.read_text() == str(mallory.pw_uid), ran.stderr


def test_the_agent_refuses_a_remote_dir_the_other_user_owns_before_writing_in_it(base, mallory):
    theirs = base / "theirs"
    theirs.mkdir()
    os.chown(theirs, mallory.pw_uid, mallory.pw_gid)  # (the admin gave them a scratch dir)
    agent, reply = _agent(theirs / "tfc" / "n" / "RUN", base)
    agent.stdin.close()
    agent.wait(30)
    assert reply["unsafe"] == ["run_dir", f"{theirs} is owned by {mallory.pw_name}, not by you or root (mode 0755)"]
    assert not (theirs / "tfc").exists()  # nothing made in their dir


def test_the_agent_judges_dotdot_after_a_symlink_where_the_kernel_goes(base, mallory):
    """remote_dir ``proj/examples/../tfc`` with ``examples`` a link into the other user's 0777
    scratch dir: the kernel (``cd``, ``mkdir``) goes up from where the link leads, into their dir,
    and so does the agent's check; nothing is made there. (``abspath`` would have judged
    ``proj/tfc``, the user's own.)"""
    opened = base / "open"
    (opened / "sub").mkdir(parents=True)
    opened.chmod(0o777)
    os.chown(opened, mallory.pw_uid, mallory.pw_gid)
    (base / "proj").mkdir()
    (base / "proj" / "examples").symlink_to(opened / "sub")
    run_dir = f"{base}/proj/examples/../tfc/n/RUN"
    agent, reply = _agent(Path(run_dir), base)
    agent.stdin.close()
    agent.wait(30)
    assert reply["unsafe"] == ["run_dir", f"{opened} is owned by {mallory.pw_name}, not by you or root (mode 0777)"]
    assert not (opened / "tfc").exists() and not (base / "proj" / "tfc").exists()  # nothing made, either place


# ---------------------------------------------------------------- a task's port, taken after the launcher's check

# worker:1's first attempt waits for the gate, then fails with a retryable code; its restart's
# stub checks the port again right before the script, and finds the other user's listener there.
GATED = """\
import json, os, pathlib, sys, time
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1 and os.environ["TFCLUSTER_RESTART_COUNT"] == "0":
    pathlib.Path("in-script").touch()
    while not pathlib.Path("gate").exists():
        time.sleep(0.05)
    sys.exit(200)
pathlib.Path("ran-" + os.environ["TFCLUSTER_RESTART_COUNT"]).touch()
time.sleep(120)
"""


def test_a_port_the_other_user_takes_after_the_check_fails_the_task_in_one_line_naming_them(tmp_path, mallory):
    path = script_spec(tmp_path, GATED, extra="restart: {max_restarts: 2, warm_standby: false, backoff: 0}\n")
    port = json.loads(tfcluster("plan", path, "--json").stdout)["tasks"][1]["port"]
    run = start_tfcluster("up", "--plain", path, cwd=tmp_path)
    holder = None
    try:
        # worker:1's first attempt in its script: its own check passed (waiting for worker:0 alone
        # let the holder come before worker:1's check, which then failed attempt 1, not 2).
        wait_for(lambda: (tmp_path / "in-script").exists(), 120, what="worker:1's first attempt in its script",
                 proc=run)
        # The window: the preflight found the port free; the other user takes it now.
        holder = hold_port_as_other(port, "\x1b]0;owned\x07")
        (tmp_path / "gate").touch()
        out, _ = run.communicate(timeout=120)
        held_by = [h for h in port_holders(port) if f"of user {mallory.pw_name} " in h]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(30)
        if holder is not None:
            release(holder)
    assert run.returncode == 1, out[-3000:]
    assert len(held_by) == 1, held_by
    pid = int(held_by[0].split()[1])
    failed = [line for line in out.splitlines() if "worker:1 failed:" in line]
    # Its command line escaped: the escape sequence and the newline shown, not sent.
    who = f"pid {pid} of user {mallory.pw_name} ({PYTHON} -c # \\x1b]0;owned\\x07\\nimport socket, sys\\ns = "
    assert len(failed) == 2 and f"worker:1 failed: port {port} taken by {who}" in failed[1], out[-3000:]
    assert failed[1].endswith(") (attempt 2 of 3)"), failed[1]
    assert "not retried: a port another process holds (exit 98)" in out, out[-3000:]
    assert f"hint: port {port} taken by {who}" in out and "stop it, or change ports.base in the spec" in out
    assert "Traceback" not in out and not RAW_CONTROL.search(out), out[-3000:]
    assert not (tmp_path / "ran-2").exists()  # (no third attempt)


def test_the_zygote_forks_nothing_for_another_user_even_where_its_socket_is_open(base, mallory):
    """The zygote (launcher/remote/zygote.py) forks a copy of itself, with our environment's secrets
    until the child replaces it: only its own uid is served (SO_PEERCRED), whatever the socket's mode."""
    from launcher.remote import HERE

    private = base / "zygote"
    private.mkdir(mode=0o700)  # (it binds only in a dir no one else can enter: launcher/remote/privsock.py)
    sock = private / "z.sock"
    log = base / "zygote.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), "--socket", str(sock), "--import", "json"],
                                stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_for(lambda: "ready" in log.read_text(), 30, what="the zygote's ready line")
        os.chmod(private, 0o755)
        os.chmod(sock, 0o666)  # as if left open
        # The other user's own wrapper (a copy it can read) asks for its task: not forked, run cold as itself.
        wrapdir = base / "wrap"
        wrapdir.mkdir()
        for name in ("taskwrap.py", "sibling.py", "zygoteask.py", "promotion.py", "zygote.py", "zygotewait.py", "zygotechild.py",
                     "privsock.py"):
            shutil.copy(HERE / name, wrapdir / name)
        os.chmod(wrapdir, 0o755)
        other = subprocess.Popen(["runuser", "-u", mallory.pw_name, "--", PYTHON, str(wrapdir / "taskwrap.py"),
                                  "--zygote", str(sock), "--zygote-wait", "5", "--", PYTHON, "-c",
                                  "import os; print(os.getuid(), os.getppid())"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        other.wait(timeout=60)  # (its lifeline, stdin, open meanwhile)
        out, err = other.stdout.read(), other.stderr.read()
        assert other.returncode == 0, err
        uid, parent = out.split()
        assert int(uid) == mallory.pw_uid and int(parent) != proc.pid, out
        # The wrapper itself asks only a zygote of its own uid.
        (line,) = [l for l in err.splitlines() if "zygote" in l]
        assert line == f"taskwrap: started without the zygote: {sock} is served by uid 0, not by this user", err
        # A request of the other user's own making: the zygote closes the connection, unanswered.
        ask = ("import json, os, socket, struct, sys\n"
               "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
               "body = json.dumps({'argv': [sys.executable, '-c', 'print(1)'], 'env': {}, 'cwd': '/'}).encode()\n"
               "try:\n"
               "    socket.send_fds(s, [struct.pack('!I', len(body))], [0, 1, 2]); s.sendall(body)\n"
               "    print('answer', s.recv(4096))\n"
               "except OSError as exc:\n"
               "    print('answer', exc.__class__.__name__)\n")
        raw = as_other(PYTHON, "-c", ask, str(sock))
        assert raw.stdout.strip() in ("answer b''", "answer ConnectionResetError", "answer BrokenPipeError"), raw
        assert Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split() == []  # nothing forked
    finally:
        proc.kill()
        proc.wait()
