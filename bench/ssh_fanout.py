#!/usr/bin/env python3
"""Fan-out cost of ``backend: ssh``: ``tfcluster up`` with a trivial task on 1, 4, 8, 16, 32, 64 or
128 hosts, side by side with ``pdsh -R ssh -f 64 ... true`` on the same hosts in the same run,
alternating (pdsh, up, pdsh, up, ...), each trial printed with the load average.

The hosts are network namespaces on this machine, each with its own sshd (the lab of
tests/labs/ssh.py). Needs root, iproute2, openssh-server and pdsh
(tests/setup/ssh.sh installs them). Usage::

    sudo python3 bench/ssh_fanout.py [--hosts 32,64,128] [--repeat 3]

The lab's namespaces and subnet are TFCLUSTER_LAB_PREFIX (default tfcb) and
TFCLUSTER_LAB_SUBNET (the ssh lab's default): set both when another lab runs on the machine.

Figures (median of --repeat runs, seconds):
  pdsh       pdsh -R ssh -w <hosts> true: connect, run `true`, exit
  up:running `tfcluster up` started -> every task printed its first line (all tasks running)
  up:total   `tfcluster up` started -> exited 0 (includes preflight, task exit, teardown)
Both include process start-up (pdsh's, and the launcher's Python imports).
  cpu        the client's own CPU time (user + sys; pdsh's includes its ssh processes)

--client-nice 0,-10 runs every trial once per niceness of the two clients (pdsh and its ssh
processes, `tfcluster up`), the lab's sshds staying at 0. The hosts are on this machine: at 128
hosts their sshds and the processes they start are runnable by the dozen and get the CPU a
client on its own laptop would have; a higher priority for both clients alike gives back to
the client side what separate machines would (BENCHMARKS.md shows both).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.labs.ssh import Lab, have_prereqs  # noqa: E402

TRIVIAL = "print('running', flush=True)"


def _niced(nice: int):
    return (lambda: os.nice(nice)) if nice else None


def _reap(proc: subprocess.Popen, timeout: float) -> tuple[int, float]:
    """Wait for ``proc`` (killed after ``timeout`` s); its exit code and CPU seconds (user + sys,
    with the children it reaped itself)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            proc.kill()
            deadline = float("inf")
        time.sleep(0.01)


def time_pdsh(lab: Lab, n: int, nice: int = 0) -> tuple[float, float]:
    hosts = ",".join(h.address for h in lab.hosts[:n])
    t0 = time.perf_counter()
    proc = subprocess.Popen(["pdsh", "-R", "ssh", "-f", "64", "-l", "root", "-w", hosts, "true"],
                            env=lab.pdsh_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_niced(nice))
    err = proc.stderr.read() if proc.stderr else ""
    code, cpu = _reap(proc, 120)
    took = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"pdsh failed: {err.strip()}")
    return took, cpu


def write_spec(lab: Lab, n: int, work: Path) -> Path:
    spec = {
        "name": f"fanout{n}",
        "strategy": "multi_worker_mirrored",
        "backend": "ssh",
        "entrypoint": [sys.executable, "-c", TRIVIAL],
        "hosts": lab.hosts_yaml([h.name for h in lab.hosts[:n]]),
        "tasks": {"worker": n},
        "ports": {"base": 24456},
        "watchdog": {"stop_grace": 1},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable,
                "remote_dir": str(work / "remote"), "workdir": str(ROOT), "require": []},
    }
    path = work / f"fanout{n}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def time_up(spec: Path, n: int, nice: int = 0) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_niced(nice))
    running = None
    seen = 0
    assert proc.stdout is not None
    deadline = t0 + 120
    for line in proc.stdout:
        if line.rstrip().endswith("] running"):
            seen += 1
            if seen == n:
                running = time.perf_counter() - t0
        if time.perf_counter() > deadline:
            proc.kill()
            break
    code, cpu = _reap(proc, 120)
    total = time.perf_counter() - t0
    if code != 0 or running is None:
        raise RuntimeError(f"tfcluster up failed ({code}): {proc.stderr.read()[-2000:] if proc.stderr else ''}")
    return running, total, cpu


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="32,64,128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client-nice", default="0",
                    help="niceness of both clients, a comma-separated list run in turn each trial (e.g. 0,-10)")
    args = ap.parse_args()
    reason = have_prereqs()
    if reason:
        print(f"ssh_fanout: {reason}", file=sys.stderr)
        return 2
    counts = [int(x) for x in args.hosts.split(",")]
    nices = [int(x) for x in args.client_nice.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tfcs-bench-"))
    lab = Lab(work / "lab", count=max(counts), prefix=os.environ.get("TFCLUSTER_LAB_PREFIX", "tfcb"))
    t0 = time.perf_counter()
    lab.start()
    print(f"lab: {max(counts)} sshd hosts in network namespaces up in {time.perf_counter() - t0:.2f} s "
          f"({os.cpu_count()} CPUs; load average {_load()})", flush=True)
    try:
        rows = []
        for n in counts:
            spec = write_spec(lab, n, work)
            time_pdsh(lab, n)  # warm caches once
            got = {nice: ([], [], [], [], []) for nice in nices}  # pdsh, pdsh cpu, running, total, up cpu
            for trial in range(args.repeat):
                for nice in nices:
                    p, pc = time_pdsh(lab, n, nice)
                    r, t, uc = time_up(spec, n, nice)
                    for series, value in zip(got[nice], (p, pc, r, t, uc)):
                        series.append(value)
                    print(f"  {n} hosts, trial {trial + 1}, client nice {nice}: pdsh {p:.2f} s (cpu {pc:.2f} s), "
                          f"up:running {r:.2f} s, up:total {t:.2f} s (cpu {uc:.2f} s) ({t / p:.2f}x); "
                          f"load average {_load()}", flush=True)
            for nice in nices:
                rows.append((n, nice, *(statistics.median(series) for series in got[nice])))
        print(f"{'hosts':>5}  {'nice':>4}  {'pdsh':>7}  {'cpu':>6}  {'up:running':>10}  {'up:total':>8}  {'cpu':>6}  "
              f"{'running/pdsh':>12}  {'total/pdsh':>10}")
        for n, nice, p, pc, r, t, uc in rows:
            print(f"{n:>5}  {nice:>4}  {p:>6.2f}s  {pc:>5.2f}s  {r:>9.2f}s  {t:>7.2f}s  {uc:>5.2f}s  "
                  f"{r / p:>11.2f}x  {t / p:>9.2f}x")
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
