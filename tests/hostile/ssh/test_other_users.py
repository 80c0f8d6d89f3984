"""Other users of an ssh host (docs/concepts/trust.md, "Other users of the machine"), with a second
real user (tests/support/otheruser.py) on the lab's hosts, which share this machine's files: a
``remote_dir`` they could swap is refused at the preflight in one line, before anything is written
there or runs; the dirs a run makes are private; a run dir swapped after the preflight, with a
``boot.py`` of theirs in it, never runs: the restart checks the dir again first; a task's port they
hold on a host is one line naming them, at the preflight or, taken later, when the task starts;
and ``ssh.supervisor``'s spec copy, the one file there with the spec's secrets, is 0600 in private
dirs, never written where they could swap a dir."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from launcher.remote import TASK_FILES
from tests.support.cli import start_tfcluster, tfcluster
from tests.support.otheruser import NAME, as_other, hold_port_as_other, other_can_read, other_user, release
from tests.support.otheruser import PYTHON as SYSTEM_PY
from tests.support.ssh_helpers import PY, pids_in_netns
from tests.support.waits import wait_for

from ..conftest import RAW_CONTROL

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(300)]

MARK_TASK = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')"


def _sticky_theirs(base: Path) -> tuple[Path, str]:
    (base / "sticky").mkdir(mode=0o1777)
    (base / "sticky").chmod(0o1777)
    made = as_other("mkdir", "-m", "0755", str(base / "sticky" / "tfc"))  # they made it first
    assert made.returncode == 0, made.stderr
    return base / "sticky" / "tfc", f"{base}/sticky/tfc is owned by {NAME}, not by you or root (mode 0755)"


def _open(base: Path) -> tuple[Path, str]:
    (base / "open").mkdir()
    (base / "open").chmod(0o777)
    return base / "open" / "tfc", f"{base}/open is writable by others (mode 0777, owner root)"


def _theirs(base: Path) -> tuple[Path, str]:
    (base / "theirs").mkdir()
    user = other_user()
    os.chown(base / "theirs", user.pw_uid, user.pw_gid)
    return base / "theirs", f"{base}/theirs is owned by {NAME}, not by you or root (mode 0755)"


@pytest.mark.parametrize("where", [_sticky_theirs, _open, _theirs], ids=["sticky-theirs", "open-0777", "theirs"])
def test_a_remote_dir_another_user_could_swap_is_refused_at_the_preflight(lab, make_spec, base, where):
    remote, problem = where(base)
    marker = base / "ran"
    spec = make_spec([PY, "-c", MARK_TASK, str(marker)], workers=1, hosts=["h1"], ssh={"remote_dir": str(remote)})
    before = sorted(p.name for p in remote.parent.iterdir())
    res = tfcluster("up", str(spec), "--plain", timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if "ssh.remote_dir" in line]
    assert len(lines) == 1, res.stderr
    assert re.search(rf"cluster\.yaml:\d+: ssh\.remote_dir: host h1: {re.escape(problem)}; fix: ", lines[0]), lines[0]
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) <= 5, res.stderr
    assert not marker.exists()
    assert sorted(p.name for p in remote.parent.iterdir()) == before  # nothing made there
    if remote.exists():
        assert list(remote.iterdir()) == []


def test_a_sticky_dir_with_an_entry_of_ones_own_runs_and_every_dir_made_is_private(lab, make_spec, base):
    (base / "sticky").mkdir()
    (base / "sticky").chmod(0o1777)
    remote = base / "sticky" / "tfc"
    marker = base / "ran"
    spec = make_spec([PY, "-c", MARK_TASK, str(marker)], workers=1, hosts=["h1"], ssh={"remote_dir": str(remote)})
    res = tfcluster("up", str(spec), "--plain", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert marker.read_text() == "ran"
    run_dir = next(p for p in (remote / "sshtest").iterdir() if p.name != "state")
    for d in (remote, remote / "sshtest", run_dir, run_dir / "pids", remote / "sshtest" / "state"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for name in TASK_FILES:
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600, name


# The first attempt's task opens the window (its dir made writable by all, as an admin's mistake
# would), then the other user swaps the run's tree for one of theirs, with a boot.py that leaves a
# mark, and the task fails (a retryable code): the restart would run that boot.py as root.
SWAP_TASK = """\
import os, subprocess, sys
opened, marks = sys.argv[1], sys.argv[2]
if os.environ["TFCLUSTER_RESTART_COUNT"] != "0":
    sys.exit(0)
