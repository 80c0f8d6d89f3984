"""Other users of an ssh host (docs/concepts/trust.md, "Other users of the machine"), with a second
real user (tests/support/otheruser.py) on the lab's hosts, which share this machine's files: a
``remote_dir`` they could swap is refused at the preflight in one line, before anything is written
there or runs; the dirs a run makes are private; and a run dir swapped after the preflight, with a
``boot.py`` of theirs in it, never runs: the restart checks the dir again first."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from tests.support.cli import tfcluster
from tests.support.otheruser import NAME, as_other, other_user
from tests.support.ssh_helpers import PY

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
    for name in ("boot.py", "taskwrap.py", "gpuplace.py"):
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
