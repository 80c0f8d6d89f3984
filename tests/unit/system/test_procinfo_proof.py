"""The proof that a process is the one a run record names (launcher/system/procinfo.py): "holds the
run's events.jsonl open" holds only for that file itself (opened without following a symlink, with
no other name, owned by the process's user), never for a file a planted symlink or hard link leads
to; and a record names only its owner's processes. Real processes and real files; as root (the
case where every process on the machine could read as anyone's), and against a second real user."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.system.procinfo import cmdline, file_id, holds_open, not_own, start_time
from tests.support.otheruser import base, mallory  # noqa: F401 (fixtures: the second real user, a dir both reach)
from tests.support.waits import wait_for

MARK = ("TFCLUSTER_SUPERVISOR", "20250101-120000-ab12")


def _holder(path: Path, user: str = "") -> subprocess.Popen:
    """A process that opens ``path`` for appending (as a supervisor holds its events.jsonl) and
    waits; ``user``: run as that user (root only)."""
    code = f"import sys, time\nf = open({str(path)!r}, 'ab')\nprint('open', flush=True)\ntime.sleep(120)\n"
    argv = [sys.executable, "-c", code]
    if user:
        from tests.support.otheruser import PYTHON
        argv = ["runuser", "-u", user, "--", PYTHON, "-c", code]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"
    wait_for(lambda: start_time(_leaf(proc)) is not None, 10, interval=0.01, what="the holder in /proc")
    return proc


def _leaf(proc: subprocess.Popen) -> int:
    """The pid that holds the file (runuser's child where runuser started it)."""
    try:
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        kids = []
    return int(kids[0]) if kids else proc.pid


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


@pytest.fixture
def events(tmp_path) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "run_start", "time": 1.0}\n')
    return path


def test_the_file_itself_held_open_is_proof(events):
    holder = _holder(events)
    try:
        assert file_id(events) == (os.stat(events).st_dev, os.stat(events).st_ino, os.geteuid())
        assert holds_open(holder.pid, events)
        assert not_own(holder.pid, start_time(holder.pid), MARK, cmd=cmdline(holder.pid), holds=events,
                       owner=os.geteuid()) is None
    finally:
        _end(holder)


def test_a_symlink_to_what_a_process_holds_is_no_proof(tmp_path, events):
    """events.jsonl planted as a symlink to /dev/null (which nearly every process holds open), or
    to the very file the process holds: the link is not the run's file."""
    holder = _holder(events)
    sleeper = subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL)  # (stdin: /dev/null, held open)
    try:
        wait_for(lambda: start_time(sleeper.pid) is not None, 10, interval=0.01, what="sleep in /proc")
        for target, pid in (("/dev/null", sleeper.pid), (str(events), holder.pid)):
            link = tmp_path / "planted"
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            assert os.stat(link).st_ino == os.stat(target).st_ino  # (what the old check compared)
            assert file_id(link) is None
            assert not holds_open(pid, link)
            why = not_own(pid, start_time(pid), MARK, holds=link, owner=os.geteuid())
            assert why is not None and "does not hold the run's record open" in why
    finally:
        _end(holder)
        _end(sleeper)


def test_a_hard_link_to_a_file_another_process_holds_is_no_proof(tmp_path, events):
    """A second name for a file some process holds (a log a daemon writes): one link only."""
    holder = _holder(events)
    try:
        planted = tmp_path / "run"
        planted.mkdir()
        os.link(events, planted / "events.jsonl")
        assert os.stat(planted / "events.jsonl").st_nlink == 2
        assert file_id(planted / "events.jsonl") is None and file_id(events) is None
        assert not holds_open(holder.pid, planted / "events.jsonl")
    finally:
        _end(holder)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_what_is_not_a_regular_file_is_never_opened_and_no_proof(tmp_path, kind):
    """A FIFO is not opened (no writer: an open for reading would wait), nor a device (opening
    some acts: a tape rewinds); neither, nor a directory, is a run's events file."""
    path = tmp_path / "events.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("mknod of a character device needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # (/dev/null's numbers)
    else:
        path.mkdir()
    assert file_id(path) is None
    assert not holds_open(os.getpid(), path)


def test_a_record_names_only_its_owners_processes(base, mallory):
    """As root, a record another user wrote names none of root's processes (root's own detached
    supervisor carries the marker it names), and root's record none of the other user's; the
    other user's process that holds their own file is theirs, which their record may name."""
    root_supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                       env={**os.environ, MARK[0]: MARK[1]})
    theirs = base / "theirs.jsonl"
    theirs.write_text("")
    os.chown(theirs, mallory.pw_uid, mallory.pw_gid)
    holder = _holder(theirs, user=mallory.pw_name)
    try:
        wait_for(lambda: start_time(root_supervisor.pid) is not None, 10, interval=0.01, what="the supervisor")
        pid = root_supervisor.pid
        assert not_own(pid, start_time(pid), MARK, owner=0) is None  # (root's record: proven by its marker)
        why = not_own(pid, start_time(pid), MARK, owner=mallory.pw_uid)
        assert why is not None and f"runs as user root, and the record is {mallory.pw_name}'s" in why, why
        leaf = _leaf(holder)
        assert not_own(leaf, start_time(leaf), MARK, holds=theirs, owner=mallory.pw_uid) is None
        why = not_own(leaf, start_time(leaf), MARK, holds=theirs, owner=0)
        assert why is not None and f"runs as user {mallory.pw_name}, and the record is root's" in why, why
    finally:
        _end(root_supervisor)
        _end(holder)


def test_a_file_held_by_a_process_of_another_user_than_its_owner_is_no_proof(base, mallory):
    """The other user holds a file of root's open (one root made writable to them): whose it is
    and who holds it differ, so it proves nothing about the holder."""
    path = base / "events.jsonl"
    path.write_text("")
    path.chmod(0o666)
    holder = _holder(path, user=mallory.pw_name)
    try:
        assert not holds_open(_leaf(holder), path)
    finally:
        _end(holder)
