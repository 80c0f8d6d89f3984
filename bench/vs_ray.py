#!/usr/bin/env python3
"""tfcluster against Ray Train on the same user's script: bench/plain_keras.py (MultiWorkerMirroredStrategy
from TF_CONFIG, a Keras ``fit``, not one line for either launcher), 2 CPU workers on this machine,
run (a) by ``tfcluster up`` on the local backend (the default spec: warm standbys on, with
``restart: {max_restarts: 1}``) and (b) by Ray Train's ``TensorflowTrainer`` (ScalingConfig(num_workers=2,
use_gpu=False), FailureConfig(max_failures=1), Ray's own ``ray.init()`` on this machine), whose function
of each worker runs the script itself (Ray sets TF_CONFIG). The sides alternate, one run each a trial;
each run trains until worker:1 has stepped ``--kill-after`` seconds and the side has been settled
for ``--window`` seconds (tfcluster: since both standbys said they are ready; Ray: all along), then
worker:1's process is SIGKILLed and the run restarts the group, trains
``--after-steps`` more steps and ends. Per run, from the marks the script writes (each start and
step with its time, to a file: the same clock for both sides, whatever their logs' delays):

* start: the command's start -> both workers' first step;
* peak RSS: the largest sum of Rss over every process of the side, sampled every 0.2 s from
  /proc (tfcluster: ``up``, the task wrappers, the tasks, the standbys; Ray: the driver, gcs_server,
  raylet, Ray's agents, the Train controller and its helper actors, the workers), found by a variable in
  their environment (inherited from the command); the largest sum of Pss beside it;
* throughput: worker:0's examples/s (global batch 64 a step) over the last ``--window`` seconds
  before the kill (the criterion's), and from its 10th step to the kill beside it (tfcluster's
  standbys importing TensorFlow inside it);
* recovery: the SIGKILL -> worker:1's first step again (and both workers', the group's).

Every process of a side must be gone once its command exits (``ray.shutdown()`` in Ray's driver):
what is left after 30 s is killed and fails the benchmark. Medians of ``--trials``, the load
average before and after each run, and the ratios against the criteria (the warm-hosts round's):
start >= 6x, recovery >= 10x, peak RSS >= 3x less, throughput >= 1.1x Ray's.

    python bench/vs_ray.py [--trials 3] [--kill-after 40] [--window 15] [--after-steps 300] [--keep]
                           [--tfcluster-python PYTHON]

Ray is a benchmark-only dependency, not tfcluster's: ``pip install "ray[train]==2.60.0"``. Both
sides run in that environment by default; ``--tfcluster-python`` runs tfcluster's side in
another's (a virtualenv of tfcluster[tf] alone, as its user installs it: Ray's own dependencies
then cost only Ray's side, e.g. pandas and pyarrow, which tf_keras imports where they are
installed). The first line says what each side's environment has.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchlib import ROOT, Background, BackgroundUp, load_average, memory_of, write_spec
from tests.support.processes import pids_with_env

SCRIPT = ROOT / "bench" / "plain_keras.py"
WORKERS = 2
BATCH = 64
STEADY_FROM = 10  # worker:0's step from which throughput is counted (tracing and connecting left out)
RAY = "2.60.0"
INSTALL = f'pip install "ray[train]=={RAY}"'
MARK = "TFCLUSTER_VS_RAY"  # in every process of a side's environment: how the sampler finds them
TIMEOUT = 400
MARK_LINE = re.compile(r"(start pid=|step )(\d+) time=([0-9.]+)")


def ray_missing() -> str | None:
    """Why Ray Train cannot run here (with the one line that installs it), or None."""
    try:
        version = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return f"Ray is not installed: {INSTALL} (a benchmark-only dependency, not tfcluster's)"
    if version != RAY:
        print(f"warning: Ray {version} here; the figures were taken with {RAY} ({INSTALL})", flush=True)
    return None


def versions(python: str) -> str:
    """What ``python``'s environment has of the packages a TensorFlow process here may import
    (tf_keras imports pandas, and with it pyarrow, where it is installed; ray[train] requires both)."""
    code = ("import importlib.metadata as m\n"
            "def v(n):\n"
            "    try:\n"
            "        return m.version(n)\n"
            "    except m.PackageNotFoundError:\n"
            "        return '-'\n"
            "print(' '.join(f'{n} {v(n)}' for n in ('tensorflow', 'tf_keras', 'pandas', 'pyarrow', 'scikit-learn', 'ray')))")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()


def script_argv(work: Path) -> list[str]:
    """The script and its arguments, the same on both sides."""
    return [str(SCRIPT), "--steps", f"@{work / 'steps'}", "--marks", str(work / "marks"), "--batch", str(BATCH)]


def attempts(work: Path, index: int) -> list[dict]:
    """worker:INDEX's starts, in order, each ``{"pid", "start", "steps": [(step, time)]}``."""
    try:
        text = (work / "marks" / f"worker-{index}.txt").read_text()
    except FileNotFoundError:
        return []
    out: list[dict] = []
    for line in text.splitlines(keepends=True):
        m = MARK_LINE.fullmatch(line.rstrip("\n"))
        if not m or not line.endswith("\n"):
            continue
        if m.group(1) == "start pid=":
            out.append({"pid": int(m.group(2)), "start": float(m.group(3)), "steps": []})
        elif out:
            out[-1]["steps"].append((int(m.group(2)), float(m.group(3))))
    return out


