#!/usr/bin/env python3
"""A soak under random faults: one training on 4 ssh hosts + 1 spare, found by a
discovery command (a file this script edits), with a random fault every 30-90 s:

  sigkill    SIGKILL to one worker's task process           (a crash: a restart, from the last backup)
  sigstop    SIGSTOP to one worker for 25 s, then SIGCONT  (a hang under seconds; a pause under auto)
  partition  one host's link down for 8 s, then up          (its sessions lost: suspect, its task moves or
                                                            the group shrinks, no restart spent)
  preempt    a Spot preemption of one host (Lab.preempt)    (lost: its task moves, or the group shrinks)
  shutdown   a host shutting down slowly (Lab.shutdown):   (its sessions lost while it still answers:
             SIGTERM to all but its sshd, which accepts     suspect, its task moves or the group shrinks,
             for 3 s more, then SIGKILL and its link down   no restart spent)
  return     a host down (preempt, shutdown) up again      (usable after elastic.settle: grow or spare)
  discovery  the spare dropped from, or put back into, the discovery file

Needs root (tests/labs/ssh.py builds the hosts). Usage::

    sudo python3 bench/soak.py [--minutes 20] [--seed 1] [--epochs N] [--kinds shutdown,return,...]

A fault that lands on a host holding no task of the plan in use (a spare, with at most its warm
standbys: the plan's latest plan-N.json says) is a spare fault, reported apart: infrastructure on
an idle host, it costs no training, so no recovery or restart is expected of it (the launcher
says ``hN: a spare: ...`` and passes the host over until it answers again).

With ``--hang-timeout auto`` (the default watchdog) it also counts hang alarms, which must be none.
It first trains once undisturbed (the same spec without faults, and without the step delay that
paces the soak: a sleep the weights never see) for the reference accuracy, then the soak. It ends with: exit code (must be 0), final test accuracy
against the undisturbed one (within 0.02), each fault (for the whole --minutes: a training that ends sooner fails the soak), with its time and what the launcher said
next, steps redone per resume (under 2 x --save-freq: a backup written in the background counts once
written; 0 after a graceful save), recovery times
(fault -> the next first training step), and the processes left on any host (must be none).

Goodput: tfcluster's figure (``status --json``, folded from the run's record: launcher/record/goodput.py)
beside an independent count made here, from worker:0's own lines as they arrived (this script's
clock) and the faults it injected: the time of each global step's last occurrence (a step
trained again after a restore counts once, its last time; an attempt's first step, which holds
its tracing, not at all) less the backups its lines report, over the time from starting
``tfcluster up`` to its exit. The two must agree within 2 percentage points.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import BackgroundUp  # noqa: E402
from launcher.contract import progress  # noqa: E402
from launcher.contract.progress import parse  # noqa: E402
from tests.labs.ssh import Lab, have_prereqs  # noqa: E402

STEP = re.compile(r"\[(worker:\d+)\] tfcluster-(start|first_step|step|result) .*?global_step=(\d+)")
SAVE_FREQ = 5
# Steps a resume may redo: a backup counts once its files are written, and the worker writes them
# beside training (worker/background.py) with at most one write in flight, so a kill mid-write
# resumes from the backup before it: fewer than 2 x --save-freq (--save-freq with blocking backups).
REDONE_BOUND = 2 * SAVE_FREQ
# What the hang watchdog says when it finds a stall (launcher/supervise/phases.py, hangwatch.py): under
# hang_timeout auto no fault here is a hang (a SIGSTOP of 25 s is a pause), so each is a false alarm.
HANG_ALARM = re.compile(r"the group stopped progressing|hung: no progress for| stuck \d+ s")


def spec_for(lab: Lab, work: Path, name: str, listing: Path, epochs: int, step_delay: float = 0.2,
             hang_timeout: object = 20) -> Path:
    spec = {
        "name": name, "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, "-m", "worker", "--epochs", str(epochs), "--steps-per-epoch", "40",
                       "--step-delay", str(step_delay), "--save-freq", str(SAVE_FREQ), "--progress-every", "1"],
        "discovery": {"command": f"cat {listing}", "every": 5, "timeout": 5},
        "tasks": {"worker": {"count": 4, "min": 2}},
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "restart": {"max_restarts": 100},
        "elastic": {"host_wait": 10, "settle": 10},
        "watchdog": {"startup_timeout": 180, "hang_timeout": hang_timeout, "stop_grace": 10},
        "state": {"dir": str(lab.private / work.name / "state")},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "lease": 4, "connect_timeout": 3, "require": ["tensorflow", "tf_keras"]},
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


class Run(BackgroundUp):
    def training(self) -> bool:
        """A step line in the last 5 s: the group trains (faults land on a running group)."""
        now = time.time()
        return any("tfcluster-step" in line for at, line in self.lines[-40:] if now - at < 5)


def worker_pids(lab: Lab) -> list[tuple[str, int]]:
    found = []
    for h in lab.hosts:
        for pid in Lab._netns_pids(h.netns):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if " -m worker " in cmd and "taskwrap" not in cmd:
                found.append((h.name, pid))
    return found


def plan_hosts(run_dir: Path) -> set[str]:
    """The hosts of the run's plan in use (its latest plan-N.json, else plan.json; none yet: empty)."""
    plans = sorted(run_dir.glob("plan-*.json"), key=lambda p: int(p.stem.split("-")[1]) if p.stem[5:].isdigit() else 0)
    for path in [*reversed(plans), run_dir / "plan.json"]:
        try:
            return {t["host"] for t in json.loads(path.read_text())["tasks"]}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return set()


