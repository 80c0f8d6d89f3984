"""zygote.py with real processes (a zygote that imports ``json``, not TensorFlow): a task forked
from it through taskwrap is what a cold start of its argv is (exit codes, signals, tracebacks,
sys.argv and sys.path[0], stdin), it ends with its wrapper, /proc shows its own environment, and
what the zygote must not serve starts cold with one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.remote import HERE, taskwrap_path
from launcher.backends.zygotes import TITLE_BYTES
from launcher.contract import envnames
from tests.support.processes import alive
from tests.support.waits import wait_for
from tests.support.zygotes import PAD, base_env, finish, task_pid, wrap, zygote, zygote_pid  # noqa: F401 - zygote: a fixture

def test_a_forked_task_is_its_cold_start_and_the_zygotes_child(zygote, tmp_path):
    """(Its parent is its own waiter, the zygote's child: ``ppid`` is the task's grandparent.)"""
    code = ("import os, sys, json; print(json.dumps({'argv': sys.argv, 'path0': sys.path[0], "
            "'ppid': int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]), "
            "'sid': os.getsid(0) == os.getpid(), 'cwd': os.getcwd(), 'stdin': sys.stdin.read(), "
            "'env': os.environ.get('TFCLUSTER_TEST_OWN'), 'pad': 'ZYGOTE_PAD' in str(os.environ), "
            "'name': __name__, 'orig': sys.orig_argv})); sys.exit(7)")
    (tmp_path / "sub").mkdir()
    p = wrap(zygote, [sys.executable, "-c", code, "a", "b"], env={"TFCLUSTER_TEST_OWN": "1"}, cwd=tmp_path / "sub")
    out, err = finish(p)
    said = json.loads(out)
    assert p.returncode == 7, err
    assert said == {"argv": ["-c", "a", "b"], "path0": "", "ppid": zygote_pid(tmp_path), "sid": True,
                    "cwd": str(tmp_path / "sub"), "stdin": "", "env": "1", "pad": False, "name": "__main__",
                    "orig": [sys.executable, "-c", code, "a", "b"]}  # (sys.orig_argv: the task's, not the zygote's)
    cold = subprocess.run([sys.executable, "-c", code, "a", "b"], capture_output=True, text=True,
                          env={**base_env(), "TFCLUSTER_TEST_OWN": "1"}, cwd=tmp_path / "sub", stdin=subprocess.DEVNULL)
    assert {**json.loads(cold.stdout), "ppid": None, "sid": None} == {**said, "ppid": None, "sid": None}


@pytest.mark.parametrize("how,code", [("-c", None), ("script", None), ("-m", None)])
def test_script_and_module_entries_get_their_argv_and_path(zygote, tmp_path, how, code):
    (tmp_path / "pkg").mkdir()
    body = "import sys; print(repr(sys.argv[1:]), sys.path[0], __name__); raise SystemExit(3)\n"
    (tmp_path / "pkg" / "entry.py").write_text(body)
    argv = {"-c": ["-c", body], "script": ["pkg/entry.py"], "-m": ["-m", "entry"]}[how] + ["x"]
    cwd = tmp_path / "pkg" if how == "-m" else tmp_path
    p = wrap(zygote, [sys.executable, *argv], cwd=cwd)
    out, err = finish(p)
    cold = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd)
    assert (p.returncode, out) == (cold.returncode, cold.stdout) == (3, cold.stdout), (err, cold.stderr)
    assert "started without the zygote" not in err


def test_exits_tracebacks_and_signals_are_a_cold_starts(zygote):
    cases = {"raise ValueError('boom')": (1, "ValueError: boom"),
             "raise KeyboardInterrupt": (128 + signal.SIGINT, "KeyboardInterrupt"),
             "import os, signal; os.kill(os.getpid(), signal.SIGTERM)": (128 + signal.SIGTERM, ""),
             "import sys; sys.exit('said')": (1, "said"),
             "import threading, time; threading.Thread(target=lambda: (time.sleep(0.5), print('late'))).start()":
                 (0, "")}
    for code, (rc, text) in cases.items():
        p = wrap(zygote, [sys.executable, "-c", code])
        out, err = finish(p)
        assert p.returncode == rc and text in err, (code, p.returncode, err)
        assert "zygote.py" not in err and "runpy" not in err, err  # only the task's own frames
    assert out == "late\n"  # (the last case: a non-daemon thread is waited for, as at a cold exit)



def test_the_tasks_own_objects_end_as_at_a_cold_exit(zygote, tmp_path):
    """What the interpreter's teardown does and os._exit would skip: a file the script never closed
    (in the script and in a module it imported) is written, an object's __del__ runs, at exit 0 and
    at a failure alike; the zygote's own modules are left alone."""
    (tmp_path / "helper.py").write_text("import sys\nlog = open(sys.argv[2] + '.helper', 'w')\nlog.write('h' * 5)\n")
    body = ("import json, sys, helper\n"
            "out = open(sys.argv[2], 'w')\nout.write('x' * 100)\n"
            "class Bye:\n    def __del__(self):\n        print('bye', json.dumps(1), flush=True)\n"
            "b = Bye()\nsys.exit(int(sys.argv[1]))\n")
    (tmp_path / "train.py").write_text(body)
    for code in (0, 3):
        got = {}
        for how in ("forked", "cold"):
            out_file = tmp_path / f"{how}-{code}"
            argv = [sys.executable, "train.py", str(code), str(out_file)]
            if how == "forked":
                p = wrap(zygote, argv, cwd=tmp_path)
                out, err = finish(p)
                rc = p.returncode
            else:
                cold = subprocess.run(argv, capture_output=True, text=True, env=base_env(), cwd=tmp_path)
                out, err, rc = cold.stdout, cold.stderr, cold.returncode
            got[how] = (rc, out, out_file.read_text(), Path(f"{out_file}.helper").read_text(), err)
        assert got["forked"] == got["cold"] == (code, "bye 1\n", "x" * 100, "h" * 5, ""), got
    assert "ready" in (tmp_path / "zygote.log").read_text()

