"""Safe reads (docs/concepts/trust.md): a spec and a run record are read as regular files only
(a FIFO, a device or a socket is one line, never a hang), bounded, never through a symlink that
leaves the run dir; a file that is no spec is never quoted; `logs` on a terminal keeps colours only."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.support.cli import output_on_terminal, tfcluster, tfcluster_argv

from .conftest import ESCAPES, SECRET, assert_bounded, plant_socket

def _plant(run_dir, outside, case):
    log = run_dir / "logs" / "worker-0.log"
    if case == "fifo-events":
        (run_dir / "events.jsonl").unlink()
        os.mkfifo(run_dir / "events.jsonl")
    elif case == "fifo-launcher":
        (run_dir / "launcher.json").unlink()
        os.mkfifo(run_dir / "launcher.json")
    elif case == "fifo-snapshot":
        (run_dir / "snapshot.json").unlink()
        os.mkfifo(run_dir / "snapshot.json")
    elif case == "fifo-log":
        log.unlink()
        os.mkfifo(log)
    elif case == "socket-log":
        log.unlink()
        plant_socket(log)
    elif case == "log-link-out":
        log.unlink()
        log.symlink_to(outside / "secret")
    elif case == "log-link-zero":
        log.unlink()
        log.symlink_to("/dev/zero")
    elif case == "events-link-out":
        (outside / "events.jsonl").write_text('{"event": "' + SECRET + '"}\n')
        (run_dir / "events.jsonl").unlink()
        (run_dir / "events.jsonl").symlink_to(outside / "events.jsonl")
    elif case == "logs-dir-link":
        shutil.copytree(run_dir / "logs", outside / "logs")
        with open(outside / "logs" / "worker-0.log", "a") as fh:
            fh.write(SECRET + "\n")
        shutil.rmtree(run_dir / "logs")
        (run_dir / "logs").symlink_to(outside / "logs")
    elif case == "latest-out":
        fake = outside / "20990101-000000-aaaa"
        shutil.copytree(run_dir, fake)
        with open(fake / "logs" / "worker-0.log", "a") as fh:
            fh.write(SECRET + "\n")
        latest = run_dir.parent / "latest"
        latest.unlink()
        latest.symlink_to(fake)


CASES = ["fifo-events", "fifo-launcher", "fifo-snapshot", "fifo-log", "socket-log", "log-link-out", "log-link-zero",
         "events-link-out", "logs-dir-link", "latest-out"]


@pytest.mark.parametrize("case", CASES)
def test_a_planted_record_file_is_never_read_nor_hangs(run, case):
    work, run_dir, outside = run
    _plant(run_dir, outside, case)
    for args in (("status", "--json"), ("logs",), ("runs",), ("logs", "--tail", "5", "--file", "r.yaml", "worker:0")):
        argv = (*args, "r.yaml") if "--file" not in args else args
        started = time.monotonic()
        result = tfcluster(*argv, cwd=work, timeout=30)
        assert time.monotonic() - started < 15, (case, args)
        assert_bounded(result, output=True, task_bytes=args[0] == "logs")
        assert SECRET not in result.stdout + result.stderr, (case, args, result.stdout[-500:], result.stderr[-500:])


@pytest.mark.parametrize("run_id", ["../../outside/x", "..", "a/b", "x\ny", "\x1b]0;t\x07"])
def test_run_is_a_run_id_never_a_path(run, run_id):
    work, _run_dir, _outside = run
    result = tfcluster("status", "r.yaml", "--run", run_id, cwd=work)
    assert_bounded(result, 4)
    assert "not a run id" in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("planted", ["fifo", "dev-zero", "socket", "dir"])
def test_a_spec_that_is_no_regular_file_is_one_line_and_no_hang(tmp_path, planted):
    path = tmp_path / "cluster.yaml"
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "dev-zero":
        path.symlink_to("/dev/zero")
    elif planted == "socket":
        plant_socket(path)
    else:
        path.mkdir()
    for command in ("validate", "plan", "compose", "status", "logs"):
        result = tfcluster(command, path, cwd=tmp_path, timeout=20)
        assert_bounded(result, 2)
        assert len(result.stderr.splitlines()) == 1 and "above the bound" not in result.stderr, result.stderr
        assert "not a regular file" in result.stderr or "is a directory" in result.stderr, result.stderr


@pytest.mark.parametrize("secret", [
    "root:$6$saltsalt$" + "h" * 40 + ":19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",  # /etc/shadow
    "machine github.com login me password " + SECRET + "\n",  # ~/.netrc
    "password: " + SECRET + "\nlogin: me\n",  # a YAML mapping of secrets
    "-----BEGIN OPENSSH PRIVATE KEY-----\n" + SECRET + "\n-----END OPENSSH PRIVATE KEY-----\n",
    "[" + SECRET + "]\n",
    "*" + SECRET.replace("$", "") + "\n",  # an alias YAML cannot resolve
    "!!python/object:" + SECRET.replace("$", "") + " x\n",  # a tag it cannot construct
])
def test_a_spec_symlinked_to_a_secret_is_never_quoted(tmp_path, secret):
    (tmp_path / "secret").write_text(secret)
    (tmp_path / "cluster.yaml").symlink_to(tmp_path / "secret")
    for args in (("validate",), ("validate", "--json"), ("plan",)):
        result = tfcluster(*args, "cluster.yaml", cwd=tmp_path)
        assert_bounded(result, 2, output=True)
        said = result.stdout + result.stderr
        for part in ("saltsalt", SECRET, SECRET.replace("$", ""), "github.com", "daemon"):
            assert part not in said, (args, said)




def test_logs_on_a_terminal_keeps_colours_and_drops_osc_dcs_apc_into_a_pipe_the_bytes_are_the_tasks(recorded):
    seen = output_on_terminal(tfcluster_argv("logs", "r.yaml"), recorded, timeout=30.0)
    assert b"\x1b[31mred\x1b[0m" in seen, seen
    for sequence in (b"\x1b]", b"\x1bP", b"\x1b_", b"\x07", b"TITLE", b"ZXZpbA=="):
        assert sequence not in seen, (sequence, seen)
    piped = subprocess.run(tfcluster_argv("logs", "--file", "r.yaml", "worker:0"), cwd=recorded, capture_output=True,
                           timeout=60).stdout
    assert ESCAPES in piped, piped
