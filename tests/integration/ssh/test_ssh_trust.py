"""A run record and the files it points at are data, not orders, on real ssh hosts: ``tfcluster
down`` signals a remote pid only once it is proven the run's own task wrapper (its start time, the
pid file's run-unique tail on its command line, its child carrying the run's TFCLUSTER_RUN_ID), and
the ssh.supervisor relay shows no escape of a task's but its colours on the user's terminal."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import alive
from tests.support.cli import output_on_terminal, tfcluster, tfcluster_argv
from tests.support.waits import wait_for
from tests.support.ssh_helpers import launch, pidfiles, wait_gone

from .conftest import PY

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(300)]

SLEEPER = "import os,time; print('ATTEMPT', os.environ['TFCLUSTER_RESTART_COUNT'], flush=True); time.sleep(120)"


def _start_ticks(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def _victim(*argv: str) -> subprocess.Popen:
    """A process of the host's that is not the run's (the lab's hosts share this pid namespace)."""
    proc = subprocess.Popen(list(argv), start_new_session=True)
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes(), 10, interval=0.01,
             what="the victim process to show in /proc")
    return proc


def test_down_leaves_alone_a_process_a_planted_pid_file_names_and_stops_the_runs_own(lab, make_spec):
    spec = make_spec([PY, "-c", SLEEPER], workers=2, ssh={"lease": 60})
    proc = launch(spec)
    victims: list[subprocess.Popen] = []
    try:
        pids = pidfiles(spec, 2)
        run_dir = next((spec.parent / "remote" / "sshtest").glob("*/pids")).parent
        # Someone with write access to the remote run dir plants pid files: one naming a plain
        # process of the host (with its real start time, all /proc tells), one naming a process
        # made to carry the pid file's tail on its command line, whose child has no run marker.
        plain = _victim("sleep", "300")
        tail = f"sshtest/{run_dir.name}/pids/worker-8.0.pid"
        tagged = _victim("sh", "-c", "sleep 300 & wait", tail)
        victims += [plain, tagged]
        # (its shell shows in /proc before it has forked the sleep: wait for the child itself)
        child = int(wait_for(lambda: subprocess.run(["pgrep", "-P", str(tagged.pid)], capture_output=True, text=True,
                                                    timeout=10).stdout.split(), 10, interval=0.02,
                             what=f"the tagged victim {tagged.pid}'s child (sleep)")[0])
        (run_dir / "pids" / "worker-9.0.pid").write_text(f"{plain.pid} {plain.pid} {_start_ticks(plain.pid)}\n")
        (run_dir / "pids" / "worker-8.0.pid").write_text(f"{tagged.pid} {child} {_start_ticks(tagged.pid)}\n")
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher is gone: down finds the tasks by the record
        proc.wait(10)
        res = tfcluster("down", str(spec), timeout=90)
        assert res.returncode == 1, res.stderr
        wait_gone([p for pair in pids.values() for p in pair], 20)  # the run's own tasks: stopped
        assert alive(plain.pid) and alive(tagged.pid) and alive(child), res.stderr  # the others: not
        lines = res.stderr.splitlines()
        # (each host looks in the run dir; the lab's hosts share one disk: a line from each)
        line9 = [line for line in lines if "worker-9.0.pid on host" in line]
        assert line9 and all(f"process {plain.pid} is not the task wrapper of sshtest/{run_dir.name}/pids/"
                             "worker-9.0.pid" in line for line in line9), res.stderr
        line8 = [line for line in lines if "worker-8.0.pid on host" in line]
        assert line8 and all(f"process {child} carries no TFCLUSTER_RUN_ID={run_dir.name} marker" in line
                             for line in line8), res.stderr
        assert "Traceback" not in res.stderr and len(lines) <= 20, res.stderr
        assert "could not be proven the run's own" in lines[-1], res.stderr
    finally:
        for v in victims:
            os.killpg(v.pid, signal.SIGKILL)
            v.wait(10)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# Prints its colours, an OSC 52 clipboard write, a window title (OSC 0, BEL- and ST-ended), a DCS
# and an APC, and a screen clear: the user's terminal must get the colours only.
ESCAPES = ("import sys; sys.stdout.write('\\x1b[32mgreen\\x1b[0m \\x1b]52;c;ZXZpbA==\\x07\\x1b]0;PWNED\\x07"
           "\\x1b]2;PWNED2\\x1b\\\\\\x1bP1$r\\x1b\\\\\\x1b_apc\\x1b\\\\\\x1b[2Jdone\\n'); sys.stdout.flush()")




def test_the_supervisor_relay_shows_a_tasks_colours_but_no_other_escape_on_the_terminal(lab, make_spec):
    spec = make_spec([PY, "-c", ESCAPES], workers=2, hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    seen = output_on_terminal(tfcluster_argv("up", "--plain", str(spec)), timeout=180.0)
    assert seen.count(b"\x1b[32mgreen\x1b[0m done") == 2, seen[-3000:]  # both tasks' lines, colours kept
    for raw in (b"\x1b]52", b"\x1b]0;", b"\x1b]2;", b"PWNED", b"\x1bP", b"\x1b_", b"\x1b[2J", b"\x07"):
        assert raw not in seen, (raw, seen[-3000:])
    assert b"run succeeded" in seen, seen[-3000:]


def test_the_supervisors_spec_copy_is_not_written_through_symlinks_planted_on_the_host(lab, make_spec, tmp_path):
    """The copy went to ``cluster.yaml.tmp`` then was moved: a link planted at either name on the
    host redirected the write. Now: a fresh name (mktemp) renamed over the copy's path."""
    spec = make_spec([PY, "-c", "print('hi', flush=True)"], workers=2, hosts=["h1", "h2"], ssh={"supervisor": "h1"})
    base = tmp_path / "remote" / "sshtest" / "supervisor"
    base.mkdir(parents=True)
    victims = {name: tmp_path / f"victim-{name}" for name in ("cluster.yaml.tmp", "cluster.yaml")}
    for name, victim in victims.items():
        victim.write_text("precious\n")
        (base / name).symlink_to(victim)
    res = tfcluster("up", str(spec), timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert all(v.read_text() == "precious\n" for v in victims.values())
    copy = base / "cluster.yaml"
    assert not copy.is_symlink() and copy.read_text().startswith("# Copied by tfcluster"), copy
    assert not list(base.glob(".tfcluster.*")), list(base.iterdir())  # no temporary file left