def test_the_task_ends_with_its_wrapper_and_takes_signals_through_it(zygote, tmp_path):
    code = ("import signal, time, sys\n"
            "signal.signal(signal.SIGUSR1, lambda *a: (print('usr1', flush=True)))\n"
            "print('up', flush=True)\n"
            "while True: time.sleep(0.1)\n")
    pidfile = tmp_path / "task.pid"
    p = wrap(zygote, [sys.executable, "-c", code], pidfile=pidfile)
    assert p.stdout.readline() == b"up\n"
    task = task_pid(pidfile)
    assert task != p.pid and alive(task)
    os.killpg(p.pid, signal.SIGUSR1)  # what a promotion sends: the wrapper's group
    assert p.stdout.readline() == b"usr1\n"
    os.killpg(p.pid, signal.SIGKILL)  # the wrapper and nothing else of the task's group
    wait_for(lambda: not alive(task), 10, what=f"the forked task {task} ending with its wrapper")


def test_proc_shows_the_tasks_own_environment(zygote, tmp_path):
    pidfile = tmp_path / "task.pid"
    p = wrap(zygote, [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
             env={"TFCLUSTER_TASK": "worker:7", "TF_CONFIG": '{"task": 1}'}, pidfile=pidfile)
    assert p.stdout.readline() == b"up\n"
    task = task_pid(pidfile)
    shown = Path(f"/proc/{task}/environ").read_bytes().split(b"\0")
    assert b"TFCLUSTER_TASK=worker:7" in shown and b'TF_CONFIG={"task": 1}' in shown
    assert not any(e.startswith(envnames.ZYGOTE_PAD.encode()) for e in shown)
    os.killpg(p.pid, signal.SIGTERM)
    finish(p)


def test_ps_shows_the_tasks_own_argv_not_the_zygotes(zygote, tmp_path):
    """Its title over the zygote's argv block (setproctitle's way): /proc/PID/cmdline, ps and
    pgrep -f see the task's command; a -c text of over 200 characters is cut; the zygote keeps its own."""
    pidfile = tmp_path / "task.pid"
    code = "import time; print('up', flush=True); time.sleep(30)" + " " * 300 + "# long\ncode"
    (tmp_path / "train_me.py").write_text(code)
    for argv, shown in (([sys.executable, str(tmp_path / "train_me.py"), "--steps", "5"],
                         f"{sys.executable} {tmp_path / 'train_me.py'} --steps 5"),
                        ([sys.executable, "-c", code, "x"], f"{sys.executable} -c {code[:60]}... x")):
        pidfile.unlink(missing_ok=True)  # (the first task's, else read before the second's wrapper writes it)
        p = wrap(zygote, argv, pidfile=pidfile)
        assert p.stdout.readline() == b"up\n"
        task = task_pid(pidfile)
        assert Path(f"/proc/{task}/cmdline").read_bytes() == shown.encode() + b"\0", argv[1][:40]  # (its NUL: the kernel's read)
        ps = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(task)], capture_output=True, text=True)
        assert ps.stdout.strip() == shown
        if "train_me" in shown:
            found = subprocess.run(["pgrep", "-f", "train_me.py --steps 5"], capture_output=True, text=True)
            assert str(task) in found.stdout.split(), found
        os.killpg(p.pid, signal.SIGTERM)
        finish(p)
    mine = Path(f"/proc/{zygote_pid(tmp_path)}/cmdline").read_bytes().split(b"\0")
    assert mine[1].endswith(b"zygote.py") and mine[-2] == b"t" * TITLE_BYTES


