"""The ssh backend's remote command lines: exact strings, quoting of hostile values, and the
behaviour of signal/down through an injected command runner (no network)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from launcher.backends import RecordedRun
from launcher.backends.ssh import backend as S
from launcher.backends.ssh import commands as sc
from launcher.backends.ssh import probe as ssh_probe, sync as ssh_sync, task as ssh_task
from launcher.remote import task_files
from launcher.ui.console import Console
from launcher.loader.load import LoadedSpec, parse_spec
from tests.support.waits import wait_for

EVIL = "x; touch /tmp/pwned"


def _loaded(tmp_path: Path, extra: str = "") -> LoadedSpec:
    text = f"""
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {{name: a, ssh: root@10.0.0.1}}
  - {{name: b, ssh: root@10.0.0.2}}
tasks: {{worker: 2}}
{extra}
"""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return LoadedSpec(parse_spec(text), path)


def test_task_command_exact():
    cmd = sc.task_command("/opt/py/bin/python3", "/srv/work", "/r/t/1", "/r/t/1/pids/worker-0.0.pid", 15, 5,
                         ["python", "-m", "worker", "--epochs", "1"])
    check = sc.path_check("/opt/py/bin/python3", "/r/t/1", "boot.py", "taskwrap.py")
    assert cmd == (
        f"cd /srv/work && exec 3>&2 2>/dev/null && (exec 2>&3 3>&- && {check} && exec /opt/py/bin/python3 -S /r/t/1/boot.py "
        "/r/t/1/taskwrap.py --lease 15 --grace 5 --pidfile /r/t/1/pids/worker-0.0.pid --threads TFCLUSTER_THREADS "
        "--gpus TFCLUSTER_GPUS --gpu-memory-var TFCLUSTER_GPU_MEMORY --collective-var TFCLUSTER_COLLECTIVE --gpu-watch 5 --control TFCLUSTER_CONTROL_FD -- python -m worker --epochs 1); exit $?"
    )


def test_task_command_quotes_every_value():
    cmd = sc.task_command(f"py{EVIL}", f"/w {EVIL}", f"/r;{EVIL}", f"/p {EVIL}", 1.5, 0, [EVIL, "$(id)", "`id`", "'"])
    check = sc.path_check(f"py{EVIL}", sc.q(f"/r;{EVIL}"), "boot.py", "taskwrap.py")
    assert cmd == (
        f"cd '/w x; touch /tmp/pwned' && exec 3>&2 2>/dev/null && (exec 2>&3 3>&- && {check} && exec "
        "'pyx; touch /tmp/pwned' -S '/r;x; touch /tmp/pwned/boot.py' "
        "'/r;x; touch /tmp/pwned/taskwrap.py' --lease 1.5 --grace 0 --pidfile '/p x; touch /tmp/pwned' "
        "--threads TFCLUSTER_THREADS --gpus TFCLUSTER_GPUS --gpu-memory-var TFCLUSTER_GPU_MEMORY --collective-var TFCLUSTER_COLLECTIVE --gpu-watch 5 --control TFCLUSTER_CONTROL_FD -- "
        "'x; touch /tmp/pwned' '$(id)' '`id`' ''\"'\"''); exit $?"
    )
    # A real POSIX shell sees exactly the values we meant (echo instead of running them).
    probe = cmd.replace("); exit $?", "").split(" -- ", 1)[1]
    out = subprocess.run(["sh", "-c", f"printf '%s\\n' {probe}"], capture_output=True, text=True, timeout=10)
    assert out.stdout.splitlines() == [EVIL, "$(id)", "`id`", "'"]


def test_env_never_on_the_command_line_but_in_the_stdin_block():
    env = {"TF_CONFIG": '{"cluster":{}}', "API_TOKEN": "s3cr3t", "EVIL": EVIL}
    block = sc.env_block(env)
    header, body = block.split(b"\n", 1)
    assert int(header) == len(body)
    assert json.loads(body) == env
    cmd = sc.task_command("python3", ".", "r", "r/pids/x.pid", 15, 5, ["python", "-c", "pass"])
    assert "s3cr3t" not in cmd and "TF_CONFIG" not in cmd


def test_boot_reads_env_block_then_leaves_the_rest_of_stdin(tmp_path):
    """boot.py consumes exactly the env block; the lifeline bytes after it stay for taskwrap."""
    import os

    from launcher.remote import boot

    r, w = os.pipe()
    os.write(w, sc.env_block({"A": "1", "EVIL": EVIL}) + b"...")
    os.close(w)
    try:
        assert boot._read_env(r) == {"A": "1", "EVIL": EVIL}
        assert os.read(r, 10) == b"..."
    finally:
        os.close(r)


def test_signal_command_exact_and_verifies_pid():
    cmd = sc.signal_command(signal.SIGTERM, ["/r/pids/worker-0.0.pid", f"/r/{EVIL}.pid"])
    assert cmd == (
        "for pf in /r/pids/worker-0.0.pid '/r/x; touch /tmp/pwned.pid'; do "
        'read pid child st < "$pf" 2>/dev/null || { echo "nopid $pf"; continue; }; '
        'case $pid in ""|*[!0-9]*) echo "nopid $pf"; continue;; esac; '
        'tag=${pf#"${pf%/*/*/*/*}"}; tag=${tag#/}; [ -n "$tag" ] || tag=$pf; '
        'grep -qaF -- "$tag" /proc/$pid/cmdline 2>/dev/null || { echo "gone $pf"; continue; }; '
        'kill -s TERM -- "-$pid" 2>/dev/null && echo "sent $pf" || echo "gone $pf"; done; true'
    )
    assert "pkill" not in cmd and "killall" not in cmd


@pytest.mark.parametrize("pidfile, tag", [
    (".tfcluster/t/RUN/pids/worker-0.0.pid", "t/RUN/pids/worker-0.0.pid"),
    ("/root/.tfcluster/t/RUN/pids/worker-0.0.pid", "t/RUN/pids/worker-0.0.pid"),
    ("/t/RUN/pids/w.pid", "t/RUN/pids/w.pid"),
    ("t/RUN/pids/w.pid", "t/RUN/pids/w.pid"),
    (f"/a b/{EVIL}/RUN/pids/w.pid", "pwned/RUN/pids/w.pid"),
    ("/a b/n;'$(id)/RUN/pids/w.pid", "n;'$(id)/RUN/pids/w.pid"),
])
def test_pid_tag_is_the_run_unique_tail_in_python_and_in_sh(pidfile, tag):
    """The launcher (agent argv) and the remote shell (verification) must cut the same tail."""
    assert sc.pid_tag(pidfile) == tag
    script = 'pf=$1; tag=${pf#"${pf%/*/*/*/*}"}; tag=${tag#/}; [ -n "$tag" ] || tag=$pf; printf %s "$tag"'
    out = subprocess.run(["sh", "-c", script, "sh", pidfile], capture_output=True, text=True, timeout=10)
    assert out.stdout == tag


def test_agent_command_exact_and_quoted():
    from launcher.remote import agent_source, source

    # The agent's text comes after pathtrust.py's: it checks its dirs before it uses them.
    from launcher.contract import portcheck as module

    portcheck = Path(module.__file__).read_text()
    assert agent_source() == source("pathtrust.py") + "\n" + portcheck + "\n" + source("agent.py")
    cmd = sc.agent_command(f"/py {EVIL}", "/r/n;$(id) x/RUN/pids/worker-0.0.pid")
    assert cmd == (f"exec 3>&2 2>/dev/null && (exec 2>&3 3>&- && exec '/py x; touch /tmp/pwned' -S -c "
                   f"{sc.q(agent_source())} 'n;$(id) x/RUN/pids/worker-0.0.pid'); exit $?")
    assert sc.agent_command("python3", None) == sc.quiet(f"python3 -S -c {sc.q(agent_source())}")
    assert sc.wrap_args("/w", "/r/p.pid", 15, 5, ["python", "-m", "worker"]) == [
        "--lease", "15", "--grace", "5", "--pidfile", "/r/p.pid", "--cwd", "/w", "--threads", "TFCLUSTER_THREADS",
        "--gpus", "TFCLUSTER_GPUS", "--gpu-memory-var", "TFCLUSTER_GPU_MEMORY", "--collective-var", "TFCLUSTER_COLLECTIVE", "--gpu-watch", "5",
        "--control", "TFCLUSTER_CONTROL_FD", "--", "python", "-m", "worker"]


def test_signal_command_runs_in_a_real_shell(tmp_path):
    """The verification refuses a pid file whose pid is not the wrapper that wrote it."""
    pf = tmp_path / "x.pid"
    import os

    pf.write_text(f"{os.getpid()} {os.getpid()}\n")  # this pytest process: cmdline lacks pf
    out = subprocess.run(["sh", "-c", sc.signal_command(signal.SIGKILL, [str(pf), str(tmp_path / "none.pid")])],
                         capture_output=True, text=True, timeout=10)
    assert out.stdout.splitlines() == [f"gone {pf}", f"nopid {tmp_path / 'none.pid'}"]


def test_real_wrapper_is_signalled_by_its_pidfile(tmp_path):
    """End to end on this machine: boot.py + taskwrap.py, then signal_command and down_command."""
    import os
    import sys
    import time

    run = tmp_path / "run dir;x"
    (run / "pids").mkdir(parents=True)
    for name, text in task_files().items():  # (as the probe uploads them)
        (run / name).write_text(text)
    pf = str(run / "pids" / "worker-0.0.pid")
    cmd = sc.task_command(sys.executable, str(tmp_path), str(run), pf, 30, 1, [sys.executable, "-c",
                         "import time; print('up', flush=True); time.sleep(60)"])
    proc = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        proc.stdin.write(sc.env_block({"X": "1", "TFCLUSTER_RUN_ID": "RUN"}))
        proc.stdin.flush()
        assert proc.stdout.readline() == b"\x1eDup\n"  # (the task's line, framed by its wrapper)
        end = time.monotonic() + 5
        while not os.path.exists(pf) and time.monotonic() < end:
            time.sleep(0.02)
        # Another run's down (the task carries this run's id, not OTHER's): one line, no signal.
        out = subprocess.run(["sh", "-c", sc.down_command([str(run)], 1, "OTHER")], capture_output=True, text=True,
                             timeout=10)
        assert [line.split(" ", 2)[:2] for line in out.stdout.splitlines()] == [["notown", pf.split(" ")[0]]], out
        assert "carries no TFCLUSTER_RUN_ID=OTHER marker" in out.stdout and proc.poll() is None
        out = subprocess.run(["sh", "-c", sc.down_command([str(run)], 1, "RUN")], capture_output=True, text=True,
                             timeout=10)
        assert out.stdout.splitlines() == [f"stopped {pf}"]
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_down_command_exact():
    cmd = sc.down_command(["/r/a", "/r/b c"], 5, "RUN")
    assert cmd.startswith('mark=TFCLUSTER_RUN_ID=RUN; found=""; for pf in /r/a/pids/*.pid \'/r/b c/pids\'/*.pid; do [ -f "$pf" ] || continue; ')
    assert '[ $n -lt 50 ]; do alive=""' in cmd
    assert 'kill -s KILL -- "-$pid"' in cmd


def test_setup_and_sync_commands_quote_workdir():
    assert sc.setup_command(f"/w {EVIL}", "pip install -r requirements.txt") == (
        "mkdir -p '/w x; touch /tmp/pwned' && cd '/w x; touch /tmp/pwned' && pip install -r requirements.txt"
    )
    check = sc.path_check("py", "w")
    assert sc.sync_command("py", "w") == (f"{check} && (umask 077 && mkdir -p w) && chmod 700 w && {check} && "
                                          "(umask 077 && tar -xzf - -C w --no-same-owner --no-same-permissions)")
    # A workdir the user named keeps its mode; a group share makes 0750.
    assert sc.checked_mkdir("py", "w", "group", own=False) == (
        f"{check} && {{ [ -d w ] || {{ (umask 027 && mkdir -p w) && chmod 750 w; }}; }} && {check}")


def test_remote_paths_defaults_and_overrides(tmp_path):
    opts = _loaded(tmp_path).spec.ssh
    assert sc.remote_paths(opts, "t", "RUN") == (".tfcluster/t/RUN", ".tfcluster/t/state", ".")
    opts = _loaded(tmp_path, "ssh: {sync: ['.'], remote_dir: /srv/tfc}").spec.ssh
    assert sc.remote_paths(opts, "t", "RUN") == ("/srv/tfc/t/RUN", "/srv/tfc/t/state", "/srv/tfc/t/work")
    opts = _loaded(tmp_path, "ssh: {workdir: /code}").spec.ssh
    assert sc.remote_paths(opts, "t", "RUN")[2] == "/code"


class FakeRunner:
    def __init__(self, replies=None):
        self.calls: list[tuple[str, str]] = []
        self.replies = replies or {}

    def __call__(self, host, command, stdin, timeout):
        self.calls.append((host, command))
        return self.replies.get(host, (0, ""))


class FakeChannel:
    closed = False
    shut = False

    def shutdown_write(self):
        self.shut = True


def _handle(backend, host, slug):
    from launcher.plan.build import PlannedTask

    task = PlannedTask(type="worker", index=int(slug[-1]), host=host, address=host, port=1, command=("x",))
    h = ssh_task.SSHTask.__new__(ssh_task.SSHTask)
    h.task, h.key, h.pool, h.host = task, task.key, backend.hosts.pool, backend.hosts.pool.hosts[host]
    h.channel, h.pidfile, h._code, h._note = FakeChannel(), f"/r/pids/{slug}.0.pid", None, ""
    return h


def test_signal_tasks_one_command_per_host_and_cuts_lifeline_without_pidfile(tmp_path):
    runner = FakeRunner({"b": (0, "nopid /r/pids/worker-1.0.pid\n")})
    backend = S.SSHBackend.from_spec(_loaded(tmp_path), None, runner=runner)
    h0, h1, h2 = _handle(backend, "a", "worker-0"), _handle(backend, "b", "worker-1"), _handle(backend, "a", "worker-2")
    h2._code = 0  # already exited: its wrapper took the group down; nothing to signal
    backend.tasks.signal_tasks([h0, h1, h2], signal.SIGKILL)
    assert sorted(runner.calls) == [
        ("a", sc.signal_command(signal.SIGKILL, ["/r/pids/worker-0.pid".replace("0.pid", "0.0.pid")])),
        ("b", sc.signal_command(signal.SIGKILL, ["/r/pids/worker-1.0.pid"])),
    ]
    assert not h0.channel.shut and h1.channel.shut  # not started yet -> lifeline cut instead


def test_down_uses_record_and_reports(tmp_path, capsys):
    runner = FakeRunner({"a": (0, "stopped /r/run/pids/worker-0.0.pid\n"), "b": (0, "")})
    backend = S.SSHBackend.from_spec(_loaded(tmp_path), None, runner=runner)
    backend.hosts.pool.connect = lambda names: {}  # no network in unit tests
    rdir, rid = f"/r/t/{tmp_path.name}", tmp_path.name
    runner.replies["b"] = (0, f"notown {rdir}/pids/worker-1.0.pid process 7 carries no TFCLUSTER_RUN_ID={rid} marker\n")
    info = {"tasks": {"worker:0": {"ssh_host": "a", "remote_run_dir": rdir},
                      "worker:1": {"ssh_host": "b", "remote_run_dir": rdir},
                      "worker:2": {"ssh_host": "gone", "remote_run_dir": rdir},
                      "worker:3": {"ssh_host": "a", "remote_run_dir": "/home/other/.tfcluster/t/OTHER-RUN"}}}
    recorded = RecordedRun(tmp_path, info)
    assert backend.hosts.down(recorded, Console()) is True
    assert sorted(runner.calls) == [("a", sc.down_command([rdir], 5.0, rid)), ("b", sc.down_command([rdir], 5.0, rid))]
    err = capsys.readouterr().err
    assert "stopped remote tasks: a:worker-0.0.pid" in err
    assert "host gone of the run is no longer in the spec" in err
    # A task dir that is not this run's is not looked in; a process not proven its own is named.
    assert recorded.refused == [
        f"worker:3: not stopping anything in '/home/other/.tfcluster/t/OTHER-RUN' on host 'a': it is not run {rid}'s "
        f"remote run dir (.../t/{rid})",
        f"worker-1.0.pid on host b: not signalled: process 7 carries no TFCLUSTER_RUN_ID={rid} marker"], err


def test_make_tar_skips_caches_and_rejects_outside_paths(tmp_path):
    import io
    import tarfile

    from launcher.errors import LaunchError

    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x")
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "log").write_text("x")
    data = ssh_sync.make_tar(tmp_path, ["."], exclude_dirs=[tmp_path / "runs"])
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert "./pkg/a.py" in names or "pkg/a.py" in names
    assert not [n for n in names if "__pycache__" in n or ".git" in n or "runs" in n]
    with pytest.raises(LaunchError, match="outside the workdir"):
        ssh_sync.make_tar(tmp_path / "pkg", [".."])
    with pytest.raises(LaunchError, match="does not exist"):
        ssh_sync.make_tar(tmp_path, ["nope"])


def test_launcher_modules_do_not_import_tensorflow():
    import sys

    code = ("import sys, launcher.backends.ssh.backend, launcher.backends.ssh.connect, launcher.remote; "
            "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(S.__file__).parents[3], timeout=60).returncode == 0


class _Agent:
    """The host agent run on this machine exactly as a host runs it (``sh -c agent_command``),
    with ``tmp_path`` as the remote home and a relative remote run dir, as by default."""

    def __init__(self, tmp_path: Path, key_slug: str = "worker-0"):
        import sys

        self.home = tmp_path
        self.rel_pidfile = f"base/t/RUN/pids/{key_slug}.0.pid"
        self.pidfile = str(tmp_path / self.rel_pidfile)
        self.proc = subprocess.Popen(["sh", "-c", sc.agent_command(sys.executable, self.rel_pidfile)], cwd=tmp_path,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def ask(self, obj) -> dict:
        self.send(obj)
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode()
        return json.loads(line)

    def send(self, obj) -> None:
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def prepare(self, port: int) -> dict:
        import sys

        (self.home / "work").mkdir(exist_ok=True)
        return self.ask({"require": ["json"], "workdir": str(self.home / "work"), "run_dir": "base/t/RUN",
                         "state_dir": "base/t/state", "argv0": sys.executable, "ports": [port],
                         "files": task_files()})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def _connects(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def test_agent_preflights_holds_ports_then_becomes_the_task(tmp_path):
    """One process, one channel: preflight reply, port held for the probe, then "go" turns it
    into the task's wrapper (same pid), which signal_command verifies by the pid file's tail."""
    import os
    import sys

    from tests.support.ports import free_base

    port = free_base(1)
    agent = _Agent(tmp_path)
    try:
        reply = agent.prepare(port)
        assert reply["error"] is None and reply["ports"] == {str(port): None}
        assert reply["run_dir"] == str(tmp_path / "base/t/RUN") and reply["deps"]["json"][0] is True
        assert reply["argv0_found"] is True and reply["workdir"] == str(tmp_path / "work")
        assert _connects(port)  # held for the other hosts' reachability probe
        assert agent.ask({"targets": [["worker:0", "127.0.0.1", port]], "timeout": 2}) == {
            "results": [["worker:0", None]]}
        task = "import os,time; print(os.environ['X'], os.getcwd(), flush=True); time.sleep(60)"
        agent.send({"go": {"env": {"X": EVIL}, "args": sc.wrap_args(
            reply["workdir"], agent.pidfile, 30, 1, [sys.executable, "-c", task])}})
        line = agent.proc.stdout.readline().decode()
        assert line.startswith("\x1eD")  # (the task's line, framed by its wrapper)
        assert line[2:].split() == EVIL.split() + [str(tmp_path / "work")]
        wait_for(lambda: not _connects(port), 5, 0.02,
                 what=f"the agent to release port {port} for the task's own server")
        wait_for(lambda: os.path.exists(agent.pidfile), 5, 0.02, what=f"the task's pidfile {agent.pidfile}")
        pid = int(Path(agent.pidfile).read_text().split()[0])
        assert os.getpgid(pid) == pid and pid != agent.proc.pid  # the agent, now leading its own group
        out = subprocess.run(["sh", "-c", sc.signal_command(signal.SIGTERM, [agent.pidfile])],
                             capture_output=True, text=True, timeout=10)
        assert out.stdout.splitlines() == [f"sent {agent.pidfile}"]
        assert agent.proc.wait(10) == 128 + signal.SIGTERM
    finally:
        agent.close()


def test_agent_refuses_go_with_another_pidfile_and_exits_on_eof(tmp_path):
    import sys

    from tests.support.ports import free_base

    port = free_base(1)
    agent = _Agent(tmp_path)
    try:
        agent.prepare(port)
        other = str(tmp_path / "base/t/OTHER/pids/worker-0.0.pid")
        agent.send({"go": {"env": {}, "args": sc.wrap_args(".", other, 30, 1, [sys.executable, "-c", "pass"])}})
        assert agent.proc.wait(10) == 2
        assert "not this agent's" in agent.proc.stderr.read().decode()
        wait_for(lambda: not _connects(port), 5, 0.02, what=f"the agent to release port {port}")
    finally:
        agent.close()
    agent = _Agent(tmp_path)
    try:
        agent.prepare(port)
        assert _connects(port)
        agent.proc.stdin.close()  # the launcher went away before "go"
        assert agent.proc.wait(10) == 0
        assert not _connects(port)
    finally:
        agent.close()


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize("shell", ["sh", "bash", "dash"])
@pytest.mark.parametrize("which", ["agent", "task"])
def test_a_wrapper_killed_by_a_signal_is_exit_128_n_and_its_shell_prints_nothing(tmp_path, shell, which):
    """A host runs the agent (its whole source on the command line) and a task's wrapper under
    the user's login shell. Killed by SIGKILL, the shell must report exit 137 (paramiko ignores
    SSH's exit-signal) and print nothing of its own: bash said "line 1: PID Killed <the
    command line>", 300 lines of agent.py, into the task's output; dash said "Killed"."""
    import os
    import shutil
    import sys

    if shutil.which(shell) is None:
        pytest.skip(f"no {shell} here")
    run = tmp_path / "run"
    (run / "pids").mkdir(parents=True)
    for name, text in task_files().items():  # (as the probe uploads them)
        (run / name).write_text(text)
    pidfile = str(run / "pids" / "worker-0.0.pid")
    if which == "agent":
        cmd = sc.agent_command(sys.executable, pidfile)
    else:
        cmd = sc.task_command(sys.executable, str(tmp_path), str(run), pidfile, 30, 1,
                              [sys.executable, "-c", "import time; time.sleep(60)"])
    proc = subprocess.Popen([shell, "-c", cmd], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        if which == "task":
            proc.stdin.write(sc.env_block({}))
            proc.stdin.flush()
        # The shell's one child is the wrapper itself (a subshell that became it): its command
        # line carries the pid file's tail, as signal_command verifies.
        wrapper = wait_for(lambda: next((c for c in _children(proc.pid)
                                         if sc.pid_tag(pidfile).encode() in Path(f"/proc/{c}/cmdline").read_bytes()),
                                        None), 10, 0.02, what=f"{shell}'s child running the {which}")
        os.kill(wrapper, signal.SIGKILL)
        assert proc.wait(10) == 128 + signal.SIGKILL
        err = proc.stderr.read().decode()
        assert err == "", err[:500]  # no "Killed", no command line, no agent source
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_missing_interpreter_is_still_named_by_the_quiet_shell(tmp_path, shell):
    """The shell's own stderr is /dev/null while it waits; its "not found" for the interpreter
    still reaches the launcher, with exit 127 (the preflight's "python '...' not found")."""
    out = subprocess.run([shell, "-c", sc.agent_command("/nonexistent/python3", "t/RUN/pids/w.pid")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert out.returncode == 127 and "/nonexistent/python3: " in out.stderr, out  # "not found" or "No such file"


@pytest.mark.parametrize("planted", ["file", "dangling", "dir"])
def test_exclusive_write_replaces_a_planted_symlink_never_its_target(tmp_path, planted):
    """The shell the supervisor's spec copy and a standby's promotion are written with: stdin into
    the target whole, through no symlink planted there (to a file, to nothing, to a directory)."""
    outside = tmp_path / "outside"
    if planted == "file":
        outside.write_text("precious\n")
    elif planted == "dir":
        outside.mkdir()
    where = tmp_path / "d;$(id) x"
    where.mkdir()
    target = where / "cluster.yaml"
    target.symlink_to(outside)
    out = subprocess.run(["sh", "-c", sc.exclusive_write(sc.q(str(target)))], input=b"new\n", capture_output=True,
                         timeout=10)
    assert out.returncode == 0, out.stderr
    assert not target.is_symlink() and target.read_bytes() == b"new\n"
    assert [p.name for p in where.iterdir()] == ["cluster.yaml"]  # no temporary file left
    if planted == "file":
        assert outside.read_text() == "precious\n"
    elif planted == "dir":
        assert list(outside.iterdir()) == []
    else:
        assert not outside.exists()
    # A directory that is not there: non-zero, nothing left.
    out = subprocess.run(["sh", "-c", sc.exclusive_write(sc.q(str(tmp_path / "none" / "f")))], input=b"x",
                         capture_output=True, timeout=10)
    assert out.returncode != 0 and not (tmp_path / "none").exists()


def test_sync_refuses_a_workdir_others_could_swap_and_extracts_private_files_otherwise(tmp_path):
    """ssh.sync's command in a real shell: under a dir everyone can write, one line and exit 2,
    nothing extracted; in a safe place the dir is made 0700 and the files keep no group or other bits."""
    import io
    import os
    import stat
    import sys
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size, info.mode = 5, 0o755
        tar.addfile(info, io.BytesIO(b"pass\n"))
    tmp_path.chmod(0o755)
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    bad = subprocess.run(["sh", "-c", sc.sync_command(sys.executable, str(tmp_path / "open" / "work"))],
                         input=buf.getvalue(), capture_output=True, timeout=30)
    assert bad.returncode == 2 and not (tmp_path / "open" / "work").exists()
    assert bad.stderr.decode().startswith(f"tfcluster: refusing {tmp_path}/open/work: {tmp_path}/open is writable by others")
    work = tmp_path / "safe" / "work"
    ok = subprocess.run(["sh", "-c", sc.sync_command(sys.executable, str(work))], input=buf.getvalue(),
                        capture_output=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    assert stat.S_IMODE(work.stat().st_mode) == 0o700 and stat.S_IMODE((work / "train.py").stat().st_mode) == 0o700
    assert os.stat(work / "train.py").st_uid == os.geteuid()
