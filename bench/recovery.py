#!/usr/bin/env python3
"""Recovery figures for a 2-worker MWMS run on this machine.

Default (``--backend local``; ``ssh``: the ssh lab, network namespaces with an sshd each; ``docker``:
the tests' private dockerd and worker image, tests/labs/docker.py; ``slurm``: the tests' Slurm lab,
tests/labs/slurm.py, which reads TFCLUSTER_SLURM_SUBNET/PREFIX/PORT; the labs need root): cold against
warm standby, alternated in one run (``--trials`` each): SIGKILL of worker:1
once the run trains (and, warm, both standbys said they are ready) -> worker:1's first training
step after the restore (its own ``tfcluster-first_step`` time), with the standby's resident memory
(VmRSS of a waiting reference worker: on docker the ``python -m worker`` process inside the standby
container, read from this machine's /proc; on slurm the standby step's process on its node) and the
load average. The kill is a task death on that backend: docker, worker:1's container killed
(SIGKILL, exit 137); slurm, worker:1's process SIGKILLed on its node (not the standby beside it).
A warm trial counts only if both tasks' standbys were promoted (the output and worker:1's log say
``tfcluster-standby promoted``); a cold one only if none was. Medians at the end.

    python bench/recovery.py [--backend local|ssh|docker|slurm] [--trials 3]

``--plain``: a user's own plain TF_CONFIG script instead of tfcluster's worker
(tests/support/plain_tf_config.py, not one tfcluster line), 2 local workers: the default
(``warm_standby`` left out: its standbys run under the standby stub) against ``warm_standby: false``,
alternated; SIGKILL of worker:1 once it trained 10 steps (default: once both standbys said they
are ready, too) -> worker:1's first step line after the restart as it reached the launcher (the
script prints no times of its own), and -> its first line (the script running again).

    python bench/recovery.py --plain [--trials 3]

``--backend ssh --hosts 2,8``: recovery against the number of ssh hosts (one worker on each, the
plain script), warm against cold, and each promotion's timing per host (bench/recovery_hosts.py).

    python bench/recovery.py --backend ssh --hosts 2,8 [--trials 3]

``--preemption``: the older figures instead:

* SIGKILL of worker:1 mid-epoch (Keras fit, BackupAndRestore every --save-freq steps):
  death -> whole group relaunched, death -> first training step after restore, steps redone;
* SIGTERM to worker:1 (graceful preemption, custom loop and fit): steps redone (target 0).

    python bench/recovery.py --preemption [--save-freq 10] [--trials 2] [--warm-standby]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional
from pathlib import Path

from benchlib import ROOT, BackgroundUp, load_average, write_spec
from tests.support.processes import pids_with_env, task_pid
import launcher.record.events as ev
from launcher.record.reader import read_events

TIMEOUT = 300
STEP = re.compile(r"tfcluster-step epoch=\d+ step=\d+ global_step=(\d+)")
START = re.compile(r"tfcluster-start epoch=\d+ step=\d+ global_step=(\d+) time=([0-9.]+)")
FIRST = re.compile(r"tfcluster-first_step .*time=([0-9.]+)")
PREEMPTED = re.compile(r"tfcluster-preempted .*\bglobal_step=(\d+)")


WARM = False


def spec_file(work: Path, entrypoint: str) -> Path:
    return write_spec(work, entrypoint, work / "tfds",
                      extra=f"restart: {{max_restarts: 1, warm_standby: {str(WARM).lower()}}}\n")


def trial(work: Path, entrypoint: str, sig: int, at_step: int) -> dict:
    spec = spec_file(work, entrypoint)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(spec), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        latest = work / "runs" / "bench" / "latest"
        end = time.monotonic() + TIMEOUT
        log = None
        while time.monotonic() < end:
            if latest.exists():
                log = latest.resolve() / "logs" / "worker-1.progress"  # (its records: its control channel's)
                text = log.read_text() if log.exists() else ""
                if f"global_step={at_step}\n" in text and (not WARM or "tfcluster-standby ready" in text):
                    break
            time.sleep(0.02)
        else:
            raise SystemExit("training never reached the kill step")
        run_dir = latest.resolve()
        os.kill(task_pid(run_dir.name, "worker:1"), sig)
        died = time.time()
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}); see {run_dir}")
    events = read_events(run_dir, strict=True)
    relaunched = max(e["time"] for e in events if isinstance(e, ev.Start) and e["attempt"] == 1)
    texts = [(run_dir / "logs" / f"worker-{i}.progress").read_text() for i in (0, 1)]  # (their records)
    before, after = texts[1].split("tfcluster-start", 2)[1], texts[1].split("tfcluster-start", 2)[2]
    last_before = max(int(m) for m in STEP.findall("tfcluster-start" + before)) if STEP.findall(before) else 0
    preempted = PREEMPTED.findall(before)
    if preempted:
        last_before = max(last_before, int(preempted[0]))
    resumed = int(START.findall("tfcluster-start" + after)[0][0])
    first_after = max(float(FIRST.findall(t.split("tfcluster-start")[2])[0]) for t in texts)
    return {
        "relaunch": relaunched - died,
        "first_step": first_after - died,
        "redone": last_before - resumed,
        "killed_at": last_before,
        "resumed": resumed,
    }


COMPARE_TRAIN = ["-m", "worker", "--epochs", "2", "--steps-per-epoch", "60", "--step-delay", "0.2",
                 "--save-freq", "10", "--progress-every", "1"]
KILL_AT = 30  # worker:1's global step from which it is killed (warm: once both standbys are ready, too)


def standby_rss(run_id: str) -> list[int]:
    """VmRSS (bytes) of the run's waiting standbys (a reference worker with TensorFlow imported):
    the ``python -m worker`` processes started with TFCLUSTER_STANDBY=1 (not taskwrap, tini or a
    local srun, which may carry the same environment). /proc here sees the docker containers' and
    the Slurm nodes' processes too (same kernel, own network namespaces)."""
    out = []
    for pid in pids_with_env("TFCLUSTER_STANDBY", "1"):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        python = Path(argv[0].decode(errors="replace")).name.startswith("python")
        if f"TFCLUSTER_RUN_ID={run_id}".encode() in env and python and argv[1:3] == [b"-m", b"worker"]:
            out.extend(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return out


# docker and slurm: 200 steps (40 s at least), time for both standbys to import TensorFlow beside
# the training on a loaded machine before the kill (their integration tests train as long).
LAB_TRAIN = [a if a != "60" else "100" for a in COMPARE_TRAIN]


class LocalBackend:
    """``local``, or ``ssh`` on the ssh lab: worker:1's process SIGKILLed here (or on its host)."""

    name = "local"

    def __init__(self, tmp: Path, ssh: bool = False) -> None:
        self.lab = None
        if ssh:
            from tests.labs.ssh import Lab, have_prereqs

            self.name = "ssh"
            reason = have_prereqs()
            if reason:
                raise SystemExit(f"the ssh lab cannot start: {reason}")
            self.lab = Lab(tmp / "lab", count=2).start()

    def spec(self, work: Path, warm: bool, env: Optional[dict] = None) -> Path:
        return compare_spec(work, warm, self.lab, env)

    def kill(self, run_dir: Path) -> None:
        os.kill(task_pid(run_dir.name, "worker:1"), signal.SIGKILL)

    def close(self) -> None:
        if self.lab is not None:
            self.lab.stop()


class DockerBackend:
    """The docker tests' private engine and worker image (tests/support/docker_warmup.py, as the
    ``docker_engine`` and ``worker_image`` fixtures start them); the spec is the docker tests' own
    (tests/support/docker_helpers.py); the kill removes worker:1's container from under the run
    (SIGKILL to the container: exit 137), as tests/integration/docker/test_docker_standby.py does."""

    name = "docker"

    def __init__(self, tmp: Path) -> None:
        from tests.support.docker_warmup import docker_prereqs, docker_warmup

        docker_prereqs()
        self.warmup = docker_warmup()
        self.engine = self.warmup.engine()
        self.warmup.images()

    def spec(self, work: Path, warm: bool) -> Path:
        from tests.support.docker_helpers import docker_spec

        # The dataset on a volume every container mounts, built once (the first attempt) and read
        # after: as the local and ssh trials' TFDS_DATA_DIR, and as a user keeps data; without it
        # each new container built the digits dataset again (0.65-0.7 s of every restart).
        data = work.parent / "tfds-docker"
        data.mkdir(exist_ok=True)
        data.chmod(0o777)  # the containers' user writes it
        spec = docker_spec(work, self.engine.url, " ".join(["python", *LAB_TRAIN]), name="bench", max_restarts=1,
                           extra=f"  volumes: ['{data}:/tfds']\n")
        text = spec.read_text()
        assert "restart: {max_restarts: 1}" in text and "env: {TF_CPP_MIN_LOG_LEVEL: '2'}" in text, text
        spec.write_text(text.replace("restart: {max_restarts: 1}",
                                     f"restart: {{max_restarts: 1, warm_standby: {str(warm).lower()}}}")
                        .replace("env: {TF_CPP_MIN_LOG_LEVEL: '2'}", "env: {TF_CPP_MIN_LOG_LEVEL: '2', TFDS_DATA_DIR: /tfds}"))
        return spec

    def kill(self, run_dir: Path) -> None:
        client = self.engine.client()
        try:
            client.containers.get(f"tfcluster-bench-{run_dir.name}-worker-1").kill()  # SIGKILL: exit 137
        finally:
            client.close()

    def close(self) -> None:
        self.warmup.close()


class SlurmBackend:
    """The slurm tests' lab (the ``slurm`` fixture: SlurmLab(root, count=3)) and their spec
    (tests/integration/slurm/conftest.py ``make_spec``, tf_env); the kill is worker:1's process
    SIGKILLed on its node, found in the node's namespace and not the standby beside it, as
    tests/integration/slurm/test_slurm_faults.py does."""

    name = "slurm"

    def __init__(self, tmp: Path) -> None:
        from tests.labs.slurm import SlurmLab, have_prereqs

        reason = have_prereqs()
        if reason:
            raise SystemExit(f"the slurm lab cannot start: {reason}")
        self.lab = SlurmLab(tmp / "slurmlab", count=3)
        try:
            self.lab.start()
        except BaseException:
            self.lab.stop()
            raise
        os.environ.update(self.lab.env())  # SLURM_CONF, for the launcher BackgroundUp starts

    def spec(self, work: Path, warm: bool) -> Path:
        import yaml

        from tests.labs.slurm import PARTITION
        from tests.support.slurm_helpers import tf_env

        problem = self.lab.bridge_ok()
        if problem:
            raise SystemExit(f"the slurm lab broke: {problem}")
        self.lab.cancel_all()
        self.lab.wait_idle(30)
        spec = {
            "name": "bench", "strategy": "multi_worker_mirrored", "backend": "slurm",
            "entrypoint": ["python", *LAB_TRAIN], "tasks": {"worker": 2}, "ports": {"base": 23456},
            "watchdog": {"startup_timeout": 180, "stop_grace": 5}, "workdir": str(ROOT),
            "slurm": {"partition": PARTITION, "time": "15", "python": sys.executable, "queue_timeout": 30},
            "env": tf_env(work.parent / "tfds"), "restart": {"max_restarts": 1, "warm_standby": warm},
            # The lab's GPUs are gres device files no TensorFlow can use: the reference worker,
            # given them, trains on CPU as told instead of failing fast (as the lab's tests say).
            "devices": {"cpu_fallback": True},
        }
        path = work / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def kill(self, run_dir: Path) -> None:
        events = read_events(run_dir, strict=True)
        node = next(e["node"] for e in events if isinstance(e, ev.Start) and e["task"] == "worker:1")
        standbys = set(pids_with_env("TFCLUSTER_STANDBY", "1"))
        pids = [p for p in self.lab.node_pids(node) if p not in standbys
                and b"-m\0worker" in Path(f"/proc/{p}/cmdline").read_bytes()]
        if len(pids) != 1:
            raise SystemExit(f"not one worker process on {node}: {pids} {self.lab.node_cmdlines(node)}")
        os.kill(pids[0], signal.SIGKILL)

    def close(self) -> None:
        self.lab.stop()


def compare_spec(work: Path, warm: bool, lab=None, env: Optional[dict] = None) -> Path:
    """``env``: variables added to the spec's env (--ab-env's arm)."""
    restart = {"max_restarts": 1, "warm_standby": warm}
    if lab is None:
        path = write_spec(work, " ".join(["python", *COMPARE_TRAIN]), work.parent / "tfds",
                          extra=f"restart: {json.dumps(restart)}\nwatchdog: {{startup_timeout: 180, stop_grace: 5}}\n")
        if env:
            text = path.read_text()
            assert "env: {TF_CPP_MIN_LOG_LEVEL: '2'" in text, text
            path.write_text(text.replace("env: {TF_CPP_MIN_LOG_LEVEL: '2'",
                                         "env: {" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in env.items())
                                         + ", TF_CPP_MIN_LOG_LEVEL: '2'", 1))
        return path
    import yaml

    spec = {
        "name": "bench", "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, *COMPARE_TRAIN], "hosts": lab.hosts_yaml(["h1", "h2"]),
        "tasks": {"worker": 2},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TFDS_DATA_DIR": str(work.parent / "tfds"), **(env or {})},
        "restart": restart, "watchdog": {"startup_timeout": 180, "stop_grace": 5},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "lease": 10, "connect_timeout": 3, "require": []},
    }
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


