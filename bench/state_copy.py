#!/usr/bin/env python3
"""Cost of ``state.sync: copy`` on the ssh lab (tests/labs/ssh.py), whose hosts
each have a private tmpfs state dir like VMs with their own disks. Needs root (tests/setup/ssh.sh).

1. Copy throughput: a synthetic backup of --mb MB (random bytes, a TF-like ``checkpoint`` state
   file + ``.index`` + ``.data``) on h1, copied by the launcher's own code (``StateSync._copy``:
   pack on h1, relay, verified unpack) to 1 and to 2 other hosts; seconds per 100 MB.
2. Restart, copy vs shared: 2-worker MWMS (h1, h2), worker:1 SIGKILLed at a step; death ->
   first training step of the restarted group (the later of the two workers), and the copy's
   own seconds from the run record.

    sudo python3 bench/state_copy.py [--mb 100] [--repeat 3] [--trials 1]
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

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.backends.ssh.backend import SSHBackend  # noqa: E402
from launcher.app.up import plan_for  # noqa: E402
from launcher.remote.statesync import LATEST  # noqa: E402
from launcher.loader.load import load_spec  # noqa: E402
import launcher.record.events as ev  # noqa: E402
from launcher.record.reader import read_events  # noqa: E402
from tests.labs.ssh import Lab, have_prereqs  # noqa: E402

PY = sys.executable
TIMEOUT = 300
FIRST = re.compile(r"\[(worker:\d)\] tfcluster-first_step .*time=([0-9.]+)")


def write_spec(lab: Lab, work: Path, entrypoint: list[str], state: dict, hosts=("h1", "h2")) -> Path:
    spec = {
        "name": "bench", "strategy": "multi_worker_mirrored", "backend": "ssh", "entrypoint": entrypoint,
        "hosts": lab.hosts_yaml(list(hosts)), "tasks": {"worker": len(hosts)}, "ports": {"base": 23456},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}, "restart": {"max_restarts": 1},
        "watchdog": {"startup_timeout": 120, "stop_grace": 2},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": PY, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "require": [], "connect_timeout": 5},
        "state": state,
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def copy_throughput(lab: Lab, work: Path, mb: int, repeat: int) -> dict:
    state = str(lab.private / "tput" / "state")
    chief = f"{state}/backup/chief"
    lab.host("h1").exec_private("sh", "-c", f"mkdir -p {chief} && cd {chief} && "
                                f"head -c {mb * 1000000} /dev/urandom > ckpt-1.data-00000-of-00001 && "
                                "echo i > ckpt-1.index && echo 'model_checkpoint_path: \"ckpt-1\"' > checkpoint",
                                timeout=120)
    spec = write_spec(lab, work, [PY, "-c", "pass"], {"dir": state, "sync": "copy"}, hosts=("h1", "h2", "h3"))
    loaded = load_spec(spec)
    backend = SSHBackend.from_spec(loaded)
    out = {}
    try:
        backend.hosts.probe(plan_for(loaded.spec))
        areas = [LATEST + "backup"]
        for targets in (["h2"], ["h2", "h3"]):
            times = []
            for _ in range(repeat):
                t0 = time.monotonic()
                size = backend.hosts.run.state_sync._copy("h1", targets, areas)
                times.append(time.monotonic() - t0)
            med = statistics.median(times)
            out[len(targets)] = {"bytes": size, "seconds": round(med, 3),
                                 "s_per_100MB": round(med / (size / 1e8), 3),
                                 "MB_per_s_total": round(size * len(targets) / 1e6 / med, 1)}
    finally:
        backend.close()
        for h in ("h1", "h2", "h3"):
            lab.host(h).exec_private("rm", "-rf", str(lab.private / "tput"), check=False)
    return out


def restart_trial(lab: Lab, work: Path, state: dict, kill_step: int = 8) -> dict:
    spec = write_spec(lab, work, [PY, "-m", "worker", "--epochs", "1", "--steps-per-epoch", "16",
                                  "--step-delay", "0.2", "--save-freq", "4", "--progress-every", "1"], state)
    # (--verbose: the tasks' records in its lines as they came: the steps and first steps read below)
    proc = subprocess.Popen([PY, "-m", "launcher", "up", "--verbose", str(spec)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    killed_at = None
    try:
        end = time.monotonic() + TIMEOUT
        for line in proc.stdout:
            lines.append(line)
            if killed_at is None and f"[worker:1] tfcluster-step epoch=0 step={kill_step} " in line:
                pids = {}
                for pf in (work / "remote" / "bench").glob("*/pids/worker-1.0.pid"):
                    pids[pf] = int(pf.read_text().split()[1])
                os.kill(next(iter(pids.values())), signal.SIGKILL)
                killed_at = time.time()
            if time.monotonic() > end:
                raise SystemExit("restart trial timed out")
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if proc.returncode != 0 or killed_at is None:
        raise SystemExit("restart trial failed:\n" + "".join(lines[-30:]))
    firsts = [(k, float(t)) for k, t in FIRST.findall("".join(lines)) if float(t) > killed_at]
    first = max(t for _, t in firsts)
    events = read_events(work / "runs" / "bench" / "latest", strict=True)
    copies = [e for e in events if isinstance(e, ev.StateCopy) and e["attempt"] == 1]
    return {"death_to_first_step": round(first - killed_at, 2),
            "copy_seconds": copies[0]["seconds"] if copies else 0.0,
            "copy_bytes": copies[0]["bytes"] if copies else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, default=1)
    args = ap.parse_args()
    reason = have_prereqs()
    if reason:
        print(f"state_copy: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="tfcs-bench-state-"))
    lab = Lab(root, count=3, private=root / "private", private_size=f"{3 * args.mb + 64}m")
    try:
        lab.start()
        tput = copy_throughput(lab, root / "tput", args.mb, args.repeat)
        for n, row in tput.items():
            print(f"copy {row['bytes'] / 1e6:.0f} MB to {n} host(s): {row['seconds']:.2f} s "
                  f"({row['s_per_100MB']:.2f} s per 100 MB of backup, {row['MB_per_s_total']} MB/s written in all)")
        for mode, state in (("shared", {"dir": str(root / "shared-state"), "sync": "shared"}),
                            ("copy", {"dir": str(lab.private / "restart" / "state"), "sync": "copy"})):
            rows = [restart_trial(lab, root / f"{mode}-{i}", state) for i in range(args.trials)]
            med = statistics.median(r["death_to_first_step"] for r in rows)
            print(f"restart ({mode}): death -> first step {med:.2f} s; copy {rows[0]['copy_seconds']:.2f} s of "
                  f"{rows[0]['copy_bytes'] / 1e6:.2f} MB  {rows}")
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