def first_steps(work: Path, after: float) -> list[float] | None:
    """Each worker's first step in a start after ``after``, or None until both have one."""
    firsts = []
    for index in range(WORKERS):
        times = [a["steps"][0][1] for a in attempts(work, index) if a["start"] > after and a["steps"]]
        if not times:
            return None
        firsts.append(times[0])
    return firsts


def wait_for(run: Background, what: str, check, timeout: float = TIMEOUT):
    """``check()``'s first true answer, polled every 0.05 s; fails, with the run's last lines, when
    the run ends or ``timeout`` passes first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        if not run.running():
            break
        time.sleep(0.05)
    tail = "\n".join(line for _, line in run.lines[-40:])
    why = f"the command ended (exit {run.proc.poll()})" if not run.running() else f"not within {timeout} s"
    raise RuntimeError(f"{what}: {why}; last lines:\n{tail}")


class Tfcluster:
    """``tfcluster up`` of the script on the local backend."""

    name = "tfcluster"

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python  # its `up` and its tasks' interpreter (--tfcluster-python)

    def launch(self, work: Path, env: dict) -> Background:
        entry = json.dumps([self.python, *script_argv(work)])
        spec = write_spec(work, entry, work / "tfds", tasks=f"{{worker: {WORKERS}}}",
                          extra="restart: {max_restarts: 1}\nwatchdog: {startup_timeout: 180, stop_grace: 5}\n")
        return BackgroundUp(spec, env, self.python)

    def ready(self, run: Background) -> float | None:
        """When both standbys had said they are ready (the default's settled state, in which the
        kill lands), or None before."""
        said = [at for at, line in list(run.lines) if "(standby) tfcluster-standby ready" in line]
        return max(said) if len(said) >= WORKERS else None

    def succeeded(self, run: Background) -> bool:
        return any("run succeeded after 2 attempt(s)" in line for _, line in run.lines)


class Ray:
    """Ray Train's TensorflowTrainer of the script, from a driver of its own (this file, ``--ray-driver``)."""

    name = "ray"

    def launch(self, work: Path, env: dict) -> Background:
        return Background([sys.executable, str(Path(__file__).resolve()), "--ray-driver", str(work)], env)

    def ready(self, run: Background) -> float | None:
        return 0.0  # nothing of Ray's own starts after the workers

    def succeeded(self, run: Background) -> bool:
        return any(line == "ray-driver done error=None" for _, line in run.lines)


def run_script(config: dict) -> None:
    """Ray Train's function of each worker: the script itself, as ``python SCRIPT ARGS`` runs it
    (Ray has set TF_CONFIG for this worker)."""
    import runpy

    sys.argv = list(config["argv"])
    runpy.run_path(sys.argv[0], run_name="__main__")


