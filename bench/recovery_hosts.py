"""``bench/recovery.py --backend ssh --hosts 2,8``: warm-standby recovery against the number of
ssh hosts (the lab, tests/labs/ssh.py), and the promotions' timing per host.

N lab hosts, one worker on each (``tasks: {worker: N}``, MultiWorkerMirroredStrategy), the plain
TF_CONFIG script (tests/support/plain_tf_config.py): TensorFlow, a strategy and a scalar
all-reduce a step, no model, no dataset, no backup. It is the lightest MWMS program there is, so 8
workers and 8 waiting standbys (16 processes that import TensorFlow, about 0.5 GB each) fit a
2-core machine; the reference worker builds a Keras model and reads a dataset in each of them, and
its standbys wait for its first step, which 8 workers on 2 cores take minutes to reach. Warm (the
default, its standbys under the standby stub) and cold (``warm_standby: false``) alternated per
host count; SIGKILL of worker:1 once every standby said ready (warm) and worker:1 stepped; then:

* kill -> every worker's first step of the next attempt (its ``plain-step`` line after its
  ``plain-start``, as they reached the launcher) and kill -> worker:1's;
* the launcher's part: kill -> the ``restart`` event (the death noticed, the survivors stopped),
  then restart -> the last promotion acknowledged (the standby's ``tfcluster-standby promoted``
  line here); cold: restart -> the last task started (its ``start`` event);
* TensorFlow's part: the last acknowledgement (cold: the last start) -> every worker's first step;
* each promotion (the ``standby_promoted`` event's began/ended: the promotion file written and
  SIGUSR1 sent, one ssh command) relative to the restart, their overlap (the sum of their spans
  over the span of all: N when all ran at once, 1 when one after another), and each host's round
  trip: began -> its ``promoted`` line here.

From the medians it prints 8-host/2-host and warm/cold, and recovery at 32 and 64 hosts by two
models: the promotions' fan-out (one thread per host, at most PROMOTE_WIDTH at once: the width
of supervise/standby.py's ``promote_all`` and of the ssh pool's executor, launcher/backends/ssh/
pool.py), and the straight line through the 2- and 8-host launcher parts (what one more host
costs, whatever serializes it).
"""

from __future__ import annotations

import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, BackgroundUp, load_average
from tests.support.processes import task_pid
import launcher.record.events as ev
from launcher.record.reader import read_events

PLAIN = ROOT / "tests" / "support" / "plain_tf_config.py"
DELAY = 0.1  # seconds between the script's steps
KILL_AT = 5  # worker:1's step from which it is killed
AFTER = 40  # steps the next attempt runs (the run then ends: --steps @FILE, read at the script's start)
PROMOTE_WIDTH = 64  # promote_all's threads (one a host) and HostPool.executor's: at most 64 hosts at once
TIMEOUT = 900


def spec_file(work: Path, lab, n: int, warm: bool, steps: Path) -> Path:
    import yaml

    state = work / "state"
    state.mkdir()
    spec = {
        "name": "bench", "strategy": "multi_worker_mirrored", "backend": "ssh",
        "entrypoint": [sys.executable, str(PLAIN), "--steps", f"@{steps}", "--delay", str(DELAY), "--state", str(state)],
        "hosts": lab.hosts_yaml([f"h{i}" for i in range(1, n + 1)]),
        "tasks": {"worker": n}, "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "watchdog": {"startup_timeout": 600, "stop_grace": 5},
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(work / "remote"),
                "workdir": str(ROOT), "lease": 10, "connect_timeout": 10, "require": []},
    }
    # warm: warm_standby left out (the plain script's standbys run under the standby stub)
    spec["restart"] = {"max_restarts": 1} if warm else {"max_restarts": 1, "warm_standby": False}
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _after(run: BackgroundUp, key: str, died: float) -> tuple[float, float]:
    """When ``key``'s next-attempt script started (its ``plain-start`` after the kill) and stepped."""
    started = run.wait_line(rf"\[{re.escape(key)}\] plain-start ", timeout=TIMEOUT, after=died)
    return started, run.wait_line(rf"\[{re.escape(key)}\] plain-step ", timeout=TIMEOUT, after=started)


def _kill_when_ready(run: BackgroundUp, work: Path, keys: list[str], warm: bool, steps: Path) -> tuple[float, str]:
    if warm:
        for key in keys:
            run.wait_line(rf"\[{re.escape(key)}\] \(standby\) tfcluster-standby ready", timeout=TIMEOUT)
    run.wait_line(rf"\[worker:1\] plain-step ({'|'.join(map(str, range(KILL_AT, 100000)))}) ", timeout=TIMEOUT)
    done = int((work / "state" / "step").read_text() or 0)
    steps.write_text(str(done + AFTER))  # read by the next attempt's scripts only (the running ones read it at start)
    run_dir = (work / "runs" / "bench" / "latest").resolve()
    load = load_average()
    os.kill(task_pid(run_dir.name, "worker:1"), signal.SIGKILL)
    return time.time(), load


