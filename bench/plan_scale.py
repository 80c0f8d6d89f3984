#!/usr/bin/env python3
"""What planning costs at 1,000 and 10,000 tasks: each command runs as a whole
in a fresh process (``python -m launcher ...``), timed from outside, its peak memory from
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a one-command wrapper, its output's bytes
counted. The commands alternate within each trial; the table shows every trial's figures and
the medians, with the load average before and after (a busy 2-core machine moves them a lot).

Measured:

- ``plan`` and ``plan --json=compact`` of an ssh spec with 4 tasks per host (n/4 hosts, one
  worker group on the shared cursor). Planning an ssh spec touches no host.
- ``up --dry-run`` of a local spec with n workers on n consecutive free ports of this machine:
  the same plan, the local backend's preflight (every port bound once to see it is free, the
  command found) and the printed plan; nothing starts. (An ssh dry run would connect to every
  host; a local one plans the same n tasks without hosts.)
- ``--baseline DIR``: the same commands from another checkout of the project (e.g. ``git archive
  REV | tar -x -C DIR``), alternating with this one, at the sizes up to ``--baseline-max``; a
  checkout from before ``--json=compact`` runs ``plan --json`` in its place.
- ``--layouts 1-per-host,group-hosts``: ``plan`` of n tasks on n hosts, and on n/4 hosts that the
  worker group lists (what the spec path does per host and per listed host).

    python bench/plan_scale.py [--tasks 1000,10000] [--repeat 3] [--layouts 4-per-host,...]
                               [--baseline DIR --baseline-max 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT

from launcher.contract.portcheck import port_bind_problem as port_problem

TIMEOUT = 1800
PER_HOST = 4


LAYOUTS = ("4-per-host", "1-per-host", "group-hosts")


def ssh_spec(work: Path, n: int, layout: str = "4-per-host") -> Path:
    """n workers over ssh hosts: ``4-per-host`` (n/4 hosts, the shared cursor), ``1-per-host`` (n
    hosts) or ``group-hosts`` (n/4 hosts that the worker group lists as its own ``hosts``)."""
    count = n if layout == "1-per-host" else n // PER_HOST
    hosts = "\n".join(f"  - {{name: h{i}, address: 10.{i // 65536}.{i // 256 % 256}.{i % 256}, user: u}}"
                      for i in range(count))
    workers = (f"{{count: {n}, hosts: [{', '.join(f'h{i}' for i in range(count))}]}}" if layout == "group-hosts"
               else str(n))
    path = work / f"ssh{n}-{layout}.yaml"
    path.write_text(f"name: scale\nstrategy: multi_worker_mirrored\nbackend: ssh\nentrypoint: python -m worker\n"
                    f"tasks:\n  worker: {workers}\nports: {{base: 23456}}\n"
                    f"env: {{TF_CPP_MIN_LOG_LEVEL: '2', API_TOKEN: x}}\nhosts:\n{hosts}\n")
    return path


def free_run(n: int) -> int:
    """A base port with n free ports above it (below the ephemeral range first)."""
    for base in (20000, 10000, 30000, 40000, 50000):
        if base + n <= 65536 and not any(port_problem(p) for p in range(base, base + n)):
            return base
    raise SystemExit(f"no {n} consecutive free ports found")


def local_spec(work: Path, n: int) -> Path:
    path = work / f"local{n}.yaml"
    path.write_text(f"name: scale-local\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\n"
                    f"tasks: {{worker: {n}}}\nports: {{base: {free_run(n)}}}\nrun_dir: {work / 'runs'}\n")
    return path


def measure(root: Path, argv: list[str], out: Path) -> tuple[float, int, int, int]:
    """(seconds, peak RSS in MB, bytes printed, exit code) of ``python -m launcher ARGV`` run from ``root``."""
    code = ("import resource, subprocess, sys, time\n"
            "with open(sys.argv[1], 'wb') as out:\n"
            "    t = time.monotonic()\n"
            "    p = subprocess.run([sys.executable, '-m', 'launcher', *sys.argv[2:]], stdout=out, "
            "stderr=subprocess.DEVNULL, timeout=%d)\n"
            "    print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)"
            % TIMEOUT)
    env = {**os.environ, "PYTHONPATH": str(root)}
    head = subprocess.run([sys.executable, "-c", code, str(out), *argv], capture_output=True, text=True,
                          timeout=TIMEOUT + 60, cwd=root, env=env, check=True).stdout
    seconds, rss_kb, rc = head.split()
    size = out.stat().st_size
    out.unlink()
    return float(seconds), int(rss_kb) // 1024, size, int(rc)


def has_compact(root: Path) -> bool:
    return "to_compact_json" in (root / "launcher" / "plan.py").read_text()


def commands(root: Path, work: Path, n: int, layouts: list[str]) -> list[tuple[str, list[str]]]:
    """The 4-per-host layout's plan, plan --json=compact and the local up --dry-run; the other
    layouts' plan (they differ in the spec path only: placement, the host checks)."""
    out = []
    for layout in layouts:
        ssh = ssh_spec(work, n, layout)
        if layout != "4-per-host":
            out.append((f"plan ({layout})", ["plan", str(ssh)]))
            continue
        json_form = "--json=compact" if has_compact(root) else "--json"
        out += [("plan", ["plan", str(ssh)]), (f"plan {json_form}", ["plan", str(ssh), json_form]),
                ("up --dry-run (local)", ["up", str(local_spec(work, n)), "--dry-run", "--plain"])]
    return out


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__().replace("'", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="1000,10000", help="comma-separated task counts")
    ap.add_argument("--repeat", type=int, default=3, help="trials per command (medians)")
    ap.add_argument("--baseline", type=Path, help="another checkout to measure alternately (before/after)")
    ap.add_argument("--baseline-max", type=int, default=1000, help="largest task count to run the baseline at")
    ap.add_argument("--layouts", default="4-per-host",
                    help=f"comma-separated ssh layouts of the n tasks, of {', '.join(LAYOUTS)} (default 4-per-host: "
                         "plan, plan --json=compact and the local up --dry-run; the others: plan)")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    if set(layouts) - set(LAYOUTS):
        ap.error(f"--layouts: one of {', '.join(LAYOUTS)}")
    roots = [("this", ROOT)]
    if args.baseline:
        roots.append(("baseline", args.baseline.resolve()))
    print(f"load average at start: {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="plan-scale-") as tmp:
        work = Path(tmp)
        for n in (int(x) for x in args.tasks.split(",")):
            runs = [(label, root, name, argv) for label, root in roots
                    if label == "this" or n <= args.baseline_max for name, argv in commands(root, work, n, layouts)]
            figures: dict[tuple[str, str], list[tuple[float, int, int, int]]] = {(r[0], r[2]): [] for r in runs}
            for trial in range(args.repeat):
                for label, root, name, argv in runs:  # alternating: a load spike hits every command alike
                    got = measure(root, argv, work / "out")
                    figures[(label, name)].append(got)
                    print(f"n={n} trial {trial + 1} {label:8} {name:24} {got[0]:7.2f} s {got[1]:6d} MB "
                          f"{got[2] / 1e6:9.2f} MB printed  exit {got[3]}  (load {loadavg()})", flush=True)
            print(f"\n| tasks | checkout | command | wall s (trials) | median s | peak MB (median) | printed MB |")
            print("|---:|---|---|---|---:|---:|---:|")
            for (label, name), got in figures.items():
                secs = [g[0] for g in got]
                print(f"| {n:,} | {label} | `{name}` | {', '.join(f'{s:.2f}' for s in secs)} | "
                      f"**{statistics.median(secs):.2f}** | {statistics.median(g[1] for g in got):.0f} | "
                      f"{got[0][2] / 1e6:.2f} |")
            print(flush=True)
    print(f"load average at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