def ray_driver(work: Path) -> None:
    """The Ray side's command: a local Ray cluster, the trainer's run to its end, Ray shut down."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    ray.init(_temp_dir=str(work / "ray"))
    try:
        trainer = TensorflowTrainer(
            run_script, train_loop_config={"argv": script_argv(work)},
            scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False),
            run_config=RunConfig(name="vs-ray", storage_path=str(work / "ray_results"),
                                 failure_config=FailureConfig(max_failures=1)))
        result = trainer.fit()
        print(f"ray-driver done error={result.error!r}", flush=True)
    finally:
        ray.shutdown()


class Sampler(threading.Thread):
    """The peak sums of Rss and Pss over the command and every process with ``MARK=tag``."""

    def __init__(self, root: int, tag: str) -> None:
        super().__init__(daemon=True)
        self.root, self.tag, self.done = root, tag, threading.Event()
        self.rss = self.pss = self.processes = 0
        self.at_peak: list[str] = []  # each process at the Rss peak: "RSS_MiB pid comm"

    def run(self) -> None:
        while not self.done.wait(0.2):
            pids = set(pids_with_env(MARK, self.tag)) | {self.root}
            rss, pss = memory_of(pids)
            if rss > self.rss:
                self.at_peak = [f"{memory_of([pid])[0] / 2**20:6.0f} {pid} {comm(pid)}" for pid in sorted(pids)]
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            self.processes = max(self.processes, len(pids))

    def stop(self) -> None:
        self.done.set()
        self.join(10)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "(gone)"


def leftovers(tag: str, grace: float = 30) -> list[str]:
    """The side's processes still alive ``grace`` s after its command ended, each SIGKILLed and
    named (``pid comm``)."""
    end = time.monotonic() + grace
    while (pids := pids_with_env(MARK, tag)) and time.monotonic() < end:
        time.sleep(0.2)
    named = []
    for pid in pids:
        named.append(f"{pid} {comm(pid)}")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return named


def measure(side, run: Background, work: Path, began: float, args) -> dict:
    """Start, throughput and recovery of one run, from its marks; the kill is this function's."""
    start = max(wait_for(run, "both workers' first step", lambda: first_steps(work, began))) - began

    def trained() -> bool:
        first, ready = attempts(work, 1)[0]["steps"], side.ready(run)
        return (first[-1][1] - first[0][1] >= args.kill_after and ready is not None
                and time.time() - ready >= args.window)

    wait_for(run, f"worker:1 stepping for {args.kill_after} s, {args.window} s after {side.name} settled", trained)
    (work / "steps").write_text(str(args.after_steps))  # what the restarted script trains, then ends
    load = load_average()
    os.kill(attempts(work, 1)[0]["pid"], signal.SIGKILL)
    died = time.time()
    again = wait_for(run, "both workers' first step after the kill", lambda: first_steps(work, died))
    steps = [(n, t) for n, t in attempts(work, 0)[0]["steps"] if n >= STEADY_FROM and t < died]
    return {"start": start, "examples_s": rate([s for s in steps if s[1] >= died - args.window]),
            "examples_s_all": rate(steps), "recovery": again[1] - died, "group": max(again) - died,
            "load_kill": load}


def rate(steps: list[tuple[int, float]]) -> float:
    """Examples/s over ``steps`` (step, time), from the first to the last."""
    (n0, t0), (n1, t1) = steps[0], steps[-1]
    return (n1 - n0) * BATCH / (t1 - t0)


def trial(side, work: Path, args) -> dict:
    """One run of ``side``: its figures, or an error naming what failed and where the files are."""
    (work / "marks").mkdir(parents=True)
    (work / "steps").write_text("1000000")  # until the kill
    tag = f"{work.name}-{os.getpid()}"
    env = {**os.environ, MARK: tag, "TF_CPP_MIN_LOG_LEVEL": "2", "RAY_USAGE_STATS_ENABLED": "0"}
    before = load_average()
    began = time.time()
    run = side.launch(work, env)
    sampler = Sampler(run.proc.pid, tag)
    sampler.start()
    try:
        got = measure(side, run, work, began, args)
        code = run.finish(TIMEOUT)
    except RuntimeError as e:
        raise SystemExit(f"{side.name}: {e}\nits files: {work}") from None
    finally:
        sampler.stop()
        if run.running():
            os.killpg(run.proc.pid, signal.SIGKILL)
        left = leftovers(tag)
        if left:
            print(f"{side.name} left {len(left)} processes after its command ended (killed now): {', '.join(left)}")
        (work / "lines.txt").write_text("".join(f"{t - began:9.3f} {line}\n" for t, line in run.lines))
        (work / "peak.txt").write_text("".join(f"{row}\n" for row in sampler.at_peak))
    if left:
        raise SystemExit(f"{side.name} left processes behind: a bug of this benchmark or of {side.name}; see {work}")
    if code != 0 or not side.succeeded(run):
        raise SystemExit(f"{side.name} run failed (exit {code}) or did not restart once; see {work}/lines.txt")
    return {**got, "rss": sampler.rss / 2**20, "pss": sampler.pss / 2**20, "processes": sampler.processes,
            "load": f"{before} -> {load_average()}", "seconds": time.time() - began}