def trial(work: Path, lab, n: int, warm: bool) -> dict:
    keys = [f"worker:{i}" for i in range(n)]
    steps = work / "steps"
    steps.write_text("1000000")
    run = BackgroundUp(spec_file(work, lab, n, warm, steps))
    try:
        died, load = _kill_when_ready(run, work, keys, warm, steps)
        firsts = {k: _after(run, k, died) for k in keys}
        code = run.finish(TIMEOUT)
    finally:
        if run.running():
            os.killpg(run.proc.pid, signal.SIGKILL)
    out = run.restarted_once(code, work, died)
    run_dir = (work / "runs" / "bench" / "latest").resolve()
    events = read_events(run_dir, strict=True)
    acks = {k: run.wait_line(rf"\[{re.escape(k)}\] tfcluster-standby promoted", timeout=1, after=died)
            for k in keys if f"[{k}] tfcluster-standby promoted" in out}
    if warm and sorted(acks) != sorted(keys):
        raise SystemExit(f"warm trial: not every standby promoted ({sorted(acks)}); see {run_dir}")
    if not warm and acks:
        raise SystemExit(f"warm_standby: false trial had a standby; see {run_dir}")
    return measure(events, died, firsts, acks, load, n)


def measure(events: list[dict], died: float, firsts: dict, acks: dict, load: str, n: int) -> dict:
    """The trial's figures from its record (events), the kill, and the lines' arrival times here."""
    restart = next(e["time"] for e in events if isinstance(e, ev.GroupRestart))
    promos = {e["task"]: (e["began"], e["ended"]) for e in events
              if isinstance(e, ev.StandbyPromoted) and e.get("began") is not None}
    starts = [e["time"] for e in events if isinstance(e, ev.Start) and e.get("attempt") == 1]
    last_step = max(step for _, step in firsts.values())
    handed = max(acks.values()) if acks else max(starts)  # the launcher's part ends here
    exit_at = next(e["time"] for e in events if isinstance(e, ev.Exit) and e["task"] == "worker:1")
    failure = next(e["time"] for e in events if isinstance(e, ev.Failure))
    r = {"n": n, "load": load, "noticed": exit_at - died, "blamed": failure - exit_at, "stopped": restart - failure, "at": time.strftime("%H:%M:%S", time.localtime(died)),
         "all_first": last_step - died, "killed_first": firsts["worker:1"][1] - died,
         "to_restart": restart - died, "launcher": handed - restart, "tf": last_step - handed,
         "promotions": None}
    if promos:
        spans = [e - b for b, e in promos.values()]
        span_all = max(e for _, e in promos.values()) - min(b for b, _ in promos.values())
        r["promotions"] = {
            "began": [round(b - restart, 3) for b, _ in sorted(promos.values())],
            "ended": [round(e - restart, 3) for _, e in sorted(promos.values())],
            "longest": max(spans), "span": span_all,
            # the sum of their spans over the span of all: n when all ran at once, 1 when serial
            "overlap": sum(spans) / span_all if span_all > 0 else float(len(spans)),
            # at once: every promotion began before the first one ended (none waited for another)
            "at_once": max(b for b, _ in promos.values()) < min(e for _, e in promos.values()),
            "round_trips": {k: acks[k] - promos[k][0] for k in promos if k in acks},
        }
    return r


def describe(r: dict, warm: bool, i: int) -> str:
    head = (f"ssh {r['n']} hosts {'warm' if warm else 'cold'} trial {i + 1} ({r['at']}, load {r['load']}): "
            f"kill -> every worker's first step {r['all_first']:.2f} s, worker:1's {r['killed_first']:.2f} s; "
            f"kill -> restart {r['to_restart']:.2f} s (the death noticed {r['noticed']:.2f}, blamed +{r['blamed']:.2f}, "
            f"the survivors stopped +{r['stopped']:.2f}), restart -> last {'promotion acknowledged' if warm else 'start'} "
            f"{r['launcher']:.2f} s, then TensorFlow {r['tf']:.2f} s")
    p = r["promotions"]
    if not p:
        return head
    rts = sorted(p["round_trips"].values())
    return (head + f"\n  promotions after the restart event: began {', '.join(f'{x:+.3f}' for x in p['began'])}; "
            f"ended {', '.join(f'{x:+.3f}' for x in p['ended'])}; all within {p['span']:.3f} s, longest "
            f"{p['longest']:.3f} s, overlap {p['overlap']:.1f} of {len(p['began'])} ({'all at once: each began before any ended' if p['at_once'] else 'not all at once'}); "
            f"round trip (began -> its promoted line here) {rts[0]:.3f}-{rts[-1]:.3f} s, median {statistics.median(rts):.3f} s")