run = os.path.join(opened, "tfc", "sshtest", os.environ["TFCLUSTER_RUN_ID"])
boot = "import os\\nopen(%r, 'w').write(str(os.getuid()))\\n" % os.path.join(marks, "planted-code-ran")
os.chmod(opened, 0o777)
plant = ('mv "$1/tfc" "$1/moved" && mkdir -p "$2/pids" && printf %s "$3" > "$2/boot.py" '
         '&& cp "$2/boot.py" "$2/taskwrap.py"')
subprocess.run(["runuser", "-u", sys.argv[3], "--", "sh", "-c", plant, "sh", opened, run, boot], check=True, timeout=60)
print("swapped", flush=True)
sys.exit(200)
"""


def test_a_run_dir_swapped_after_the_preflight_is_never_run_from(lab, make_spec, base, mallory):
    opened = base / "open"
    opened.mkdir()  # 0755: the preflight finds it safe
    marks = base / "marks"
    marks.mkdir()
    marks.chmod(0o777)
    (base / "swap.py").write_text(SWAP_TASK)
    spec = make_spec([PY, str(base / "swap.py"), str(opened), str(marks), NAME], workers=1, hosts=["h1"],
                     ssh={"remote_dir": str(opened / "tfc")},
                     restart={"max_restarts": 1, "warm_standby": False})
    res = tfcluster("up", str(spec), "--plain", timeout=180)
    out = res.stdout + res.stderr
    assert "swapped" in out, out[-3000:]  # (the swap did happen)
    assert res.returncode == 1, out[-3000:]
    assert f"{opened} is writable by others (mode 0777, owner root)" in out, out[-3000:]
    assert not (marks / "planted-code-ran").exists(), "the other user's boot.py ran as root"
    planted = next((opened / "tfc" / "sshtest").iterdir())
    assert planted.stat().st_uid == mallory.pw_uid and (planted / "boot.py").is_file()  # (their tree was there)
    assert "Traceback" not in out


# ---------------------------------------------------------------- a task's port, held by the other user on a host

def _port_of(spec: Path, key: str) -> int:
    plan = json.loads(tfcluster("plan", str(spec), "--json").stdout)
    return next(t["port"] for t in plan["tasks"] if f"{t['type']}:{t['index']}" == key)


def _holder_pid(holder, lab_host) -> int:
    """The other user's listener: the one process of theirs in the host's namespace."""
    pids = [p for p in pids_in_netns(lab_host) if os.stat(f"/proc/{p}").st_uid == other_user().pw_uid]
    assert len(pids) == 1, pids
    return pids[0]


def test_a_port_the_other_user_holds_on_a_host_is_named_at_the_preflight(lab, make_spec, base, mallory):
    marker = base / "ran"
    spec = make_spec([PY, "-c", MARK_TASK, str(marker)], workers=2, hosts=["h1", "h2"])
    port = _port_of(spec, "worker:1")
    holder = hold_port_as_other(port, "\x1b]0;owned\x07", netns=lab.host("h2").netns)
    try:
        pid = _holder_pid(holder, lab.host("h2"))
        res = tfcluster("up", str(spec), "--plain", timeout=120)
    finally:
        release(holder)
    assert res.returncode == 1, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if f"port {port} on host h2" in line]
    assert len(lines) == 1, res.stderr
    assert (f"port {port} on host h2 is in use by pid {pid} of user {NAME} ({SYSTEM_PY} -c # \\x1b]0;owned\\x07\\n"
            in lines[0]), lines[0]
    assert lines[0].endswith("(worker:1); stop what holds it or change ports.base / the task's ports"), lines[0]
    assert "Traceback" not in res.stderr and not RAW_CONTROL.search(res.stderr + res.stdout)
    assert not marker.exists()


# worker:1's first attempt (on h2) waits for the gate, then fails with a retryable code; the other
# user takes its port meanwhile, after every check the launcher and the host agent made.
GATED = """\
import json, os, pathlib, sys, time
flags = pathlib.Path(sys.argv[1])
if os.environ["TFCLUSTER_TASK"] == "worker:1" and os.environ["TFCLUSTER_RESTART_COUNT"] == "0":
    (flags / "in-script").touch()
    while not (flags / "gate").exists():
        time.sleep(0.05)
    sys.exit(200)