def test_the_title_masks_a_secret_argument_and_the_task_has_it(zygote, tmp_path):
    """Every local user reads /proc/PID/cmdline: a forked task's title shows its secret arguments
    as ``***`` (launcher/remote/masking.py, the plan's rule); its own sys.argv holds them."""
    pidfile = tmp_path / "task.pid"
    token = "hf_" + "Q" * 34
    code = "import sys, time; print(sys.argv[1:], flush=True); time.sleep(30)"
    argv = [sys.executable, "-c", code, "--hub-token", token, "--db", "postgres://bob:hunter2@db/app",
            "--epochs", "3", "--data", "/data/x"]
    p = wrap(zygote, argv, pidfile=pidfile)
    assert p.stdout.readline().decode().strip() == repr(argv[3:])
    task = task_pid(pidfile)
    title = Path(f"/proc/{task}/cmdline").read_bytes().decode()
    assert title.endswith(" --hub-token *** --db postgres://bob:***@db/app --epochs 3 --data /data/x\0"), title
    assert token not in title and "hunter2" not in title
    os.killpg(p.pid, signal.SIGTERM)
    finish(p)


def test_what_it_must_not_serve_starts_cold_with_one_line(zygote, tmp_path):
    """Another interpreter option, another environment: a fork would not be that cold start."""
    for argv, env, why in (([sys.executable, "-u", "-c", "print('ran')"], {}, "interpreter option"),
                           ([sys.executable, "-c", "print('ran')"], {"PYTHONHASHSEED": "7"}, "'PYTHONHASHSEED' differs")):
        p = wrap(zygote, argv, env=env)
        out, err = finish(p)
        assert p.returncode == 0 and out == "ran\n", err
        (line,) = [l for l in err.splitlines() if "zygote" in l]
        assert line.startswith("taskwrap: started without the zygote: ") and why in line, line


def test_a_task_of_another_ssh_login_on_the_host_is_served(zygote, tmp_path):
    """What each ssh login has its own of (a reconnect, the next run: SSH_CONNECTION, and
    pam_systemd's XDG_SESSION_ID) does not keep a task from its host's zygote."""
    code = "import os; print(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])"
    p = wrap(zygote, [sys.executable, "-c", code], env={"XDG_SESSION_ID": "4242", "SSH_CONNECTION": "10.0.0.9 5 10.0.0.1 22"})
    out, err = finish(p)
    assert (p.returncode, out, err) == (0, f"{zygote_pid(tmp_path)}\n", "")


def test_no_zygote_there_starts_cold_at_once(tmp_path):
    """No socket: nothing is waited for (a zygote's socket is bound before any wrapper asks)."""
    p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", str(tmp_path / "none.sock"),
                          "--zygote-wait", "600", "--", sys.executable, "-c", "print('ran')"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = finish(p, timeout=60)  # (600 s were it waiting for a server)
    assert p.returncode == 0 and out == "ran\n", err
    assert err == f"taskwrap: started without the zygote: no zygote serves {tmp_path / 'none.sock'} " \
                  "(No such file or directory: it ended)\n", err