def summary(rows: dict, counts: list[int]) -> list[str]:
    med = {(n, w): {k: statistics.median(r[k] for r in rows[(n, w)])
                    for k in ("all_first", "killed_first", "to_restart", "launcher", "tf", "noticed", "blamed", "stopped")}
           for n in counts for w in (True, False) if rows[(n, w)]}
    out = []
    for n in counts:
        w, c = med[(n, True)], med[(n, False)]
        out.append(f"ssh {n} hosts, medians: warm kill -> every first step {w['all_first']:.2f} s (worker:1's "
                   f"{w['killed_first']:.2f} s), cold {c['all_first']:.2f} s ({c['killed_first']:.2f} s): warm/cold "
                   f"{w['all_first'] / c['all_first']:.2f} (worker:1's {w['killed_first'] / c['killed_first']:.2f}; "
                   f"target <= 0.50); launcher's part {w['to_restart'] + w['launcher']:.2f} s (kill -> restart "
                   f"{w['to_restart']:.2f} s: noticed {w['noticed']:.2f}, blamed +{w['blamed']:.2f}, survivors stopped "
                   f"+{w['stopped']:.2f}; restart -> last promotion acknowledged {w['launcher']:.2f} s), "
                   f"TensorFlow's {w['tf']:.2f} s")
    lo, hi = min(counts), max(counts)
    if lo != hi:
        a, b = med[(lo, True)], med[(hi, True)]
        part = lambda m: m["to_restart"] + m["launcher"]  # noqa: E731
        out.append(f"warm recovery {hi} hosts / {lo} hosts: whole {b['all_first'] / a['all_first']:.2f}, "
                   f"worker:1's {b['killed_first'] / a['killed_first']:.2f}, the launcher's part "
                   f"{part(b) / part(a):.2f} ({part(a):.2f} -> {part(b):.2f} s), TensorFlow's {b['tf'] / a['tf']:.2f} "
                   f"(target <= 1.30)")
        out.extend(extrapolate(rows, med, lo, hi))
    return out


def extrapolate(rows: dict, med: dict, lo: int, hi: int) -> list[str]:
    """Recovery at 32 and 64 hosts from the measured round trips (see the module's docstring)."""
    warm = rows[(hi, True)]
    rts = [x for r in warm if r["promotions"] for x in r["promotions"]["round_trips"].values()]
    first_began = statistics.median(min(r["promotions"]["began"]) for r in warm if r["promotions"])
    rt = max(rts)
    part = {n: med[(n, True)]["to_restart"] + med[(n, True)]["launcher"] for n in (lo, hi)}
    slope = (part[hi] - part[lo]) / (hi - lo)
    out = [f"model: the launcher's part at N hosts = kill -> restart ({med[(hi, True)]['to_restart']:.2f} s at {hi}; "
           f"the survivors stopped over the pool, {PROMOTE_WIDTH} hosts at once) + restart -> first promotion "
           f"began ({first_began:.3f} s) + ceil(N/{PROMOTE_WIDTH}) waves x the longest round trip measured "
           f"({rt:.3f} s; median {statistics.median(rts):.3f} s over {len(rts)}); TensorFlow's part as at {hi} hosts "
           f"({med[(hi, True)]['tf']:.2f} s; each host its own CPU would shorten it); the line through {lo} and {hi} "
           f"hosts: {slope * 1000:+.1f} ms a host"]
    for n in (32, 64):
        fan = med[(hi, True)]["to_restart"] + first_began + math.ceil(n / PROMOTE_WIDTH) * rt
        line = part[hi] + slope * (n - hi)
        tf = med[(hi, True)]["tf"]
        out.append(f"  {n} hosts: launcher's part {fan:.2f} s by the fan-out ({line:.2f} s by the line), recovery "
                   f"{fan + tf:.2f} s ({line + tf:.2f} s); against {lo} hosts measured "
                   f"{med[(lo, True)]['all_first']:.2f} s: {(fan + tf) / med[(lo, True)]['all_first']:.2f} "
                   f"({(line + tf) / med[(lo, True)]['all_first']:.2f})")
    return out


def run(args) -> int:
    from tests.labs.ssh import Lab, have_prereqs

    counts = sorted({int(x) for x in args.hosts.split(",")})
    reason = have_prereqs()
    if reason:
        raise SystemExit(f"the ssh lab cannot start: {reason}")
    tmp = Path(tempfile.mkdtemp(prefix="tfcluster-recovery-hosts-"))
    lab = Lab(tmp / "lab", count=max(counts)).start()
    print(f"ssh lab, {max(counts)} hosts, plain TF_CONFIG script: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
          f"load average {load_average()}; trials in {tmp}", flush=True)
    rows = {(n, w): [] for n in counts for w in (True, False)}
    try:
        for i in range(args.trials):
            for n in counts:
                for warm in (True, False):
                    work = tmp / f"{n}-{'warm' if warm else 'cold'}{i}"
                    work.mkdir()
                    r = trial(work, lab, n, warm)
                    rows[(n, warm)].append(r)
                    print(describe(r, warm, i), flush=True)
        for line in summary(rows, counts):
            print(line, flush=True)
        print(f"load average now {load_average()}")
    finally:
        lab.stop()
    return 0
