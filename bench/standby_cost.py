#!/usr/bin/env python3
"""What a warm standby costs a run that never restarts: a user's plain TF_CONFIG script
(tests/support/plain_tf_config.py, 2 local workers, ``--steps`` steps, no delay between them),
the default (``warm_standby`` left out: the standby stub) against ``warm_standby: false``,
alternated. Per trial:

* ``first step``: ``tfcluster up`` -> both workers' first step line, as the launcher printed it;
* ``peak PSS``: the largest sum of Pss (/proc/PID/smaps_rollup) over every process of the run
  (the launcher, the wrappers, the tasks, the standbys), sampled every 0.2 s;
* ``CPU``: user + system seconds of ``up`` and everything it reaped (wait4's rusage);
* ``steps/s``: worker:0's steps after its 10th, over the time their lines took to arrive;
* the standbys' ready lines (what priority they got, how long they waited for the host to idle).

Medians at the end, with the ratios the targets name (first step <= 1.10, PSS <= 1.20, CPU <= 1.15,
steps/s >= 0.97) and the load average before and after. The machine must be otherwise quiet for
these to mean anything: the script prints the load and warns above 3.

``--backend ssh``: the same on 2 hosts of the ssh lab (tests/labs/ssh.py: network namespaces with
an sshd each, this machine's CPUs), one worker a host; the peak PSS is summed over every process of
the hosts (their agents, wrappers, fork servers, tasks and standbys; not sshd), and the CPU is not
measured (the hosts' processes are not the launcher's children).

    python bench/standby_cost.py [--backend local|ssh] [--trials 3] [--steps 400]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import ROOT, load_average, pss_of
from tests.support.ports import free_base
from tests.support.processes import pids_with_env

PLAIN = ROOT / "tests" / "support" / "plain_tf_config.py"
STEP = re.compile(r"^\[(worker:\d)\] plain-step (\d+) ")


def ssh_spec_file(work: Path, steps: int, warm: bool, lab) -> Path:
    """The same run on the lab's h1 and h2, one worker on each."""
    import yaml

    (work / "state").mkdir(exist_ok=True)
    spec = {
        "name": "bench", "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, str(PLAIN), "--steps", str(steps), "--delay", "0", "--state", str(work / "state")],
        "hosts": lab.hosts_yaml(["h1", "h2"]), "tasks": {"worker": 2}, "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "watchdog": {"startup_timeout": 600, "stop_grace": 5},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "lease": 10, "connect_timeout": 10, "require": []},
        "restart": {"max_restarts": 1} if warm else {"max_restarts": 1, "warm_standby": False},
    }
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def hosts_pids(lab) -> list[int]:
    """Every process of the lab's hosts but their sshd (the hosts share this pid namespace)."""
    from tests.support.ssh_helpers import pids_in_netns

    out = []
    for host in lab.hosts:
        for pid in pids_in_netns(host):
            try:
                if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sshd"):
                    out.append(pid)
            except OSError:
                pass
    return out


