"""Do `logs TASK --attempt N` hold only attempt N's lines when tasks print at once, on a busy machine?

Tried as a user would: RUNS runs of `tfcluster up` with six local tasks (a plain script reading
TF_CONFIG, no TensorFlow) that each print LINES lines the moment they start; worker:2 kills itself
(SIGKILL) in its first attempt, so every run has two attempts. After each run, every task's
`tfcluster logs worker:K --attempt 1|2` is compared with what that attempt printed: only its own
lines, in order, and the last attempt's complete (a first attempt stopped by its peer's death may
have printed fewer). With
`--hogs N`, N busy loops run at a higher priority than tfcluster for the whole time (the load
that opened the window: a task's lines written before its attempt's offset was read).

    python bench/attempt_logs.py --runs 12 --hogs 2

Prints one line per run and the total of wrong attempt ranges (0 is the only passing figure), and
the load average met. Exit 1 if any range was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.ports import free_base  # noqa: E402  (a random base: other suites take ports near ours)

TASK = textwrap.dedent("""\
    import json, os, sys
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    attempt = int(os.environ["TFCLUSTER_RESTART_COUNT"])
    for i in range(LINES):
        print(f"attempt {attempt} line {i}", flush=True)
    if index == 2 and attempt == 0:
        os.kill(os.getpid(), 9)
""")


def tfcluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=300)


def one_run(directory: Path, lines: int) -> tuple[int, int]:
    """(wrong attempt ranges, ranges checked) of one `up`."""
    (directory / "task.py").write_text(TASK.replace("LINES", str(lines)))
    spec = directory / "cluster.yaml"
    spec.write_text(f"name: t\nstrategy: multi_worker_mirrored\nentrypoint: [{json.dumps(sys.executable)}, task.py]\n"
                    f"tasks: {{worker: 6}}\nports: {{base: {free_base(6)}}}\nrestart: {{max_restarts: 1, backoff: 0}}\n"
                    "watchdog: {stop_grace: 1}\n")
    up = tfcluster("up", str(spec), "--plain")
    if up.returncode != 0:
        raise SystemExit(f"up failed (exit {up.returncode}): {up.stderr.strip().splitlines()[-1:]}")
    wrong = checked = 0
    for k in range(6):
        for attempt in (1, 2):
            res = tfcluster("logs", str(spec), f"worker:{k}", "--attempt", str(attempt))
            got = res.stdout.splitlines()
            want = [f"attempt {attempt - 1} line {i}" for i in range(lines)]
            checked += 1
            # Only this attempt's lines, in order; the last attempt's complete. (The first attempt
            # of a task that its peer's death stopped early may have printed fewer, even none.)
            if got != (want if attempt == 2 else want[:len(got)]):
                wrong += 1
                print(f"  worker:{k} --attempt {attempt}: {len(got)} lines, first {got[:1]}, want {lines} of attempt "
                      f"{attempt - 1} (logs exit {res.returncode}: {res.stderr.strip()[-300:]})", file=sys.stderr)
                keep = Path(os.environ.get("ATTEMPT_LOGS_KEEP", "/tmp/attempt-logs-wrong"))
                if not keep.exists():  # the first wrong run's spec dir and record, to read after
                    shutil.copytree(directory, keep, symlinks=True)
                    (keep / "up.stderr").write_text(up.stderr)
    return wrong, checked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=0, help="busy loops at a higher priority (nice -5)")
    args = parser.parse_args()
    hogs = [subprocess.Popen(["nice", "-n", "-5", "sh", "-c", "while :; do :; done"]) for _ in range(args.hogs)]
    total_wrong = total = 0
    try:
        for i in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory() as d:
                wrong, checked = one_run(Path(d), args.lines)
            total_wrong += wrong
            total += checked
            print(f"run {i}: {wrong} of {checked} attempt ranges wrong; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for h in hogs:
            h.kill()
    load = os.getloadavg()
    print(f"attempt_logs: {total_wrong} of {total} attempt ranges wrong over {args.runs} runs "
          f"(--hogs {args.hogs}); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