def test_a_dead_zygote_is_noticed_at_once_and_its_tasks_exit_status_outlives_it(zygote, tmp_path):
    """SIGKILLed while a task it forked runs: the task's own exit reaches its wrapper (its waiter is
    its parent, not the zygote), and the next wrapper starts cold at once (connection refused)."""
    go = tmp_path / "go"
    code = ("import os, sys, time\nprint('up', flush=True)\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\nprint('done', flush=True); sys.exit(5)")
    pidfile = tmp_path / "task.pid"
    p = wrap(zygote, [sys.executable, "-c", code], pidfile=pidfile)
    assert p.stdout.readline() == b"up\n"
    task = task_pid(pidfile)
    server = zygote_pid(tmp_path)
    os.killpg(server, signal.SIGKILL)  # the zygote and everything left in its group
    wait_for(lambda: not alive(server), 10, what="the zygote's end")
    go.touch()
    out, err = finish(p)
    assert (p.returncode, out) == (5, "done\n"), err
    assert not alive(task) and "zygote" not in err, err
    late = wrap(zygote, [sys.executable, "-c", "print('ran')"], wait=600)
    out, err = finish(late, timeout=60)  # (600 s were it waiting for a server)
    assert (late.returncode, out) == (0, "ran\n"), err
    assert err == f"taskwrap: started without the zygote: no zygote serves {zygote} " \
                  "(Connection refused: it ended)\n", err


@pytest.mark.parametrize("who", ["zygote", "waiter"])
def test_a_failed_fork_is_answered_cold_and_the_zygote_serves_on(zygote, tmp_path, who):
    """A real limit on processes (a pids cgroup around the zygote, or RLIMIT_NPROC): the zygote's
    fork of the task's waiter fails, or (cgroup) the waiter's fork of the task: EAGAIN, answered
    "cold" (one line), the task run cold by its wrapper; the limit lifted, the next task is forked."""
    from tests.support.pidlimit import pid_limit

    server = zygote_pid(tmp_path)
    with pid_limit(server) as limit:
        if who == "waiter" and not limit.exact:
            pytest.skip("RLIMIT_NPROC counts the whole user's processes: only the zygote's own fork fails")
        limit(1 if who == "zygote" else 2)  # (the zygote is one thread: 1 stops its fork, 2 its waiter's)
        p = wrap(zygote, [sys.executable, "-c", "import os; print(os.getppid())"])
        out, err = finish(p)
        assert p.returncode == 0 and out == f"{p.pid}\n", err  # run cold: the wrapper's own child
        assert err == ("taskwrap: started without the zygote: the zygote could not fork "
                       "(Resource temporarily unavailable: a limit on processes?)\n"), err
        limit("max")
        p = wrap(zygote, [sys.executable, "-c", SAYS])
        out, err = finish(p)
        assert p.returncode == 7 and json.loads(out)["ppid"] == server and err == "", err
    assert alive(server)
    if who == "zygote":
        assert "tfcluster-zygote: fork failed (Resource temporarily unavailable): a task starts cold" \
            in (tmp_path / "zygote.log").read_text()