def role(pid: int) -> str:
    """What a process of the hosts is, from its command line (for the breakdown at the peak)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "the waiter of task" in cmd:
        return "waiters"
    if "zygote.py --socket" in cmd:
        return "zygote wrappers" if "taskwrap" in cmd else "zygotes"  # (local: its wrapper; ssh has none)
    if "zygotehost.py --keeper" in cmd:
        return "keepers (a host agent exec'd to keep its fork server)"
    if "--standby-defer" in cmd:
        return "standbys' wrappers"
    if "boot.py" in cmd or "taskwrap" in cmd:
        return "tasks' wrappers"
    if "Whether another user could swap a path" in cmd:  # (the host agent: pathtrust.py's text first)
        return "agents (a fork server's keeper, or the host's first task's wrapper)"
    if "stub for a Python entrypoint" in cmd:
        return "tasks (or standbys: under the stub)"
    return "tasks" if "python" in os.path.basename(cmd.split(" ", 1)[0]) else "others"


def by_role(pids) -> tuple[int, dict]:
    """The Pss of ``pids`` (bytes), and MiB of it per role (one read of each process)."""
    out: dict = {}
    total = 0
    for pid in pids:
        pss = pss_of([pid])
        total += pss
        out[role(pid)] = out.get(role(pid), 0) + pss / 2**20
    return total, out


def spec_file(work: Path, steps: int, warm: bool) -> Path:
    (work / "state").mkdir(exist_ok=True)
    spec = work / "cluster.yaml"
    spec.write_text(
        f"name: bench\nstrategy: multi_worker_mirrored\n"
        f"entrypoint: [{sys.executable}, {PLAIN}, --steps, '{steps}', --delay, '0', --state, {work / 'state'}]\n"
        f"tasks: {{worker: 2}}\nports: {{base: {free_base(8)}}}\n"
        f"env: {{TF_CPP_MIN_LOG_LEVEL: '2'}}\n"
        f"restart: {{max_restarts: 1{'' if warm else ', warm_standby: false'}}}\n")
    return spec


def trial(work: Path, steps: int, warm: bool, lab=None) -> dict:
    spec = spec_file(work, steps, warm) if lab is None else ssh_spec_file(work, steps, warm, lab)
    began = time.time()
    # (--verbose: the standbys' protocol in its lines as it came, their "ready" among it)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", "--plain", "--verbose", str(spec)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    peak = [0]
    where: list = [{}]  # (ssh) the peak's Pss by role
    done = threading.Event()

    def sample() -> None:
        run_id = None
        while not done.wait(0.2):
            latest = work / "runs" / "bench" / "latest"
            if run_id is None and latest.exists():
                run_id = latest.resolve().name
            if lab is not None:
                pids = [proc.pid] + hosts_pids(lab)
            else:
                pids = [proc.pid] + (pids_with_env("TFCLUSTER_RUN_ID", run_id) if run_id else [])
            now, roles = by_role(pids[1:]) if lab is not None else (pss_of(pids), {})
            if lab is not None:
                launcher = pss_of(pids[:1])
                now, roles = now + launcher, {**roles, "the launcher": launcher / 2**20}
            if now > peak[0]:
                peak[0], where[0] = now, roles

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join(5)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("run failed:\n" + "\n".join(l for _, l in lines[-30:]))
    first = {}
    w0 = []
    for at, line in lines:
        m = STEP.match(line)
        if m:
            first.setdefault(m.group(1), at)
            if m.group(1) == "worker:0" and int(m.group(2)) > 10:
                w0.append(at)
    return {"first_step": max(first.values()) - began, "pss_mb": peak[0] / 2**20,
            "cpu": usage.ru_utime + usage.ru_stime,
            "steps_per_s": (len(w0) - 1) / (w0[-1] - w0[0]) if len(w0) > 1 and w0[-1] > w0[0] else float("nan"),
            "ready": [line for _, line in lines if "tfcluster-standby ready" in line],
            "where": {k: round(v) for k, v in sorted(where[0].items())}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--backend", choices=("local", "ssh"), default="local")
    args = ap.parse_args()
    lab = None
    if args.backend == "ssh":
        from tests.labs.ssh import Lab, have_prereqs

        reason = have_prereqs()
        if reason:
            raise SystemExit(f"the ssh lab cannot start: {reason}")
        lab = Lab(Path(tempfile.mkdtemp(prefix="tfcluster-bench-standby-lab-")) / "lab", count=2).start()
        print(f"ssh lab, 2 hosts, one worker each: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    try:
        run(args, lab)
    finally:
        if lab is not None:
            lab.stop()


def run(args, lab) -> None:
    load = load_average()
    print(f"load before: {load}", flush=True)
    if float(load.split()[0]) > 3:
        print("warning: load above 3: these figures measure the other work as much as the standby", flush=True)
    got: dict[bool, list[dict]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-standby-") as tmp:
        for i in range(args.trials):
            for warm in (True, False):
                work = Path(tmp) / f"{i}-{'default' if warm else 'off'}"
                work.mkdir()
                res = trial(work, args.steps, warm, lab)
                got[warm].append(res)
                print(f"trial {i + 1} {'default' if warm else 'warm_standby: false':20s} first step {res['first_step']:.2f} s, "
                      f"peak PSS {res['pss_mb']:.0f} MiB, CPU {res['cpu']:.1f} s, {res['steps_per_s']:.1f} steps/s"
                      + "".join(f"\n    {r}" for r in res["ready"])
                      + (f"\n    at the peak, MiB of Pss: {res['where']}" if res["where"] else ""), flush=True)

    def med(warm: bool, key: str) -> float:
        return statistics.median(r[key] for r in got[warm])

    targets = (("first_step", "first step (s)", 1.10, "<="), ("pss_mb", "peak PSS (MiB)", 1.20, "<="),
               ("cpu", "CPU (s)", 1.15, "<="), ("steps_per_s", "steps/s", 0.97, ">="))
    if lab is not None:  # (the ssh targets; the hosts' CPU is not the launcher's children's)
        targets = (("first_step", "first step (s)", 1.00, "<="), ("pss_mb", "peak PSS summed over the hosts (MiB)", 1.10, "<="),
                   ("steps_per_s", "steps/s", 0.97, ">="))
    for key, word, target, better in targets:
        on, off = med(True, key), med(False, key)
        ratio = on / off if off else float("nan")
        met = ratio <= target if better == "<=" else ratio >= target
        print(f"median {word}: default {on:.2f}, warm_standby: false {off:.2f}; ratio {ratio:.2f} "
              f"(target {better} {target:.2f}: {'met' if met else 'not met'})")
    print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
