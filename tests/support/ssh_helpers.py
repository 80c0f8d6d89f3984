"""What the ssh lab's tests share (the lab itself is tests/labs/ssh.py): the spec writer
(``make_spec``, a fixture: the folders' conftest.py files take it from here), a tiny task, the
launcher started and finished, the remote tasks' pid files, a host's firewall, a host's private
state dir, a host's preemption and return."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli import start_tfcluster
from tests.support.processes import alive
from tests.support.waits import wait_for

# A tiny task: prints where it runs and what it got, then exits (or sleeps).
SHOW = (
    "import json,os,socket,sys,time;"
    "c=json.loads(os.environ['TF_CONFIG']);"
    "print('TASK', os.environ['TFCLUSTER_TASK'], socket.gethostname(), json.dumps(c['cluster']), "
    "os.environ['TFCLUSTER_RUN_DIR'], os.environ.get('MYVAR','-'), sep='|', flush=True);"
    "time.sleep(float(sys.argv[1]) if len(sys.argv)>1 else 0)"
)

# Seconds between the SIGTERM and the SIGKILL, the host's sshd accepting meanwhile (a Spot VM gets
# 30; long enough that the launcher's look at the host, on a loaded machine, falls inside it).
NOTICE = 6.0


def launch(spec: Path, *args: str) -> subprocess.Popen:
    """``tfcluster up SPEC ARGS`` started, stdout and stderr apart (``--verbose``: with the tasks'
    records, where a test acts on one)."""
    return start_tfcluster("up", spec, *args, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"launcher did not finish within {timeout} s:\n{err[-3000:]}")
    return proc.returncode, out, err


def pidfiles(spec: Path, n: int, timeout: float = 30.0) -> dict[str, tuple[int, int]]:
    """{pid file name: (wrapper pid, task pid)} once ``n`` remote tasks have written theirs."""
    def found():
        out = {}
        for pf in (spec.parent / "remote" / "sshtest").glob("*/pids/*.pid"):
            try:
                wrapper, child = pf.read_text().split()[:2]  # (then the wrapper's start time)
                out[pf.name] = (int(wrapper), int(child))
            except (OSError, ValueError):
                continue
        return out if len(out) >= n else None

    return wait_for(found, timeout, 0.1, what=f"{n} remote tasks to write their pid files")


def wait_gone(pids, timeout: float) -> float:
    """Seconds until every one of ``pids`` has exited (an AssertionError after ``timeout``)."""
    start = time.monotonic()
    while any(alive(p) for p in pids):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"still alive after {timeout:g} s: {[p for p in pids if alive(p)]}")
        time.sleep(0.05)
    return time.monotonic() - start


def firewall(host, *rules: str) -> None:
    """``host`` applies the nftables input ``rules`` (until ``firewall_flush``)."""
    host.exec("nft", "add", "table", "inet", "tfcstest")
    host.exec("nft", "add", "chain", "inet", "tfcstest", "input",
              "{ type filter hook input priority 0 ; policy accept ; }")
    for rule in rules:
        host.exec("nft", *f"add rule inet tfcstest input {rule}".split())


def firewall_flush(host) -> None:
    host.exec("nft", "delete", "table", "inet", "tfcstest", check=False)


def private_state(lab, tmp_path) -> str:
    """A state dir on each host's private disk (another host does not see its files)."""
    return str(lab.private / tmp_path.name / "state")


def preempt(lab, name: str) -> None:
    """The host's end as the GCE test has its OS end it, after the notice: SIGTERM to every
    process, SIGKILL to what is left, its link down (no sshd lingering: the notice came first)."""
    lab.preempt(name, NOTICE)


def bring_back(lab, name: str) -> None:
    lab.bring_back(name)


def group_task(out_dir: Path, want: int, hold: int = 0) -> list[str]:
    """The command of a stand-in worker (tests/support/group_task.py) that finishes in a group of
    ``want`` from attempt ``hold`` on, writing where it ran under ``out_dir``."""
    out_dir.mkdir(exist_ok=True)
    return [PY, str(ROOT / "tests" / "support" / "group_task.py"), str(out_dir), str(want), str(hold)]


def wait_attempt_up(out_dir: Path, attempt: int, size: int) -> None:
    """Every task of group_task.py's ``attempt`` (a group of ``size``) wrote its file: a test that
    takes a host down at one task's line waits for this first, since on a loaded machine another
    task, forked later, may not have run its script yet (it is then stopped before its file)."""
    wait_for(lambda: len(list(out_dir.glob(f"{attempt}-{size}-*"))) == size, 60,
             what=f"all {size} tasks of attempt {attempt} up")


ROOT = Path(__file__).resolve().parents[2]  # the checkout: the tasks' workdir
PY = sys.executable


@pytest.fixture
def make_spec(tmp_path, lab):
    """Write a cluster.yaml for the lab; returns its path. Keyword args override spec keys."""

    def make(entrypoint, workers=2, hosts=None, ssh=None, host_keys=None, **extra):
        """``host_keys``: {host name: {key: value}} added to that host's entry."""
        names = hosts or ["h1", "h2"]
        host_entries = [{**h, **(host_keys or {}).get(h["name"], {})} for h in lab.hosts_yaml(names)]
        spec = {
            "name": "sshtest",
            "strategy": "multi_worker_mirrored",
            "backend": "ssh",
            "entrypoint": entrypoint,
            "hosts": host_entries,
            "tasks": {"worker": workers},
            "ports": {"base": 23456},
            "watchdog": {"startup_timeout": 120, "stop_grace": 2},
            "ssh": {
                "known_hosts": str(lab.known_hosts),
                "python": PY,
                "remote_dir": str(tmp_path / "remote"),
                "workdir": str(ROOT),
                "lease": 4,
                "connect_timeout": 3,
                "probe_timeout": 1.5,
                "require": [],
                **(ssh or {}),
            },
            **extra,
        }
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return make


def pids_in_netns(lab_host) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", lab_host.netns], capture_output=True, text=True, timeout=10).stdout
    return [int(p) for p in out.split()]


# A GCE metadata server of the tests' own, run in a host's namespace (tests/integration/ssh/test_ssh_gce.py,
# test_ssh_tf_users.py): python -c GCE_SERVER FLAG_FILE PORT.
GCE_PORT = 8765

# GCE's metadata server, as far as the watcher uses it: the header is required, the value is
# TRUE/FALSE, ?wait_for_change=true&last_etag=E blocks until the value's ETag differs from E.
GCE_SERVER = r"""
import hashlib, http.server, sys, time
flag = sys.argv[1]

def value():
    try:
        return open(flag).read().strip() or "FALSE"
    except OSError:
        return "FALSE"

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path, _, query = self.path.partition("?")
        if self.headers.get("Metadata-Flavor") != "Google":
            self.send_response(403); self.end_headers(); return
        if path != "/computeMetadata/v1/instance/preempted":
            self.send_response(404); self.end_headers(); return
        args = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        tag = lambda v: hashlib.md5(v.encode()).hexdigest()[:8]
        if args.get("wait_for_change") == "true":
            end = time.time() + 60
            while time.time() < end and tag(value()) == args.get("last_etag"):
                time.sleep(0.05)
        v = value()
        served = time.time()  # before the reply leaves: the client cannot act on it earlier
        body = v.encode()
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("ETag", tag(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with open(flag + ".log", "a") as log:
            log.write(f"{served:.3f} {self.path} {v}\n")

    def log_message(self, *a):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""