FIRST_AT = re.compile(r"\[worker:1\] tfcluster-first_step .*time=([0-9.]+)")


def compare_trial(work: Path, warm: bool, backend, env: Optional[dict] = None) -> dict:
    spec = backend.spec(work, warm, env) if env else backend.spec(work, warm)
    run = BackgroundUp(spec)
    try:
        if warm:
            for key in ("worker:0", "worker:1"):
                run.wait_line(rf"\[{key}\] \(standby\) tfcluster-standby ready", timeout=400)
        run.wait_line(rf"\[worker:1\] tfcluster-step epoch=\d+ step=\d+ global_step=({'|'.join(map(str, range(KILL_AT, 1000)))}) ",
                      timeout=400)
        run_dir = (work / "runs" / "bench" / "latest").resolve()
        rss = standby_rss(run_dir.name) if warm else []
        load = load_average()
        backend.kill(run_dir)
        died = time.time()
        at = run.wait_line(r"\[worker:1\] tfcluster-first_step ", timeout=400, after=died)
        line = next(line for t, line in run.lines if t >= at and FIRST_AT.search(line))
        first = float(FIRST_AT.search(line).group(1))
        code = run.finish()
    finally:
        if run.running():
            os.killpg(run.proc.pid, signal.SIGKILL)
    out = "\n".join(line for _, line in run.lines)
    # Each line with when it arrived here, relative to the kill: where a restore's time went.
    (work / "lines.txt").write_text("".join(f"{t - died:+9.3f} {line}\n" for t, line in run.lines))
    if code != 0:
        raise SystemExit(f"run failed ({code}); see {work}:\n{out[-3000:]}")
    if "run succeeded after 2 attempt(s)" not in out:
        raise SystemExit(f"not one restart; see {work}:\n{out[-3000:]}")
    log1 = (run_dir / "logs" / "worker-1.progress").read_text(errors="replace")  # (its records: the standby's protocol)
    promoted = [key for key in ("worker:0", "worker:1") if f"[{key}] tfcluster-standby promoted" in out]
    if warm and (promoted != ["worker:0", "worker:1"] or "tfcluster-standby promoted" not in log1):
        raise SystemExit(f"warm trial not promoted (promoted: {promoted}); see {run_dir}:\n{out[-3000:]}")
    if not warm and (promoted or "tfcluster-standby" in log1):
        raise SystemExit(f"cold trial had a standby; see {run_dir}")
    events = read_events(run_dir, strict=True)
    promos = [e for e in events if isinstance(e, ev.StandbyPromoted) and e.get("began") is not None]
    restart = next((e["time"] for e in events if isinstance(e, ev.GroupRestart)), None)
    # The promotions of the restart: every host's at once (their spans overlap), each its own round trip.
    spread = ({"hosts": len(promos), "all": max(e["ended"] for e in promos) - min(e["began"] for e in promos),
               "longest": max(e["ended"] - e["began"] for e in promos),
               "after_restart": (max(e["ended"] for e in promos) - restart) if restart else None} if promos else None)
    return {"first_step": first - died, "rss": rss, "load": load, "at": time.strftime("%H:%M:%S", time.localtime(died)),
            "promotions": spread}


