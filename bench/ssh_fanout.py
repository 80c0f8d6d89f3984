#!/usr/bin/env python3
"""Fan-out cost of ``backend: ssh``: ``tfcluster up`` with a trivial task on 1, 4, 8, 16, 32, 64 or
128 hosts, side by side with ``pdsh -R ssh -f 64 ... true`` on the same hosts in the same run,
alternating (pdsh, up, pdsh, up, ...), each trial printed with the load average.

The hosts are network namespaces on this machine, each with its own sshd (the lab of
tests/labs/ssh.py). Needs root, iproute2, openssh-server and pdsh
(tests/setup/ssh.sh installs them). Usage::

    sudo python3 bench/ssh_fanout.py [--hosts 32,64,128] [--repeat 3] [--task echo|python]

The lab's namespaces and subnet are TFCLUSTER_LAB_PREFIX (default tfcb) and
TFCLUSTER_LAB_SUBNET (the ssh lab's default): set both when another lab runs on the machine.

Figures (median of --repeat runs, seconds):
  pdsh       pdsh -R ssh -w <hosts> true: connect, run `true`, exit
  up:running `tfcluster up` started -> every task printed its first line (all tasks running);
             the task is /bin/echo (--task echo, the default: pdsh's payload, one exec) or a Python
             that prints a line (--task python: each host also starts the task's interpreter)
  up:total   `tfcluster up` started -> exited 0 (includes preflight, task exit, teardown)
Both include process start-up (pdsh's, and the launcher's Python imports).
  cpu        the client's own CPU time (user + sys; pdsh's includes its ssh processes)
  hosts cpu  the CPU time of everything on the lab hosts meanwhile: every sshd and what it started
             (sessions, shells, agents, task wrappers, tasks), read from a cgroup the hosts' sshds
             are put in at the start (children stay in their parent's cgroup), so other load on
             the machine does not count. Divided by the host count it is one host's work per
             command: what a host of its own would spend, in parallel with the others.

The checkout's bytecode is compiled first (compileall), as a pip install compiles it: where
PYTHONDONTWRITEBYTECODE is set (this dev VM's environment sets it), every `up` would otherwise
compile the launcher's modules from source, 1.1-2.1 s of the client's CPU before its first
connection (`python -c "import launcher.cli.main"`: 1.9-2.9 s without the caches, 0.8 s with
them), which a user's install never pays.

Before each trial the hosts are waited on until they run nothing but their sshd (a trial's
teardown ends on its hosts after its client exits: the session's last processes), so no trial
starts on hosts still busy with the one before.

--client-nice 0,-10 runs every trial once per niceness of the two clients (pdsh and its ssh
processes, `tfcluster up`), the lab's sshds staying at 0. The hosts are on this machine: at 128
hosts their sshds and the processes they start are runnable by the dozen and get the CPU a
client on its own laptop would have; a higher priority for both clients alike gives back to
the client side what separate machines would (BENCHMARKS.md shows both).
"""

from __future__ import annotations

import argparse
import compileall
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

from benchlib import load_average  # noqa: E402
from tests.labs.ssh import Lab, have_prereqs  # noqa: E402

TASKS = {"python": [sys.executable, "-c", "print('running', flush=True)"], "echo": ["/bin/echo", "running"]}


class HostsCPU:
    """The lab hosts' CPU seconds, from a cgroup (v2 ``unified`` or v1 ``cpuacct``) holding every
    lab sshd; the processes an sshd starts inherit it."""

    def __init__(self, lab: Lab) -> None:
        name = f"{lab.prefix}-hosts-cpu"
        v2, v1 = Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/cpuacct")
        if (v2 / "cgroup.procs").exists():
            self.dir, self.v2 = v2 / name, True
        elif (v1 / "cgroup.procs").exists():
            self.dir, self.v2 = v1 / name, False
        else:
            raise RuntimeError("no cgroup v2 (/sys/fs/cgroup/unified) or v1 cpuacct hierarchy to count the hosts' CPU")
        self.dir.mkdir(exist_ok=True)
        for h in lab.hosts:
            for pid in subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True).stdout.split():
                try:
                    (self.dir / "cgroup.procs").write_text(pid)
                except ProcessLookupError:
                    pass  # a session that ended meanwhile

    def seconds(self) -> float:
        if self.v2:
            stat = dict(line.split() for line in (self.dir / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        return int((self.dir / "cpuacct.usage").read_text()) / 1e9

    def procs(self) -> int:
        """How many processes the hosts run now (their sshds, and what those started)."""
        return len((self.dir / "cgroup.procs").read_text().split())

    def close(self) -> None:
        root = self.dir.parent / "cgroup.procs"
        for pid in (self.dir / "cgroup.procs").read_text().split():
            try:
                root.write_text(pid)
            except OSError:
                pass  # gone meanwhile
        try:
            self.dir.rmdir()
        except OSError:
            pass


def hosts_quiet(cpu_of: HostsCPU, sshds: int, timeout: float = 30.0) -> tuple[float, int]:
    """Wait until the hosts run only their ``sshds`` (a trial's sessions ended there); (seconds
    waited, processes found first). Past ``timeout``: RuntimeError naming what is left."""
    t0, first = time.monotonic(), cpu_of.procs()
    left = first
    while left > sshds:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the lab hosts still run {left - sshds} processes besides their sshds "
                               f"{timeout:g} s after the last trial: a trial's teardown did not end there")
        time.sleep(0.05)
        left = cpu_of.procs()
    return time.monotonic() - t0, first


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


def time_pdsh(lab: Lab, n: int, cpu_of: HostsCPU, nice: int = 0) -> tuple[float, float, float]:
    hosts = ",".join(h.address for h in lab.hosts[:n])
    h0 = cpu_of.seconds()
    t0 = time.perf_counter()
    proc = subprocess.Popen(["pdsh", "-R", "ssh", "-f", "64", "-l", "root", "-w", hosts, "true"],
                            env=lab.pdsh_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_niced(nice))
    err = proc.stderr.read() if proc.stderr else ""
    code, cpu = _reap(proc, 120)
    took = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"pdsh failed: {err.strip()}")
    return took, cpu, _settled(cpu_of) - h0