def test_forked_tasks_get_fresh_random_state(tmp_path):
    """Python's and numpy's global generators differ between two tasks forked from one zygote (as
    between two cold starts); the string hash seed is the zygote's (docs: what a fork cannot
    make fresh); OpenBLAS's pool is the task's own budget, as at a cold start."""
    numpy = pytest.importorskip("numpy")
    del numpy
    sock = str(tmp_path / "z.sock")
    log = open(tmp_path / "zygote.log", "wb")
    proc = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), "--socket", sock, "--import", "json,numpy,random",
                             "--pad", envnames.ZYGOTE_PAD], stdout=log, stderr=subprocess.STDOUT,
                            env={**base_env(), **PAD}, start_new_session=True)
    try:
        wait_for(lambda: "ready" in (tmp_path / "zygote.log").read_text(), 60, what="the zygote's ready line")
        code = ("import json, random, numpy\n"
                "print(json.dumps([random.random(), numpy.random.random(), hash('tfcluster')]))")
        said = []
        for _ in range(2):
            p = wrap(sock, [sys.executable, "-c", code])
            out, err = finish(p)
            assert p.returncode == 0 and "zygote" not in err, err
            said.append(json.loads(out))
        (py1, np1, hash1), (py2, np2, hash2) = said
        assert py1 != py2 and np1 != np2
        assert hash1 == hash2  # (PYTHONHASHSEED is fixed at the interpreter's start: the zygote's)
        # A task's thread budget (OMP_NUM_THREADS, its own: not the zygote's) sizes OpenBLAS's pool
        # as its cold start's import would.
        blas = ("import ctypes, numpy\n"
                "lib = [l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l and '.so' in l][0]\n"
                "h = ctypes.CDLL(lib)\n"
                "get = [getattr(h, n) for n in ('openblas_get_num_threads', 'scipy_openblas_get_num_threads64_') "
                "if hasattr(h, n)][0]\nprint(get())")
        p = wrap(sock, [sys.executable, "-c", blas], env={"OMP_NUM_THREADS": "1"})
        out, err = finish(p)
        cold = subprocess.run([sys.executable, "-c", blas], capture_output=True, text=True,
                              env={**base_env(), "OMP_NUM_THREADS": "1"})
        assert p.returncode == 0 and "zygote" not in err and out == cold.stdout == "1\n", (out, err, cold)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1])


def test_a_tasks_waiter_holds_none_of_the_import_and_still_brings_its_exit(tmp_path):
    """The zygote's import here is 200 MiB of pages it wrote (as TensorFlow's is 250): a waiter
    that stayed a fork of it showed all of them in its Rss. Once the task is forked the waiter
    is a small interpreter of its own at once, at its task's priority (it reports the task's exit; its Rss under 40 MiB), still the task's parent with the
    title the ssh backend's signal command looks for, and still the one that tells the wrapper
    how the task ended (exit 5)."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "heavy.py").write_text("BLOB = bytes(range(256)) * (200 << 12)\n")  # 200 MiB, every page written
    sock = str(tmp_path / "z.sock")
    log = open(tmp_path / "zygote.log", "wb")
    env = {"PYTHONPATH": str(mods)}
    go = tmp_path / "go"  # the task ends once this file is there
    proc = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), "--socket", sock, "--import", "json,heavy",
                             "--pad", envnames.ZYGOTE_PAD], stdout=log, stderr=subprocess.STDOUT,
                            env={**base_env(), **PAD, **env}, start_new_session=True)
    try:
        wait_for(lambda: "ready" in (tmp_path / "zygote.log").read_text(), 60, what="the zygote's ready line")
        pidfile = tmp_path / "task.pid"
        p = wrap(sock, [sys.executable, "-c", "import os, sys, time; print('up', flush=True)\n"
                        f"end = time.time() + 60\nwhile not os.path.exists({str(go)!r}) and time.time() < end: time.sleep(0.05)\n"
                        f"sys.exit(5 if os.path.exists({str(go)!r}) else 3)"], env=env, pidfile=pidfile)
        assert p.stdout.readline() == b"up\n"
        task = task_pid(pidfile)
        with open(f"/proc/{task}/stat") as fh:
            waiter = int(fh.read().rsplit(")", 1)[1].split()[1])
        assert waiter != proc.pid
        cmdline = lambda: Path(f"/proc/{waiter}/cmdline").read_bytes().split(b"\0")  # noqa: E731
        wait_for(lambda: b"-S" in cmdline(), 10, what=f"the waiter {waiter} to run its small wait: {cmdline()[:3]}")
        assert f"tfcluster-zygote: the waiter of task {task}".encode() in cmdline()
        assert rss_kib(proc.pid) > 200 * 1024 and rss_kib(waiter) < 40 * 1024, (rss_kib(proc.pid), rss_kib(waiter))
        assert os.getpriority(os.PRIO_PROCESS, waiter) == os.getpriority(os.PRIO_PROCESS, task)
        go.write_text("")
        out, err = finish(p)
        assert p.returncode == 5 and "unknown" not in err, err
        # The waiter ends once it has told the wrapper, so just after the wrapper may have.
        wait_for(lambda: not alive(waiter), 5, what=f"the waiter {waiter} to end after its report")
    finally:
        go.write_text("")  # (a task still waiting ends: it waits for this file, at most 60 s)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def test_garbage_and_other_users_get_nothing_forked(zygote, tmp_path):
    # A request that is not one (no descriptors, a huge length): the connection closes, the zygote serves on.
    for blob in (b"\xff\xff\xff\xff", b"{}\n"):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(zygote)
            s.sendall(blob)
            s.settimeout(10)
            assert s.recv(4096) in (b"", b'{"cold": "a request without its header and three descriptors"}\n')
    p = wrap(zygote, [sys.executable, "-c", "print('ran')"])
    assert finish(p)[0] == "ran\n"
    # Another user of the host cannot reach it: the socket is 0600 (tests/hostile: were it open,
    # its uid check refuses them).
    assert os.stat(zygote).st_mode & 0o077 == 0


def test_a_wrapper_without_its_zygote_module_starts_cold(tmp_path):
    """A copy of the wrapper shipped without zygoteask.py beside it: one line, the task runs as ever."""
    import shutil

    for name in ("taskwrap.py", "sibling.py"):
        shutil.copy(taskwrap_path().parent / name, tmp_path / name)
    p = subprocess.Popen([sys.executable, str(tmp_path / "taskwrap.py"), "--zygote", str(tmp_path / "z.sock"), "--",
                          sys.executable, "-c", "print('ran')"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, err = finish(p)
    assert p.returncode == 0 and out == "ran\n", err
    assert err == "taskwrap: started without the zygote: No module named 'zygoteask'\n", err


def standby(sock: str, cmd: list[str], promotion: Path, env: dict | None = None) -> subprocess.Popen:
    """A warm standby's wrapper whose task the zygote forks once promoted (--standby-defer)."""
    return subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", sock, "--standby-defer",
                             f"{envnames.STANDBY},{envnames.STANDBY_ENV}", "--", *cmd],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**base_env(), envnames.STANDBY: "1",
                                                         envnames.STANDBY_ENV: str(promotion), **(env or {})})


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