(flags / ("ran-" + os.environ["TFCLUSTER_TASK"] + "-" + os.environ["TFCLUSTER_RESTART_COUNT"])).touch()
time.sleep(60)
"""


def test_a_port_the_other_user_takes_on_a_host_in_the_window_fails_in_one_line_naming_them(lab, make_spec, base,
                                                                                          mallory):
    (base / "gated.py").write_text(GATED)
    flags = base / "flags"
    flags.mkdir()
    spec = make_spec([PY, str(base / "gated.py"), str(flags)], workers=2, hosts=["h1", "h2"],
                     restart={"max_restarts": 2, "warm_standby": False, "backoff": 0})
    port = _port_of(spec, "worker:1")
    run = start_tfcluster("up", "--plain", str(spec))
    holder = None
    try:
        wait_for(lambda: (flags / "in-script").exists(), 120, what="worker:1's first attempt", proc=run)
        holder = hold_port_as_other(port, "\x1b]0;owned\x07", netns=lab.host("h2").netns)
        pid = _holder_pid(holder, lab.host("h2"))
        (flags / "gate").touch()
        out, _ = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(30)
        if holder is not None:
            release(holder)
    assert run.returncode == 1, out[-3000:]
    who = f"pid {pid} of user {NAME} ({SYSTEM_PY} -c # \\x1b]0;owned\\x07\\n"
    # The task's own check (its stub, right before the script) caught it: the failure is the port
    # and its holder, not retried.
    failed = [line for line in out.splitlines() if "worker:1 failed:" in line]
    assert len(failed) == 2 and f"worker:1 failed: port {port} taken by {who}" in failed[1], out[-3000:]
    assert "not retried: a port another process holds (exit 98)" in out, out[-3000:]
    assert "Traceback" not in out and not RAW_CONTROL.search(out), out[-3000:]
    assert not list(flags.glob("ran-worker:1-*"))  # worker:1's script never ran again


# ---------------------------------------------------------------- ssh.supervisor: the spec copy on its host

# Secrets by name and by value only (launcher/plan/model.py, is_secret). The task checks it got
# each by its digest: the values themselves stay out of the command line, which is no secret.
SECRETS = {"DB_PASS": "pw-" + "Qx9" * 8, "DATABASE_URL": "postgres://app:pw0rdZ9q@db.example:5432/app",
           "SETTING": "ghp_" + "Zq7" * 12}
DIGESTS = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in SECRETS.items()}
CHECK_ENV = ("import hashlib, json, os, sys; want = json.loads(sys.argv[1]); "
             "print('env intact:', all(hashlib.sha256(os.environ[k].encode()).hexdigest() == d "
             "for k, d in want.items()), flush=True)")


def _holding_a_secret(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                  and any(v.encode() in p.read_bytes() for v in SECRETS.values()))


def test_the_supervisors_spec_copy_is_the_one_file_with_the_secrets_0600_in_private_dirs(lab, make_spec, base,
                                                                                         mallory):
    remote = base / "tfc"
    spec = make_spec([PY, "-c", CHECK_ENV, json.dumps(DIGESTS)], workers=2, hosts=["h1", "h2"], env=SECRETS,
                     ssh={"supervisor": "h1", "remote_dir": str(remote)})
    res = tfcluster("up", str(spec), "--plain", timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert out.count("env intact: True") == 2, out[-3000:]
    assert not [k for k, v in SECRETS.items() if v in out]
    copy = remote / "sshtest" / "supervisor" / "cluster.yaml"
    # The copy must hold them (the supervisor there starts the tasks); nothing else on the host does
    # (its record, the remote run dir).
    assert _holding_a_secret(remote) == [copy]
    st = copy.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    for d in (remote, remote / "sshtest", copy.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert other_can_read(copy) == 13


def test_the_supervisors_spec_copy_is_never_written_where_another_user_could_swap_the_dir(lab, make_spec, base):
    (base / "open").mkdir()
    (base / "open").chmod(0o777)
    remote = base / "open" / "tfc"
    spec = make_spec([PY, "-c", "pass"], workers=1, hosts=["h1"], env=SECRETS,
                     ssh={"supervisor": "h1", "remote_dir": str(remote)})
    res = tfcluster("up", str(spec), "--plain", timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    assert (f"host h1 (ssh.supervisor): ssh.remote_dir: {remote}/sshtest/supervisor: {base}/open is writable by "
            "others (mode 0777, owner root); fix: " in res.stderr), res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) <= 5, res.stderr
    assert not remote.exists() and _holding_a_secret(base) == []
