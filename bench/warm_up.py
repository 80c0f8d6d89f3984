#!/usr/bin/env python3
"""A second `up` on warm hosts (``ssh.keep_warm``): `tfcluster up` -> both workers' first step on 2
hosts of the ssh lab (tests/labs/ssh.py: network namespaces with an sshd each, this machine's
CPUs), one worker a host, a user's plain TF_CONFIG script (tests/support/plain_tf_config.py, 20
steps), alternated:

* ``default``: the spec as it is: each host's fork server starts with the run and imports
  TensorFlow while the preflight goes on;
* ``keep_warm``: the same spec with ``ssh: {keep_warm: 300}``, run right after another run of
  it: each host's server is the one the previous run kept warm (its lines must say so, for both
  hosts: else the trial fails).

A first ``keep_warm`` run, not counted, makes the servers the first counted one adopts. Medians at
the end, with the load average before and after; the machine must be otherwise quiet. The warm
servers are killed at the end.

    python bench/warm_up.py [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, load_average
from tests.support.ssh_helpers import pids_in_netns

PLAIN = ROOT / "tests" / "support" / "plain_tf_config.py"
STEP = re.compile(r"^\[(worker:\d)\] plain-step \d+ ")
ADOPTED = re.compile(r"^tfcluster: (h\d): forking from the fork server an earlier run kept warm \(pid \d+\)")
KEEP = 300


def spec_file(work: Path, lab, keep: int) -> Path:
    import yaml

    (work / "state").mkdir(exist_ok=True)
    ssh = {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work.parent / "remote"),
           "workdir": str(ROOT), "lease": 10, "connect_timeout": 10, "require": []}
    spec = {
        "name": "bench", "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, str(PLAIN), "--steps", "20", "--delay", "0", "--state", str(work / "state")],
        "hosts": lab.hosts_yaml(["h1", "h2"]), "tasks": {"worker": 2}, "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "watchdog": {"startup_timeout": 600, "stop_grace": 5}, "restart": {"max_restarts": 0},
        "ssh": {**ssh, "keep_warm": keep} if keep else ssh,
    }
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def trial(work: Path, lab, keep: int) -> dict:
    spec = spec_file(work, lab, keep)
    began = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", "--plain", str(spec)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.time(), line.rstrip("\n")) for line in proc.stdout]
    if proc.wait() != 0:
        raise SystemExit("run failed:\n" + "\n".join(l for _, l in lines[-30:]))
    first: dict[str, float] = {}
    for at, line in lines:
        m = STEP.match(line)
        if m:
            first.setdefault(m.group(1), at)
    adopted = sorted({m.group(1) for _, l in lines for m in [ADOPTED.match(l)] if m})
    return {"first_step": max(first.values()) - began, "adopted": adopted}


def kill_servers(lab) -> None:
    for h in lab.hosts:
        for pid in pids_in_netns(h):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"tfcluster-warm-" in cmd and b"zygote.py" in cmd:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                words = cmd.split(b"\0")
                if b"--socket" in words:  # (killed: its dir is not removed by it)
                    shutil.rmtree(os.path.dirname(words[words.index(b"--socket") + 1].decode()), ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    from tests.labs.ssh import Lab, have_prereqs

    reason = have_prereqs()
    if reason:
        raise SystemExit(f"the ssh lab cannot start: {reason}")
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-bench-warmup-"))
    lab = Lab(tmp / "lab", count=2).start()
    print(f"ssh lab, 2 hosts, one worker each: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average "
          f"{load_average()}", flush=True)
    rows: dict[str, list[dict]] = {"default": [], "keep_warm": []}
    try:
        (tmp / "prime").mkdir()
        prime = trial(tmp / "prime", lab, KEEP)
        print(f"first keep_warm run (its servers import; not counted): {prime['first_step']:.2f} s", flush=True)
        for i in range(args.trials):
            for arm, keep in (("default", 0), ("keep_warm", KEEP)):
                work = tmp / f"{arm}{i}"
                work.mkdir()
                r = trial(work, lab, keep)
                if (arm == "keep_warm") != (r["adopted"] == ["h1", "h2"]) or (arm == "default" and r["adopted"]):
                    raise SystemExit(f"{arm} trial {i + 1}: hosts that adopted a warm server: {r['adopted']}")
                rows[arm].append(r)
                print(f"trial {i + 1} {arm:9s}: up -> both first steps {r['first_step']:.2f} s "
                      f"(load {load_average()})", flush=True)
        med = {arm: statistics.median(r["first_step"] for r in rows[arm]) for arm in rows}
        each = {arm: ", ".join(f"{r['first_step']:.2f}" for r in rows[arm]) for arm in rows}
        print(f"median up -> both first steps: default {med['default']:.2f} s ({each['default']}), keep_warm "
              f"(second up) {med['keep_warm']:.2f} s ({each['keep_warm']}): {med['keep_warm'] / med['default']:.2f}x; "
              f"load average now {load_average()}")
    finally:
        kill_servers(lab)
        lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