SAYS = ("import os, sys, json; print(json.dumps({'ppid': GRANDPARENT, 'own': os.environ.get('TFCLUSTER_TEST_OWN'), "
        f"'standby': [k for k in os.environ if k in ({envnames.STANDBY!r}, {envnames.STANDBY_ENV!r})]}}), "
        "flush=True); sys.exit(7)").replace("GRANDPARENT", "int(open(f'/proc/{os.getppid()}/stat').read()"
                                                ".rsplit(')', 1)[1].split()[1])")


def test_a_deferred_standby_is_ready_with_nothing_forked_and_forked_in_the_promoted_environment(zygote, tmp_path):
    promotion = tmp_path / "promotion.json"
    p = standby(zygote, [sys.executable, "-c", SAYS], promotion, env={"TFCLUSTER_TEST_OWN": "standby"})
    assert p.stdout.readline() == b"tfcluster-standby waiting\n"
    assert p.stdout.readline().startswith(b"tfcluster-standby ready after=")
    # Ready, and no process of the task's anywhere: not the zygote's child, not the wrapper's.
    assert children(zygote_pid(tmp_path)) == [] and children(p.pid) == []
    promotion.write_text(json.dumps({"TFCLUSTER_TEST_OWN": "promoted"}))
    os.killpg(p.pid, signal.SIGUSR1)  # what the local backend's promotion sends: the wrapper's group
    assert p.stdout.readline() == b"tfcluster-standby promoted\n"
    out, err = finish(p)
    assert p.returncode == 7, err
    assert json.loads(out) == {"ppid": zygote_pid(tmp_path), "own": "promoted", "standby": []}, out
    assert not promotion.exists() and "zygote" not in err, err


@pytest.mark.parametrize("how", ["SIGTERM", "lifeline"])
def test_a_deferred_standby_stopped_before_its_promotion_ends_with_nothing_forked(zygote, tmp_path, how):
    p = standby(zygote, [sys.executable, "-c", SAYS], tmp_path / "promotion.json")
    p.stdout.readline()
    assert p.stdout.readline().startswith(b"tfcluster-standby ready")
    if how == "SIGTERM":
        os.killpg(p.pid, signal.SIGTERM)  # how the local backend stops a standby
    else:
        p.stdin.close()  # the launcher gone
    p.wait(timeout=10)  # at once, not after the grace
    assert p.returncode in ((128 + signal.SIGTERM,) if how == "SIGTERM" else (128 + signal.SIGTERM, -signal.SIGKILL))
    assert p.stdout.read() == b"" and children(zygote_pid(tmp_path)) == []


