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


def time_pdsh(lab: Lab, n: int) -> float:
    hosts = ",".join(h.address for h in lab.hosts[:n])
    t0 = time.perf_counter()
    proc = subprocess.run(["pdsh", "-R", "ssh", "-f", "64", "-l", "root", "-w", hosts, "true"],
                          env=lab.pdsh_env(), capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"pdsh failed: {proc.stderr.strip()}")
    return took


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


def time_up(spec: Path, n: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    code = proc.wait(timeout=120)
    total = time.perf_counter() - t0
    if code != 0 or running is None:
        raise RuntimeError(f"tfcluster up failed ({code}): {proc.stderr.read()[-2000:] if proc.stderr else ''}")
    return running, total


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="32,64,128")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    reason = have_prereqs()
    if reason:
        print(f"ssh_fanout: {reason}", file=sys.stderr)
        return 2
    counts = [int(x) for x in args.hosts.split(",")]
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
            pdsh, running, total = [], [], []
            for trial in range(args.repeat):
                pdsh.append(time_pdsh(lab, n))
                r, t = time_up(spec, n)
                running.append(r)
                total.append(t)
                print(f"  {n} hosts, trial {trial + 1}: pdsh {pdsh[-1]:.2f} s, up:running {r:.2f} s, "
                      f"up:total {t:.2f} s ({t / pdsh[-1]:.2f}x); load average {_load()}", flush=True)
            rows.append((n, statistics.median(pdsh), statistics.median(running), statistics.median(total)))
        print(f"{'hosts':>5}  {'pdsh':>7}  {'up:running':>10}  {'up:total':>8}  {'running/pdsh':>12}  {'total/pdsh':>10}")
        for n, p, r, t in rows:
            print(f"{n:>5}  {p:>6.2f}s  {r:>9.2f}s  {t:>7.2f}s  {r / p:>11.2f}x  {t / p:>9.2f}x")
    finally:
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