class Faults:
    def __init__(self, lab: Lab, listing: Path, rng: random.Random, kinds: tuple[str, ...] = (),
                 run_dir: Optional[Path] = None) -> None:
        self.lab, self.listing, self.rng = lab, listing, rng
        self.run_dir = run_dir  # the run's record (its plans say which hosts hold tasks)
        self.kinds = kinds or self.KINDS
        self.down: list[str] = []
        self.spare_listed = True
        self.log: list[dict] = []
        self.deck: list[str] = []

    def publish(self) -> None:
        names = [h.name for h in self.lab.hosts if h.name != "h5" or self.spare_listed]
        self.listing.write_text(yaml.safe_dump(self.lab.hosts_yaml(names)))

    KINDS = ("sigkill", "sigstop", "partition", "preempt", "shutdown", "return", "discovery")
    DOWN = ("preempt", "shutdown")  # kinds that take a host down until a "return"

    def choose(self) -> str:
        """The next fault: drawn from a shuffled deck of every kind, so that each kind comes once
        a round (a 20-minute soak has about 18 faults: three rounds) instead of by chance (seed 1
        drew no partition in 20 minutes); a kind that cannot happen now waits in the deck. At most
        one host is down at a time (4 workers, min 2, a spare): a preemption or shutdown only when
        none is, a return only when one is."""
        allowed = [k for k in self.kinds if (k not in self.DOWN or not self.down) and (k != "return" or self.down)]
        if not any(k in allowed for k in self.deck):
            self.deck += self.rng.sample(self.kinds, len(self.kinds))
        kind = next(k for k in self.deck if k in allowed)
        self.deck.remove(kind)
        return kind

    def inject(self, kind: str) -> dict:
        at = time.time()
        what, hit = "", ""  # hit: the host the fault lands on
        used = plan_hosts(self.run_dir) if self.run_dir is not None else set()  # (before the fault)
        if kind in ("sigkill", "sigstop"):
            pids = worker_pids(self.lab)
            if not pids:
                return {"kind": kind, "at": at, "what": "no worker running: skipped"}
            host, pid = self.rng.choice(pids)
            hit = host
            if kind == "sigkill":
                os.kill(pid, signal.SIGKILL)
                what = f"SIGKILL worker on {host} (pid {pid})"
            else:
                os.kill(pid, signal.SIGSTOP)
                threading.Timer(25, lambda: _cont(pid)).start()
                what = f"SIGSTOP worker on {host} (pid {pid}) for 25 s"
        elif kind == "partition":
            up = [h for h in self.lab.hosts if h.name not in self.down and h.name != "h5"]
            h = self.rng.choice(up)
            hit = h.name
            h.exec("ip", "link", "set", "eth0", "down")
            threading.Timer(8, lambda: h.exec("ip", "link", "set", "eth0", "up", check=False)).start()
            what = f"{h.name} partitioned for 8 s"
        elif kind == "preempt":
            up = [h.name for h in self.lab.hosts if h.name not in self.down]
            name = hit = self.rng.choice(up)
            self.down.append(name)
            threading.Thread(target=self.lab.preempt, args=(name, 10.0), daemon=True).start()
            what = f"{name} preempted"
        elif kind == "shutdown":
            up = [h.name for h in self.lab.hosts if h.name not in self.down]
            name = hit = self.rng.choice(up)
            self.down.append(name)
            threading.Thread(target=self.lab.shutdown, args=(name, 3.0), daemon=True).start()
            what = f"{name} shut down (its sshd accepting for 3 s)"
        elif kind == "return":
            name = self.down.pop(0)
            self.lab.bring_back(name)
            what = f"{name} back"
        elif kind == "discovery":
            self.spare_listed = not self.spare_listed
            self.publish()
            what = "h5 " + ("put back into" if self.spare_listed else "dropped from") + " the discovery list"
        entry = {"kind": kind, "at": at, "what": what}
        if hit:
            # A fault on a host that holds no task of the plan in use (a spare: at most its warm
            # standbys) costs the training nothing: infrastructure on an idle host, counted apart
            # from the training's faults (no recovery, no restart expected of it).
            entry["spare"] = bool(used) and hit not in used
        self.log.append(entry)
        return entry