def test_a_standby_the_zygote_would_not_serve_waits_as_its_own_process(zygote, tmp_path):
    """Its environment differs from the zygote's: one line, and the standby is its command started
    at once (as a standby: the variable still 1), the wrapper's own child."""
    code = (f"import os; print(os.environ.get({envnames.STANDBY!r}), os.getppid(), flush=True)")
    p = standby(zygote, [sys.executable, "-c", code], tmp_path / "promotion.json", env={"PYTHONHASHSEED": "7"})
    out, err = finish(p)
    assert p.returncode == 0 and out == f"1 {p.pid}\n", (out, err)
    assert err.startswith("taskwrap: started without the zygote: environment variable 'PYTHONHASHSEED'"), err


def test_a_request_its_wrapper_gave_up_on_forks_nothing(tmp_path):
    """A wrapper that stopped waiting (--zygote-wait passed while the zygote was still importing)
    starts its task cold; the zygote, reaching its request later while that task runs, forks
    nothing for it."""
    sock = str(tmp_path / "z.sock")
    gate, done = tmp_path / "gate", tmp_path / "done"
    (tmp_path / "slow_import.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n")
    log = open(tmp_path / "zygote.log", "wb")
    env = {**base_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(HERE / "zygote.py"), "--socket", sock, "--import", "slow_import"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    task = (f"import os, time\nprint('ran', flush=True)\n"
            f"while not os.path.exists({str(done)!r}): time.sleep(0.05)\n")
    try:
        wait_for(lambda: os.path.exists(sock), 30, what="the zygote's socket")
        p = subprocess.Popen([sys.executable, str(taskwrap_path()), "--zygote", sock, "--zygote-wait", "1", "--",
                              sys.executable, "-c", task], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        assert p.stderr.readline() == b"taskwrap: started without the zygote: the zygote did not answer in time\n"
        assert p.stdout.readline() == b"ran\n"  # cold, and running while the zygote reaches its request
        gate.touch()
        said = f"a request its wrapper (pid {p.pid}) gave up on: nothing forked"
        wait_for(lambda: said in (tmp_path / "zygote.log").read_text(), 30, what="the zygote's word on it",
                 detail=lambda: (tmp_path / "zygote.log").read_text())
        assert children(proc.pid) == []  # no waiter, nothing forked
        done.touch()
        p.wait(timeout=60)
        assert p.returncode == 0 and p.stdout.read() == b""  # (once: the cold start's)
    finally:
        done.touch()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def test_a_host_shutdown_sigterm_to_every_process_lets_a_forked_task_save(zygote, tmp_path):
    """A VM shutting down (a Spot preemption) sends SIGTERM to every process at once: the zygote,
    the task's waiter, the task and its wrapper. The task's own handler must get to save and exit
    as it chooses, as under a cold start: the waiter, its parent, outlives the SIGTERM (the task
    has PR_SET_PDEATHSIG SIGKILL, which a waiter ended by it would fire mid-save)."""
    code = ("import signal, sys, time\nterm = []\nsignal.signal(signal.SIGTERM, lambda *a: term.append(1))\n"
            "print('up', flush=True)\nwhile not term: time.sleep(0.02)\n"
            "time.sleep(0.5); print('saved', flush=True); sys.exit(0)")
    pidfile = tmp_path / "task.pid"
    p = wrap(zygote, [sys.executable, "-c", code], pidfile=pidfile)
    assert p.stdout.readline() == b"up\n"
    task = task_pid(pidfile)
    with open(f"/proc/{task}/stat") as fh:
        waiter = int(fh.read().rsplit(")", 1)[1].split()[1])
    assert waiter not in (p.pid, zygote_pid(tmp_path)), waiter  # (forked: its parent is its waiter)
    for pid in (zygote_pid(tmp_path), waiter, task, p.pid):
        os.kill(pid, signal.SIGTERM)
    out, err = finish(p)
    assert (p.returncode, out) == (0, "saved\n"), (p.returncode, out, err)