PLAIN = ROOT / "tests" / "support" / "plain_tf_config.py"
PLAIN_KILL_AT = 10  # worker:1's step from which it is killed


def plain_trial(work: Path, warm: bool) -> dict:
    """One --plain trial: ``warm`` is the default (the standby stub), else ``warm_standby: false``."""
    (work / "state").mkdir()
    restart = "{max_restarts: 1}" if warm else "{max_restarts: 1, warm_standby: false}"
    entry = json.dumps([sys.executable, str(PLAIN), "--steps", "300", "--delay", "0.1", "--state", str(work / "state")])
    spec = write_spec(work, entry, work.parent / "tfds",
                      extra=f"restart: {restart}\nwatchdog: {{startup_timeout: 180, stop_grace: 5}}\n")
    run = BackgroundUp(spec)
    try:
        if warm:
            for key in ("worker:0", "worker:1"):
                run.wait_line(rf"\[{key}\] \(standby\) tfcluster-standby ready", timeout=400)
        run.wait_line(rf"\[worker:1\] plain-step ({'|'.join(map(str, range(PLAIN_KILL_AT, 400)))}) ", timeout=400)
        run_dir = (work / "runs" / "bench" / "latest").resolve()
        load = load_average()
        os.kill(task_pid(run_dir.name, "worker:1"), signal.SIGKILL)
        died = time.time()
        first_line = run.wait_line(r"\[worker:1\] plain-start ", timeout=400, after=died)
        first_step = run.wait_line(r"\[worker:1\] plain-step ", timeout=400, after=first_line)
        code = run.finish()
    finally:
        if run.running():
            os.killpg(run.proc.pid, signal.SIGKILL)
    out = run.restarted_once(code, work, died)
    promoted = [key for key in ("worker:0", "worker:1") if f"[{key}] tfcluster-standby promoted" in out]
    if warm and promoted != ["worker:0", "worker:1"]:
        raise SystemExit(f"default trial not promoted (promoted: {promoted}); see {work}:\n{out[-3000:]}")
    if not warm and promoted:
        raise SystemExit(f"warm_standby: false trial had a standby; see {work}")
    return {"first_step": first_step - died, "first_line": first_line - died, "load": load,
            "at": time.strftime("%H:%M:%S", time.localtime(died))}