def write_spec(lab: Lab, n: int, work: Path, task: list[str]) -> Path:
    spec = {
        "name": f"fanout{n}",
        "strategy": "multi_worker_mirrored",
        "backend": "ssh",
        "entrypoint": task,
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


def _settled(cpu_of: HostsCPU) -> float:
    """The hosts' CPU once what the command left on them (a session's last exit) has ended: the
    count stops growing for 0.3 s (at most 10 s)."""
    last, end = cpu_of.seconds(), time.monotonic() + 10
    while time.monotonic() < end:
        time.sleep(0.3)
        now = cpu_of.seconds()
        if now - last < 0.005:
            return now
        last = now
    return last


def time_up(spec: Path, n: int, cpu_of: HostsCPU, nice: int = 0) -> tuple[float, float, float, float]:
    h0 = cpu_of.seconds()
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
    return running, total, cpu, _settled(cpu_of) - h0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="32,64,128")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--client-nice", default="0",
                    help="niceness of both clients, a comma-separated list run in turn each trial (e.g. 0,-10)")
    ap.add_argument("--task", choices=sorted(TASKS), default="echo",
                    help="up's trivial task: /bin/echo (the default: one exec, no interpreter, the same payload "
                         "as pdsh's `true`), or a Python that prints a line (adds the task's own interpreter on "
                         "every host, which pdsh does not run)")
    args = ap.parse_args()
    reason = have_prereqs()
    if reason:
        print(f"ssh_fanout: {reason}", file=sys.stderr)
        return 2
    counts = [int(x) for x in args.hosts.split(",")]
    nices = [int(x) for x in args.client_nice.split(",")]
    compileall.compile_dir(str(ROOT / "launcher"), quiet=1)  # as a pip install does (see above)
    work = Path(tempfile.mkdtemp(prefix="tfcs-bench-"))
    lab = Lab(work / "lab", count=max(counts), prefix=os.environ.get("TFCLUSTER_LAB_PREFIX", "tfcb"))
    t0 = time.perf_counter()
    lab.start()
    print(f"lab: {max(counts)} sshd hosts in network namespaces up in {time.perf_counter() - t0:.2f} s "
          f"({os.cpu_count()} CPUs; load average {load_average()}); up's task: {' '.join(TASKS[args.task])}", flush=True)
    cpu_of = HostsCPU(lab)
    try:
        rows = []
        for n in counts:
            spec = write_spec(lab, n, work, TASKS[args.task])
            time_pdsh(lab, n, cpu_of)  # warm caches once
            got = {nice: ([], [], [], [], [], [], []) for nice in nices}
            for trial in range(args.repeat):
                for nice in nices:
                    quiet = [hosts_quiet(cpu_of, len(lab.hosts))]
                    p, pc, ph = time_pdsh(lab, n, cpu_of, nice)
                    quiet.append(hosts_quiet(cpu_of, len(lab.hosts)))
                    r, t, uc, uh = time_up(spec, n, cpu_of, nice)
                    waits = "; ".join(f"waited {w:.2f} s for {k - len(lab.hosts)} leftover processes on the hosts "
                                      f"before {what}" for (w, k), what in zip(quiet, ("pdsh", "up")) if k > len(lab.hosts))
                    for series, value in zip(got[nice], (p, pc, ph, r, t, uc, uh)):
                        series.append(value)
                    print(f"  {n} hosts, trial {trial + 1}, client nice {nice}: pdsh {p:.2f} s (cpu {pc:.2f} s, "
                          f"hosts cpu {ph:.2f} s), up:running {r:.2f} s, up:total {t:.2f} s (cpu {uc:.2f} s, "
                          f"hosts cpu {uh:.2f} s) ({t / p:.2f}x); load average {load_average()}" + (f" ({waits})" if waits else ""),
                          flush=True)
            for nice in nices:
                rows.append((n, nice, *(statistics.median(series) for series in got[nice])))
        print(f"{'hosts':>5}  {'nice':>4}  {'pdsh':>7}  {'cpu':>6}  {'hosts cpu':>9}  {'up:running':>10}  "
              f"{'up:total':>8}  {'cpu':>6}  {'hosts cpu':>9}  {'running/pdsh':>12}  {'total/pdsh':>10}  "
              f"{'per host: pdsh':>14}  {'up':>6}")
        for n, nice, p, pc, ph, r, t, uc, uh in rows:
            print(f"{n:>5}  {nice:>4}  {p:>6.2f}s  {pc:>5.2f}s  {ph:>8.2f}s  {r:>9.2f}s  {t:>7.2f}s  {uc:>5.2f}s  "
                  f"{uh:>8.2f}s  {r / p:>11.2f}x  {t / p:>9.2f}x  {1000 * ph / n:>11.0f} ms  {1000 * uh / n:>3.0f} ms")
    finally:
        cpu_of.close()
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
