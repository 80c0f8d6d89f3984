"""A run record is data, not orders (docs/concepts/trust.md), tried with the CLI as a tamperer would:
a launcher.json naming someone else's process (its real pid, start time, command line and host:
all /proc and a hostname tell), or someone else's process group as a task's, makes ``down`` say so
in one line each and exit 1, signalling nothing; the run's own processes are still stopped. The
other backends' proofs (container labels, a Slurm job's user/name/comment, a remote wrapper's start
time and marker) are in tests/unit/backends/test_down_ownership.py and the labs' test_*_trust.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from launcher.system.procinfo import cmdline, start_time
from tests.support.cli import tfcluster
from tests.support.waits import wait_for

from .conftest import SECRET, assert_bounded


def _someone_elses(env: dict | None = None) -> subprocess.Popen:
    """A process of this machine that no run started (a session of its own, as a task group's leader)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                            env={**os.environ, **(env or {})})
    wait_for(lambda: start_time(proc.pid) is not None and cmdline(proc.pid), 10, interval=0.01,
             what="the process to show in /proc")
    return proc


def _tamper(run_dir, **fields) -> None:
    path = run_dir / "launcher.json"
    info = json.loads(path.read_text())
    info.update(fields)
    path.write_text(json.dumps(info))


@pytest.mark.parametrize("how", ["launcher", "task-group", "both"])
def test_down_signals_no_process_a_tampered_record_names(run, how):
    work, run_dir, _outside = run
    victims = [_someone_elses(), _someone_elses()]
    try:
        launcher, group = victims
        fields = {}
        if how in ("launcher", "both"):
            fields.update(pid=launcher.pid, start_time=start_time(launcher.pid), cmdline=cmdline(launcher.pid),
                          host=socket.gethostname())
        if how in ("task-group", "both"):
            fields["tasks"] = {"worker:0": {"pid": group.pid, "pgid": group.pid, "start_time": start_time(group.pid)}}
        _tamper(run_dir, **fields)
        started = time.monotonic()
        result = tfcluster("down", "r.yaml", cwd=work, timeout=60)
        assert time.monotonic() - started < 15
        assert_bounded(result, 1)
        assert all(v.poll() is None for v in victims), result.stderr  # nothing was signalled
        refused = [line for line in result.stderr.splitlines() if "not signalling" in line or "not stopping" in line]
        assert len(refused) == (2 if how == "both" else 1), result.stderr
        assert "could not be proven the run's own" in result.stderr.splitlines()[-1], result.stderr
    finally:
        for v in victims:
            v.kill()
            v.wait()


def test_a_record_that_names_the_runs_own_task_group_is_still_obeyed(run):
    """The check is not one that refuses everything: a group carrying the run's marker is stopped."""
    work, run_dir, _outside = run
    own = _someone_elses({"TFCLUSTER_RUN_ID": run_dir.name})
    try:
        _tamper(run_dir, tasks={"worker:0": {"pid": own.pid, "pgid": own.pid, "start_time": start_time(own.pid)}})
        result = tfcluster("down", "r.yaml", cwd=work, timeout=60)
        assert_bounded(result, 0)
        assert own.wait(30) in (-signal.SIGTERM, -signal.SIGKILL), result.stderr
    finally:
        if own.poll() is None:
            own.kill()
            own.wait()


# ---------------------------------------------------------------- the proofs themselves planted
#
# The supervisor's proof, for a launcher run in a terminal, is that it holds the run's events.jsonl
# open: a planted events.jsonl (a symlink to /dev/null, which nearly every process holds; a hard
# link to a file the victim holds) proves nothing, nor does a record another user wrote, for
# ``down`` (SIGTERM) and ``stacks`` (its signal) alike. The victim is a plain process that either
# signal would end.

COMMANDS = [("down",), ("stacks", "--timeout", "5")]


def _names(run_dir, proc) -> None:
    _tamper(run_dir, pid=proc.pid, start_time=start_time(proc.pid), cmdline=cmdline(proc.pid),
            host=socket.gethostname(), tasks={})


def _refused(result, pid) -> None:
    assert_bounded(result, 1)
    line = f"not signalling process {pid}, which run "
    assert sum(line in s for s in result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_events_jsonl_planted_as_a_symlink_to_dev_null_proves_nothing(run, command):
    work, run_dir, _outside = run
    victim = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: start_time(victim.pid) is not None and cmdline(victim.pid), 10, interval=0.01,
                 what="sleep in /proc")
        _names(run_dir, victim)
        (run_dir / "events.jsonl").unlink()
        (run_dir / "events.jsonl").symlink_to("/dev/null")
        result = tfcluster(*command, "r.yaml", cwd=work, timeout=60)
        _refused(result, victim.pid)
        assert "does not hold the run's record open" in result.stderr, result.stderr
        assert victim.poll() is None, result.stderr
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_events_jsonl_planted_as_a_hard_link_to_a_file_the_victim_holds_proves_nothing(run, command):
    work, run_dir, outside = run
    held = outside / "daemon.log"
    victim = subprocess.Popen([sys.executable, "-c", f"import time; f = open({str(held)!r}, 'ab'); time.sleep(300)"],
                              start_new_session=True)
    try:
        wait_for(lambda: held.exists() and start_time(victim.pid) is not None and cmdline(victim.pid), 10,
                 interval=0.01, what="the victim holding its log")
        _names(run_dir, victim)
        (run_dir / "events.jsonl").unlink()
        os.link(held, run_dir / "events.jsonl")
        result = tfcluster(*command, "r.yaml", cwd=work, timeout=60)
        _refused(result, victim.pid)
        assert victim.poll() is None, result.stderr
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_record_another_user_wrote_names_none_of_roots_processes(run, base, mallory, command):
    """As root: the other user's record (copied into a dir both reach, every file theirs) names
    root's processes that carry the very marks it asks for (a detached supervisor's, a task
    group's, as root's own run of that id would): none is signalled, each in one line."""
    work, run_dir, _outside = run
    theirs = base / "w"
    shutil.copytree(work, theirs, symlinks=True)
    their_run = theirs / "runs" / "r" / run_dir.name
    supervisor = _someone_elses({"TFCLUSTER_SUPERVISOR": run_dir.name})
    group = _someone_elses({"TFCLUSTER_RUN_ID": run_dir.name})
    try:
        _tamper(their_run, pid=supervisor.pid, start_time=start_time(supervisor.pid),
                cmdline=cmdline(supervisor.pid), host=socket.gethostname(),
                tasks={"worker:0": {"pid": group.pid, "pgid": group.pid, "start_time": start_time(group.pid)}})
        subprocess.run(["chown", "-R", f"{mallory.pw_uid}:{mallory.pw_gid}", str(theirs)], check=True)
        result = tfcluster(*command, "r.yaml", cwd=theirs, timeout=60)
        assert_bounded(result, 1)
        assert supervisor.poll() is None and group.poll() is None, result.stderr
        said = f"runs as user root, and the record is {mallory.pw_name}'s"
        assert said in result.stderr, result.stderr
        if command[0] == "down":
            assert result.stderr.count(said) == 2, result.stderr  # the supervisor and the task group
    finally:
        for proc in (supervisor, group):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_latest_leading_out_of_its_folder_is_not_followed(run, command):
    """``latest`` planted to a run elsewhere, whose record names a process with that run's marks:
    ``latest`` counts only when it is a run of its own folder (as ``--run`` takes only a run id)."""
    work, run_dir, outside = run
    elsewhere = outside / run_dir.name
    shutil.copytree(run_dir, elsewhere, symlinks=True)
    victim = _someone_elses({"TFCLUSTER_SUPERVISOR": run_dir.name})
    try:
        _names(elsewhere, victim)
        latest = run_dir.parent / "latest"
        latest.unlink()
        latest.symlink_to(elsewhere)
        result = tfcluster(*command, "r.yaml", cwd=work, timeout=60)
        assert_bounded(result, 4)  # (no such run: EXIT_NO_RUN)
        assert "no run record at" in result.stderr and "latest" in result.stderr, result.stderr
        assert victim.poll() is None, result.stderr
        escape = tfcluster(*command, "r.yaml", "--run", f"../../../outside/{run_dir.name}", cwd=work, timeout=60)
        assert_bounded(escape, 4)
        assert "is not a run id" in escape.stderr and victim.poll() is None, escape.stderr
    finally:
        victim.kill()
        victim.wait()


# A stand-in for a run's supervisor as `stacks` sees one: it carries the run's marker and, asked
# with the stacks' signal, writes `done` (naming worker:0 and worker:1) into the record's live
# stacks dir, as the real one does (launcher/supervise/hangwatch.py, snapshot), through whatever
# is planted there. What is tested is the reader: the files it then reads.
_SUPERVISOR = """\
import json, os, signal, sys, time
live = sys.argv[1]
def asked(*_):
    os.makedirs(live, exist_ok=True)
    with open(os.path.join(live, ".done.tmp"), "w") as fh:
        json.dump({"time": time.time() + 1, "tasks": {"worker:0": "", "worker:1": ""}}, fh)
    os.replace(os.path.join(live, ".done.tmp"), os.path.join(live, "done"))
signal.signal(signal.SIGUSR2, asked)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


def _supervisor(run_dir) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(run_dir / "stacks" / "live")],
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TFCLUSTER_SUPERVISOR": run_dir.name})
    assert proc.stdout.readline().strip() == "ready"
    _names(run_dir, proc)
    return proc


def test_stacks_reads_no_live_stacks_file_through_a_planted_symlink(run):
    work, run_dir, outside = run
    live = run_dir / "stacks" / "live"
    live.mkdir(parents=True)
    (live / "worker-0.txt").symlink_to(outside / "secret")
    (live / "worker-1.txt").write_text("Current thread 0x00007f (most recent call first):\n  File \"t.py\"\n")
    supervisor = _supervisor(run_dir)
    try:
        result = tfcluster("stacks", "r.yaml", "--timeout", "20", cwd=work, timeout=60)
        assert_bounded(result, 0, output=True)
        assert SECRET not in result.stdout + result.stderr
        assert "== worker:1 ==" in result.stdout and "Current thread 0x00007f" in result.stdout, result.stdout
        assert "worker:0: no stacks:" in result.stderr and "symbolic link" in result.stderr, result.stderr
        assert supervisor.poll() is None
    finally:
        supervisor.kill()
        supervisor.wait()


@pytest.mark.parametrize("where", ["stacks", "live"])
def test_stacks_reads_nothing_through_a_planted_stacks_dir(run, where):
    """``stacks/`` or ``stacks/live/`` a symlink to a dir of someone else's holding a `done` and
    a worker-0.txt that is a secret: nothing there is read (the reader waits its timeout for a
    `done` inside the run dir, and says so in one line)."""
    work, run_dir, outside = run
    planted = outside / "planted"
    (planted / "live").mkdir(parents=True)
    for d in (planted, planted / "live"):
        (d / "worker-0.txt").write_text(SECRET + "\n")
    (run_dir / "stacks").mkdir(exist_ok=True)
    if where == "stacks":
        (run_dir / "stacks").rmdir()
        (run_dir / "stacks").symlink_to(planted)
    else:
        (run_dir / "stacks" / "live").symlink_to(planted)
    supervisor = _supervisor(run_dir)
    try:
        result = tfcluster("stacks", "r.yaml", "--timeout", "3", cwd=work, timeout=60)
        assert_bounded(result, 1)
        assert SECRET not in result.stdout + result.stderr
        assert "wrote no stacks within 3 s" in result.stderr, result.stderr
        assert any((d / "done").exists() for d in (planted, planted / "live"))  # (it was there to be read)
    finally:
        supervisor.kill()
        supervisor.wait()