def _cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def resumes(lines: list[tuple[float, str]]) -> list[dict]:
    """Each resume of worker:0 after the first start: where it resumed, the last step before."""
    out, best, seen_start = [], 0, False
    for at, line in lines:
        m = STEP.search(line)
        if not m or m.group(1) != "worker:0":
            continue
        g = int(m.group(3))
        if m.group(2) == "start":
            if seen_start:
                out.append({"at": at, "resumed": g, "before": best, "redone": max(0, best - g)})
            seen_start = True
        elif m.group(2) in ("step", "first_step"):
            best = max(best, g)
    return out


def independent_goodput(lines: list[tuple[float, str]], faults: list[dict], started: float, ended: float) -> dict:
    """Goodput counted from worker:0's lines as they arrived and the injected faults (see the
    module's docstring): productive seconds, the fraction, the steps kept, and recovery (each
    fault that ends an attempt -> worker:0's next first step)."""
    prefix = "[worker:0] "
    last: dict[int, float] = {}  # global step -> the duration of its last occurrence
    backups: dict[int, float] = {}  # global step -> backup seconds after it, in that same occurrence
    prev = None  # arrival of the attempt's previous step line
    pending = 0.0  # backup seconds since it
    firsts: list[float] = []
    for at, line in lines:
        if not line.startswith(prefix):
            continue
        p = parse(line[len(prefix):])
        if p is None:
            continue
        if isinstance(p, progress.StartLine):
            prev, pending = None, 0.0
        elif isinstance(p, progress.FirstStepLine):
            prev, pending = at, 0.0
            firsts.append(at)
            last.pop(p.global_step, None)  # (trained again, now as tracing: not productive)
            backups.pop(p.global_step, None)
        elif isinstance(p, progress.StepLine) and prev is not None:
            last[p.global_step] = at - prev
            backups[p.global_step], pending = pending, 0.0  # (a backup's time is in the interval of the step line after it)
            prev = at
        elif isinstance(p, progress.BackupLine) and prev is not None:
            pending += p.seconds or 0.0
    productive = sum(last.values()) - sum(backups.values())
    elapsed = ended - started
    recovery = []
    for f in faults:
        after = [t for t in firsts if t > f["at"]]
        if after and training_fault(f):
            recovery.append(after[0] - f["at"])
    return {"elapsed": elapsed, "productive": productive, "fraction": productive / elapsed if elapsed > 0 else 0.0,
            "steps": len(last), "backups": sum(backups.values()), "recovery": recovery}