def plain(args) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-recovery-plain-"))
    print(f"plain script, local: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}", flush=True)
    rows = {False: [], True: []}
    for i in range(args.trials):
        for warm in (False, True):
            work = tmp / f"{'default' if warm else 'cold'}{i}"
            work.mkdir()
            r = plain_trial(work, warm)
            rows[warm].append(r)
            print(f"plain {'default (stub)' if warm else 'warm_standby: false'} trial {i + 1} ({r['at']}): death -> "
                  f"worker:1's first line {r['first_line']:.2f} s, first step {r['first_step']:.2f} s "
                  f"(load {r['load']})", flush=True)
    med = {w: {k: statistics.median(r[k] for r in rows[w]) for k in ("first_step", "first_line")} for w in rows}
    print(f"plain script, local: median death -> worker:1's first step after the restart: warm_standby: false "
          f"{med[False]['first_step']:.2f} s, default {med[True]['first_step']:.2f} s "
          f"({med[True]['first_step'] / med[False]['first_step']:.0%} of cold; target <= 50%); first line "
          f"{med[False]['first_line']:.2f} s against {med[True]['first_line']:.2f} s; load average now {load_average()}")
    return 0


def compare(args) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-recovery-"))
    if args.backend == "docker":
        backend = DockerBackend(tmp)
    elif args.backend == "slurm":
        backend = SlurmBackend(tmp)
    else:
        backend = LocalBackend(tmp, ssh=args.backend == "ssh")
    # The arms, alternated in each round: cold, warm, and with --ab-env a warm arm with those
    # variables added to the spec's env (one change, A/B in the same run).
    ab = dict(kv.split("=", 1) for kv in args.ab_env or [])
    arms = [("cold", False, None), ("warm", True, None)] + ([("warm+env", True, ab)] if ab else [])
    print(f"{args.backend}: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {load_average()}"
          f"{f'; the warm+env arm adds {ab}' if ab else ''}", flush=True)
    try:
        rows = {name: [] for name, _, _ in arms}
        for i in range(args.trials):
            for name, warm, env in arms:
                work = tmp / f"{name.replace('+', '_')}{i}"
                work.mkdir()
                r = compare_trial(work, warm, backend, env)
                rows[name].append(r)
                rss = f", standby RSS {', '.join(f'{b / 2**20:.0f}' for b in r['rss'])} MB" if r["rss"] else ""
                p = r["promotions"]
                promos = (f"; promotions: {p['hosts']} in {p['all']:.3f} s from the first's start to the last's end "
                          f"(longest one {p['longest']:.3f} s)" if p else "")
                print(f"{args.backend} {name} trial {i + 1} ({r['at']}): death -> worker:1's "
                      f"first step after restore {r['first_step']:.2f} s{rss} (load {r['load']})"
                      f"{' (promoted: both standbys)' if warm else ''}{promos}", flush=True)
        med = {name: statistics.median(r["first_step"] for r in rows[name]) for name in rows}
        cold, warm = med["cold"], med["warm"]
        rss = [b for r in rows["warm"] for b in r["rss"]]
        rss_note = (f"standby RSS median {statistics.median(rss) / 2**20:.0f} MB (n={len(rss)})" if rss
                    else "standby RSS: no standby process found")
        other = (f", warm+env {med['warm+env']:.2f} s ({med['warm+env'] / cold:.0%} of cold)" if ab else "")
        print(f"{args.backend}: median death -> first step after restore: cold {cold:.2f} s, warm {warm:.2f} s "
              f"({warm / cold:.0%} of cold; target <= 30%){other}; {rss_note}; load average now {load_average()}")
    finally:
        backend.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("local", "ssh", "docker", "slurm"), default="local")
    ap.add_argument("--preemption", action="store_true", help="the older SIGKILL/SIGTERM figures (local)")
    ap.add_argument("--plain", action="store_true", help="a plain TF_CONFIG script: default against warm_standby: false")
    ap.add_argument("--hosts", help="ssh: host counts, e.g. 2,8: one worker a host (bench/recovery_hosts.py)")
    ap.add_argument("--save-freq", type=int, default=10)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--warm-standby", action="store_true", help="restart.warm_standby: true (--preemption)")
    ap.add_argument("--ab-env", action="append", metavar="NAME=VALUE",
                    help="a third arm, alternated with cold and warm: warm with NAME=VALUE added to the spec's env "
                         "(repeatable)")
    args = ap.parse_args()
    if args.hosts:
        if args.backend != "ssh":
            ap.error("--hosts is for --backend ssh")
        import recovery_hosts

        return recovery_hosts.run(args)
    if args.plain:
        return plain(args)
    if not args.preemption:
        return compare(args)
    global WARM
    WARM = args.warm_standby
    fit = (f"python -m worker --epochs 2 --steps-per-epoch 40 --step-delay 0.05 --progress-every 1 "
           f"--save-freq {args.save_freq}")
    custom = "python -m worker --loop custom --epochs 2 --steps-per-epoch 40 --step-delay 0.05 --progress-every 1"
    with tempfile.TemporaryDirectory(prefix="tfcluster-recovery-") as tmp:
        rows = []
        for i in range(args.trials):
            kill_step = 47 + 3 * i  # mid-epoch, between backups
            work = Path(tmp) / f"kill{i}"
            work.mkdir()
            r = trial(work, fit, 9, kill_step)
            rows.append(r)
            print(f"SIGKILL trial {i + 1}: killed after step {r['killed_at']}, resumed at {r['resumed']}: "
                  f"relaunch {r['relaunch']:.2f} s, first step after restore {r['first_step']:.2f} s, "
                  f"steps redone {r['redone']} (save_freq {args.save_freq})", flush=True)
        pre = []
        for loop, entrypoint in (("custom loop", custom), ("fit", fit)):
            for i in range(args.trials):
                work = Path(tmp) / f"term-{loop.split()[0]}{i}"
                work.mkdir()
                r = trial(work, entrypoint, 15, 21 + 5 * i)
                pre.append(r)
                print(f"SIGTERM trial {i + 1} ({loop}): preempted at step {r['killed_at']}, resumed at "
                      f"{r['resumed']}: steps redone {r['redone']}, first step after restore "
                      f"{r['first_step']:.2f} s", flush=True)
        med = lambda k, rs: statistics.median(x[k] for x in rs)  # noqa: E731
        print(f"median SIGKILL: relaunch {med('relaunch', rows):.2f} s (target <= 1), first step after restore "
              f"{med('first_step', rows):.2f} s (target <= 8), steps redone {max(r['redone'] for r in rows)} "
              f"(<= save_freq {args.save_freq})")
        print(f"median SIGTERM preemption: steps redone {max(r['redone'] for r in pre)} (target 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