def report(rows: dict[str, list[dict]]) -> None:
    """Medians (ranges) of each side, and the ratios against the criteria."""
    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[name])

    def span(name: str, key: str, fmt: str) -> str:
        values = [r[key] for r in rows[name]]
        return f"{med(name, key):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    for key, word, fmt in (("start", "start -> both first steps (s)", ".2f"), ("rss", "peak RSS sum (MiB)", ".0f"),
                           ("pss", "peak PSS sum (MiB)", ".0f"),
                           ("examples_s", "examples/s, the last --window s before the kill", ".0f"),
                           ("examples_s_all", "examples/s, from step 10 to the kill", ".0f"),
                           ("recovery", "kill -> worker:1's first step (s)", ".2f"),
                           ("group", "kill -> both workers' first step (s)", ".2f")):
        print(f"median {word}: tfcluster {span('tfcluster', key, fmt)}, Ray {span('ray', key, fmt)}")
    for key, word, target, ours_over_theirs in (("start", "start: Ray / tfcluster", 6.0, False),
                                                 ("recovery", "recovery: Ray / tfcluster", 10.0, False),
                                                 ("rss", "peak RSS sum: Ray / tfcluster", 3.0, False),
                                                 ("examples_s", "throughput: tfcluster / Ray", 1.1, True)):
        ours, theirs = med("tfcluster", key), med("ray", key)
        ratio = ours / theirs if ours_over_theirs else theirs / ours
        print(f"{word} {ratio:.2f} (criterion >= {target:g}: {'met' if ratio >= target else 'not met'})")


def main() -> int:
    ap = argparse.ArgumentParser(description="tfcluster against Ray Train on the same script (this file's docstring says what and how)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--kill-after", type=float, default=40.0,
                    help="seconds worker:1 steps before its kill (tfcluster's standbys wait up to 20 s, then import TensorFlow)")
    ap.add_argument("--window", type=float, default=15.0,
                    help="throughput over the last WINDOW s before the kill, each side settled (tfcluster: its standbys ready)")
    ap.add_argument("--after-steps", type=int, default=300, help="steps the restarted script trains before the run ends")
    ap.add_argument("--keep", action="store_true", help="keep each run's files (its lines, marks, processes at the peak)")
    ap.add_argument("--tfcluster-python", default=sys.executable,
                    help="tfcluster's side in this interpreter's environment (default: this one, Ray's too); "
                         "e.g. a virtualenv with tfcluster[tf] alone, as its user installs it")
    ap.add_argument("--ray-driver", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ray_driver:
        ray_driver(args.ray_driver)
        return 0
    missing = ray_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="vsray-"))  # short: Ray's sockets live under it (108-byte limit)
    print(f"tfcluster against Ray Train {importlib.metadata.version('ray')}, {WORKERS} CPU workers, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}", flush=True)
    rows: dict[str, list[dict]] = {"tfcluster": [], "ray": []}
    print(f"tfcluster's side: {args.tfcluster_python} ({versions(args.tfcluster_python)}); "
          f"Ray's: {sys.executable} ({versions(sys.executable)})", flush=True)
    for i in range(args.trials):
        for side in ((Tfcluster(args.tfcluster_python), Ray()) if i % 2 == 0 else (Ray(), Tfcluster(args.tfcluster_python))):
            r = trial(side, tmp / f"{i}-{side.name}", args)
            rows[side.name].append(r)
            print(f"trial {i + 1} {side.name:9s}: start {r['start']:.2f} s, peak RSS {r['rss']:.0f} MiB "
                  f"(PSS {r['pss']:.0f}, {r['processes']} processes), {r['examples_s']:.0f} examples/s "
                  f"({r['examples_s_all']:.0f} from step 10), "
                  f"recovery {r['recovery']:.2f} s (group {r['group']:.2f} s); load {r['load']}, "
                  f"{r['seconds']:.0f} s", flush=True)
    report(rows)
    print(f"load after: {load_average()}")
    if args.keep:
        print(f"each run's lines, marks and processes at the Rss peak: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