def training_fault(fault: dict) -> bool:
    """A fault that can cost training time: not a return or a discovery edit, and not one that hit
    only a spare (a host with no task of the plan in use: at most its warm standbys)."""
    return fault["kind"] not in ("discovery", "return") and not fault.get("spare")


def tfcluster_goodput(spec: Path) -> dict:
    """``tfcluster status --json SPEC``'s goodput."""
    res = subprocess.run([sys.executable, "-m", "launcher", "status", "--json", str(spec)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise SystemExit(f"tfcluster status failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)["goodput"] or {}


def accuracy(lines) -> float:
    for _, line in lines:
        if "[worker:0] tfcluster-result" in line:
            m = re.search(r" accuracy=([\d.]+)", line)
            if m:
                return float(m.group(1))
    return float("nan")


def left_running(lab: Lab) -> list[str]:
    left = []
    for h in lab.hosts:
        for pid in Lab._netns_pids(h.netns):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") \
                if Path(f"/proc/{pid}/cmdline").exists() else ""
            if cmd and "sshd" not in cmd:
                left.append(f"{h.name}: {cmd[:80]}")
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="how long faults are injected")
    parser.add_argument("--epochs", type=int, default=0, help="default: enough for --minutes of training")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true",
                        help="keep the run records (events.jsonl, plans, logs) of a soak that passed too")
    parser.add_argument("--kinds", default=",".join(Faults.KINDS),
                        help="the fault kinds to draw from, comma-separated (default: all)")
    parser.add_argument("--hang-timeout", default="20",
                        help="watchdog.hang_timeout for both runs: seconds, or auto (the default's rule: a "
                             "25 s SIGSTOP is then a pause, not a hang, and no hang alarm may be raised)")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = [k for k in kinds if k not in Faults.KINDS]
    if unknown or not kinds:
        print(f"bench/soak.py: --kinds: unknown kind(s) {', '.join(unknown) or '(none given)'}; "
              f"choose from {', '.join(Faults.KINDS)}", file=sys.stderr)
        return 2
    reason = have_prereqs()
    if reason:
        print(f"bench/soak.py: {reason}", file=sys.stderr)
        return 2
    hang_timeout = args.hang_timeout if args.hang_timeout == "auto" else float(args.hang_timeout)
    rng = random.Random(args.seed)
    # Enough epochs that training outlasts --minutes of faults (the verdict requires the whole
    # time): sized for 0.25 s a step, as fast as 4 workers step with the 0.2 s delay on a quiet
    # machine (a quiet 20-minute soak trained 3993 steps, 100 epochs, in 18.6 minutes with its
    # faults). On a loaded one training goes on after the faults end, which costs only time.
    epochs = args.epochs or max(2, int(args.minutes * 60 / (40 * 0.25)))
    root = Path(tempfile.mkdtemp(prefix="tfcs-soak-"))
    # Each host's private disk holds a run's state dir: the chief's per-epoch weights (ModelCheckpoint,
    # about 0.4 MB an epoch, all kept), the backup and its write in flight (about 1.2 MB each), the
    # final model. A 64 MB disk filled at epoch 35 of 120 with the reference's state still on it
    # (the chief's SaveV2 failed "No space left on device", exit 1, and the soak ended at 411 s):
    # sized for the run, and the reference's state removed before the soak starts.
    disk_mb = max(64, int(epochs * 0.5) + 32)
    lab = Lab(root, count=5, private=root / "private", private_size=f"{disk_mb}m",
              prefix=os.environ.get("TFCLUSTER_LAB_PREFIX", "tfck"),
              subnet=os.environ.get("TFCLUSTER_LAB_SUBNET", "10.236.0"))
    report: dict = {"seed": args.seed, "epochs": epochs, "kinds": list(kinds), "hang_timeout": hang_timeout}
    try:
        lab.start()
        # The undisturbed reference: the same training, no faults, and no step delay (a sleep per
        # step that only paces the soak so that faults land mid-training; the weights do not see it).
        ref_work = root / "reference"
        ref_work.mkdir()
        ref_listing = ref_work / "hosts.yaml"
        ref_listing.write_text(yaml.safe_dump(lab.hosts_yaml()))
        started = time.time()
        ref = Run(spec_for(lab, ref_work, "reference", ref_listing, epochs, step_delay=0.0, hang_timeout=hang_timeout))
        ref_code = ref.finish(3600)
        report["reference"] = {"exit": ref_code, "accuracy": accuracy(ref.lines), "seconds": time.time() - started}
        print(f"undisturbed: exit {ref_code}, accuracy {report['reference']['accuracy']:.4f}, "
              f"{report['reference']['seconds']:.0f} s", flush=True)
        for h in lab.hosts:  # (the soak's disks start as empty as the reference's did)
            h.exec_private("rm", "-rf", str(lab.private / ref_work.name))
        # The soak.
        work = root / "soak"
        work.mkdir()
        listing = work / "hosts.yaml"
        faults = Faults(lab, listing, rng, kinds, run_dir=work / "runs" / "soak" / "latest")
        faults.publish()
        started = time.time()
        soak_spec = spec_for(lab, work, "soak", listing, epochs, hang_timeout=hang_timeout)
        run = Run(soak_spec)
        end = started + args.minutes * 60
        next_at = started + 60 + rng.uniform(30, 90)  # the first after start-up
        while run.running() and time.time() < end:
            if time.time() >= next_at and run.training():
                entry = faults.inject(faults.choose())
                print(f"{entry['at'] - started:7.1f} s  fault: {entry['what']}", flush=True)
                next_at = time.time() + rng.uniform(30, 90)
            time.sleep(0.5)
        while faults.down:  # give the hosts back so the run can finish as it would
            faults.inject("return")
        if not faults.spare_listed:
            faults.spare_listed = True
            faults.publish()
        code = run.finish(3600)
        ended = time.time()
        seconds = ended - started
        res = resumes(run.lines)
        acc = accuracy(run.lines)
        time.sleep(2)
        left = left_running(lab)
        report.update({"exit": code, "accuracy": acc, "seconds": seconds, "faults": faults.log, "resumes": res,
                       "left_running": left})
        kinds, spare_kinds = {}, {}
        for f in faults.log:
            into = spare_kinds if f.get("spare") else kinds
            into[f["kind"]] = into.get(f["kind"], 0) + 1
        spare_faults = [f for f in faults.log if f.get("spare")]
        report["spare_faults"] = spare_faults
        recov = []
        for f in faults.log:
            after = [r for r in res if r["at"] > f["at"]]
            if after and training_fault(f):
                recov.append(after[0]["at"] - f["at"])
        print(f"soak: exit {code} after {seconds:.0f} s; accuracy {acc:.4f} vs undisturbed "
              f"{report['reference']['accuracy']:.4f} (difference {abs(acc - report['reference']['accuracy']):.4f})")
        print(f"faults by kind: {json.dumps(kinds)}; on a spare only (its warm standbys, no task: not training "
              f"faults): {json.dumps(spare_kinds)}"
              + "".join(f"\n  {f['at'] - started:7.1f} s  spare fault: {f['what']}" for f in spare_faults))
        print(f"resumes: {len(res)}; steps redone per resume: {[r['redone'] for r in res]} "
              f"(bound: {REDONE_BOUND} with --save-freq {SAVE_FREQ}, one backup write in flight; 0 after a graceful save)")
        if recov:
            print(f"fault -> next resume start (s): median {statistics.median(recov):.1f}, max {max(recov):.1f}")
        said = [(at, line) for at, line in run.lines
                if "restarting the whole group (restart " in line or re.search(r"tfcluster: error: \S+ failed: ", line)]
        for at, line in said:  # what spent restarts, in the launcher's words (the records of a passed soak go)
            print(f"{at - started:7.1f} s  launcher: {line.strip()[:300]}")
        spent = sum(1 for _, line in said if "restarting the whole group (restart " in line)
        losses = sum(1 for _, line in run.lines if re.search(r"tfcluster: h\d: session lost at |h\d lost ", line))
        spare_losses = [line.strip()[:200] for _, line in run.lines if re.search(r"tfcluster: h\d: a spare: ", line)]
        report.update({"restarts_spent": spent, "host_loss_lines": losses, "spare_loss_lines": spare_losses})
        print(f"restarts spent: {spent} (sigkill and sigstop faults on the group's hosts: "
              f"{kinds.get('sigkill', 0) + kinds.get('sigstop', 0)}); host losses said: {losses}; spares lost said: "
              f"{len(spare_losses)}" + "".join(f"\n  {line}" for line in spare_losses))
        print(f"processes left on the hosts: {left or 'none'}")
        alarms = [line.strip()[:300] for r in (ref, run) for _, line in r.lines if HANG_ALARM.search(line)]
        report["hang_alarms"] = alarms
        print(f"hang alarms (watchdog.hang_timeout {hang_timeout}), reference and soak: {len(alarms)}"
              + "".join(f"\n  {line}" for line in alarms))
        theirs = tfcluster_goodput(soak_spec)
        ours = independent_goodput(run.lines, faults.log, started, ended)
        gap = abs(theirs.get("fraction", 0.0) - ours["fraction"]) * 100
        report.update({"goodput": theirs, "independent": ours, "goodput_gap_points": gap})
        print(f"tfcluster: goodput {100 * theirs.get('fraction', 0):.1f} % of {theirs.get('elapsed', 0):.0f} s "
              f"(productive {theirs.get('productive', 0):.0f} s; badput: "
              + ", ".join(f"{c} {s:.0f} s" for c, s in (theirs.get("badput") or {}).items()) + ")")
        print(f"independent: goodput {100 * ours['fraction']:.1f} % of {ours['elapsed']:.0f} s (productive "
              f"{ours['productive']:.0f} s: {ours['steps']} steps kept, backups {ours['backups']:.1f} s; "
              f"fault -> next first step: {sum(ours['recovery']):.0f} s over {len(ours['recovery'])} faults)")
        print(f"goodput difference: {gap:.2f} percentage points (bound: 2)")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        (Path(tempfile.gettempdir()) / "tfcluster-soak.json").write_text(json.dumps(report, indent=1))
        # Faults for the whole time asked: a training that ended sooner soaked less (raise --epochs).
        last_fault = max((f["at"] for f in faults.log), default=started) - started
        full = seconds >= args.minutes * 60
        print(f"faults injected for {min(seconds, args.minutes * 60) / 60:.1f} of the {args.minutes:g} minutes asked "
              f"(the last at {last_fault:.0f} s)" + ("" if full else "; training ended first: raise --epochs"))
        ok = code == 0 and abs(acc - report["reference"]["accuracy"]) <= 0.02 and not left \
            and all(r["redone"] <= REDONE_BOUND for r in res) and full and gap <= 2.0 \
            and (hang_timeout != "auto" or not alarms)
        report["passed"] = ok
        print("soak: " + ("passed" if ok else "FAILED"))
        return 0 if ok else 1
    finally:
        lab.stop()
        if report.get("passed") and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:  # the run records (events.jsonl, plans, logs) say what happened
            for records in sorted(root.glob("*/runs")):
                print(f"run records kept: {records}", flush=True)
            for host_disk in sorted((root / "private").glob("*")):
                shutil.rmtree(host_disk, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
