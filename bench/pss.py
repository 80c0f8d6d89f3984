#!/usr/bin/env python3
"""ParameterServerStrategy figures on this machine (1 chief, 2 workers, 1 ps, all local):

* training throughput (examples/s after the first step, from the chief's result line) of
  tf_keras ``model.fit`` with a DatasetCreator (steps_per_execution 1 and 10) vs the
  ClusterCoordinator custom loop;
* a worker's SIGKILL -> the coordinator noticing -> the launcher relaunching it -> its server
  listening again -> the coordinator reporting it recovered (rejoined), while training goes on.

    python bench/pss.py [--trials 2] [--steps 100] [--rejoin-only]

With the default ``restart.warm_standby`` (auto) the relaunch is worker:1's standby promoted, so
"server up" is a warm PSS worker's death -> serving again.
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

from benchlib import ROOT, write_spec
from tests.support.processes import task_pid
import launcher.record.events as ev
from launcher.record.reader import read_events

TIMEOUT = 400


def fields(line: str) -> dict:
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def lines(text: str, kind: str) -> list[dict]:
    return [fields(l) for l in text.splitlines() if l.startswith(f"tfcluster-{kind} ")]


def spec_file(work: Path, tfds: Path, entrypoint: str) -> Path:
    return write_spec(work, entrypoint, tfds, strategy="parameter_server", tasks="{chief: 1, worker: 2, ps: 1}",
                      extra="restart: {max_restarts: 2}\nwatchdog: {startup_timeout: 180, stop_grace: 3}\n")


def run(work: Path, tfds: Path, entrypoint: str, kill_at: int | None = None,
        warm: bool = False) -> tuple[Path, float | None]:
    """Run to the end; with ``kill_at``, SIGKILL worker:1 once the chief logs that global step."""
    work.mkdir()
    spec = spec_file(work, tfds, entrypoint)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    died = None
    try:
        if kill_at is not None:
            latest = work / "runs" / "bench" / "latest"
            end = time.monotonic() + TIMEOUT
            while time.monotonic() < end:
                log = latest / "logs" / "chief-0.progress"
                worker = latest / "logs" / "worker-1.progress"
                # Warm: worker:1's standby has said it is ready (it imports once the host idles, at
                # idle priority), so the figure is a ready standby's promotion, not its import.
                if (log.exists() and any(int(l.get("global_step", -1)) >= kill_at for l in lines(log.read_text(), "step"))
                        and (not warm or (worker.exists() and "tfcluster-standby ready" in worker.read_text()))):
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("training never reached the kill step")
            os.kill(task_pid(latest.resolve().name, "worker:1"), 9)
            died = time.time()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = (work / "runs" / "bench" / "latest").resolve()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}); see {run_dir}")
    return run_dir, died


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100, help="steps per epoch (2 epochs) for the throughput runs")
    ap.add_argument("--rejoin-only", action="store_true", help="only the death -> rejoined figures")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfcluster-bench-pss-") as tmp:
        tmp = Path(tmp)
        tfds = tmp / "tfds"
        modes = {"fit": "--loop fit", "fit-spe10": "--loop fit --steps-per-execution 10", "custom": "--loop custom"}
        rates: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(0 if args.rejoin_only else args.trials):
            for loop, flags in modes.items():
                rd, _ = run(tmp / f"{loop}{i}", tfds, f"python -m worker {flags} --epochs 2 "
                            f"--steps-per-epoch {args.steps} --progress-every {args.steps}")
                (res,) = lines((rd / "logs" / "chief-0.progress").read_text(), "result")
                rates[loop].append(float(res["examples_per_sec"]))
                print(f"trial {i + 1} {loop:>9}: {res['examples_per_sec']} examples/s "
                      f"(global_step {res['global_step']}, test accuracy {res['accuracy']})", flush=True)
        rejoin = []
        for i in range(args.trials):
            rd, died = run(tmp / f"kill{i}", tfds, "python -m worker --epochs 2 --steps-per-epoch 150 "
                           "--step-delay 0.2 --progress-every 1", kill_at=15 + 5 * i, warm=True)
            chief = (rd / "logs" / "chief-0.progress").read_text()
            events = read_events(rd, strict=True)
            relaunched = max(e["time"] for e in events if isinstance(e, ev.Start) and e["task"] == "worker:1")
            server = float(lines((rd / "logs" / "worker-1.progress").read_text(), "server")[-1]["time"])
            lost = float(lines(chief, "worker_lost")[0]["time"])
            back = float(lines(chief, "worker_recovered")[0]["time"])
            (res,) = lines(chief, "result")
            r = {"noticed": lost - died, "relaunch": relaunched - died, "server": server - died, "rejoin": back - died}
            rejoin.append(r)
            promoted = any(isinstance(e, ev.StandbyPromoted) and "worker:1" in str(e) for e in events)
            print(f"trial {i + 1} SIGKILL worker:1 ({'its standby promoted' if promoted else 'cold'}): coordinator noticed {r['noticed']:.2f} s, relaunched "
                  f"{r['relaunch']:.2f} s, server up {r['server']:.2f} s, rejoined {r['rejoin']:.2f} s after death; "
                  f"training completed at global_step {res['global_step']} (of 300)", flush=True)
        med = statistics.median
        if not args.rejoin_only:
            print("median examples/s: " + ", ".join(f"{m} {med(r):.1f}" for m, r in rates.items())
                  + f" (custom/fit {med(rates['custom']) / med(rates['fit']):.2f}x)")
        print("median after a PSS worker's death: " + ", ".join(
            f"{k} {med(r[k] for r in rejoin):.2f} s" for k in ("noticed", "relaunch", "server", "rejoin")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
