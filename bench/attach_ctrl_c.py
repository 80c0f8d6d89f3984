"""Does Ctrl-C on `tfcluster attach` return at once and leave the run going, on a busy machine?

Tried as a user would, for each mode (``local``: a detached run on this machine; ``ssh``: a
detached run on a lab of two real sshd hosts with ``ssh.supervisor: h1``, so attach relays from
the supervisor on h1 over ssh; the lab is tests/labs/ssh.py, needs root): `tfcluster up --detach`
of a plain script (two workers printing a line every 0.2 s, no TensorFlow), then TRIES times:
`tfcluster attach`, wait for a task line, Ctrl-C (SIGINT to attach's process group, as a
terminal sends it), time until attach has exited, and `tfcluster status` must still say running.
Then `tfcluster down`. With ``--hogs N``, N busy loops run at a higher priority than tfcluster.

    python bench/attach_ctrl_c.py --tries 5 --modes local,ssh --hogs 2

An attach still there one second after its Ctrl-C is asked for a dump of every thread's stack
(faulthandler on SIGUSR2, registered by the small runner that starts tfcluster here), so a slow
exit says where it was blocked; the dump is printed under that try. Prints one line per try, the
figures per mode (median and worst) and the load average met. Exit 1 if any try took longer than
--limit seconds (5: the issue's bar), did not exit 0 or left the run not running.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.ports import free_base  # noqa: E402
PY = sys.executable

# A plain script as a user writes one for a cluster: it reads TF_CONFIG, listens on its task's
# port (what tells the launcher it is up) and prints a step line every 0.2 s until SIGTERM.
TASK = (
    "import json, os, signal, socket, sys, time\n"
    "c = json.loads(os.environ['TF_CONFIG']); i = c['task']['index']\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(c['cluster']['worker'][i].rsplit(':', 1)[1]))); s.listen()\n"
    "stop = []; signal.signal(signal.SIGTERM, lambda *a: stop.append(1))\n"
    "print('tfcluster-start epoch=0 step=0 global_step=0 global_batch=64 time=%.3f' % time.time(), flush=True)\n"
    "step = 0\n"
    "while not stop and step < 6000:\n"
    "    step += 1\n"
    "    time.sleep(0.2)\n"
    "    print('tfcluster-step epoch=0 step=%d global_step=%d loss=%.4f time=%.3f' % (step, step, 1 / step, time.time()),"
    " flush=True)\n"
    "if stop: print('tfcluster-preempted global_step=%d' % step, flush=True); sys.exit(143)\n"
)

# tfcluster with a stack dump on SIGUSR2 (every thread), written to its stderr: what the bench
# asks of an attach that has not exited one second after its Ctrl-C.
RUNNER = (
    "import faulthandler, runpy, signal, sys\n"
    "faulthandler.register(signal.SIGUSR2, all_threads=True)\n"
    "sys.argv = ['tfcluster'] + sys.argv[1:]\n"
    "runpy.run_module('launcher', run_name='__main__', alter_sys=True)\n"
)


def tfcluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def local_spec(work: Path) -> Path:
    spec = {"name": "ctrlc", "strategy": "multi_worker_mirrored", "entrypoint": [PY, "-c", TASK],
            "tasks": {"worker": 2}, "ports": {"base": free_base(2)}, "watchdog": {"stop_grace": 2}}
    path = work / "local.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def ssh_spec(work: Path, lab) -> Path:
    spec = {"name": "ctrlcssh", "strategy": "multi_worker_mirrored", "backend": "ssh", "entrypoint": [PY, "-c", TASK],
            "hosts": lab.hosts_yaml(["h1", "h2"]), "tasks": {"worker": 2}, "ports": {"base": 23456},
            "watchdog": {"startup_timeout": 120, "stop_grace": 2},
            "ssh": {"known_hosts": str(lab.known_hosts), "python": PY, "remote_dir": str(work / "remote"),
                    "workdir": str(ROOT), "lease": 4, "connect_timeout": 3, "probe_timeout": 1.5, "require": [],
                    "supervisor": "h1"}}
    path = work / "ssh.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def one_try(spec: Path, limit: float) -> tuple[float, bool, str]:
    """(seconds from Ctrl-C to attach's exit, whether all is well, what to say)."""
    proc = subprocess.Popen([PY, "-c", RUNNER, "attach", str(spec)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    said_at: list[float] = []  # when attach said it detached (monotonic)

    def read_err() -> None:
        for line in proc.stderr:
            err.append(line)
            if line.startswith("tfcluster: detached") and not said_at:
                said_at.append(time.monotonic())

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    timer = threading.Timer(120, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    seen = None
    for line in proc.stdout:
        if line.startswith("[worker:"):
            seen = line.strip()
            break
    timer.cancel()
    if seen is None:
        proc.wait(timeout=30)
        return float("nan"), False, f"no task line within 120 s (attach exited {proc.returncode}): {''.join(err)[-600:]}"
    # The rest of attach's output is read away so that a full pipe never holds attach back.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
    dumped = False
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        dumped = True
        try:
            os.kill(proc.pid, signal.SIGUSR2)  # where is it blocked? (faulthandler: every thread's stack)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=max(1.0, 3 * limit))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    took = time.monotonic() - started
    reader.join(10)
    text = "".join(err)
    st = tfcluster("status", str(spec), timeout=120)
    running = st.returncode == 0 and ": running" in st.stdout
    ok = proc.returncode == 0 and took <= limit and running
    said = [ln for ln in text.splitlines() if ln.startswith("tfcluster: detached")][-1:] or text.strip().splitlines()[-1:]
    # Ctrl-C to "detached" is attach's own work; the rest is its process ending (interpreter shutdown).
    split = f"said detached after {said_at[0] - started:.3f} s, " if said_at else "never said detached, "
    note = split + f"exit {proc.returncode}, status {'running' if running else 'NOT running: ' + st.stdout.strip()[-200:]}; " \
           f"attach said {said[0] if said else '(nothing)'!r}"
    if dumped:
        note += "\n    still there 1 s after Ctrl-C; its threads then:\n" + "\n".join("    " + ln for ln in text.splitlines())
    return took, ok, note


def run_mode(mode: str, spec: Path, tries: int, limit: float) -> tuple[list[float], int]:
    times, bad = [], 0
    try:
        up = tfcluster("up", str(spec), "--detach", timeout=300)
        if up.returncode != 0:
            raise SystemExit(f"attach_ctrl_c: {mode}: up --detach failed (exit {up.returncode}): "
                             f"{(up.stderr.strip().splitlines() or [''])[-1]}")
        for i in range(1, tries + 1):
            took, ok, note = one_try(spec, limit)
            times.append(took)
            bad += not ok
            load = os.getloadavg()
            print(f"{mode} try {i}: Ctrl-C to exit {took:.3f} s, {'ok' if ok else 'FAILED'}; {note}; "
                  f"load {load[0]:.2f}", flush=True)
    finally:
        down = tfcluster("down", str(spec), timeout=300)
        if down.returncode != 0:
            print(f"{mode}: down exited {down.returncode}: {down.stderr.strip()[-300:]}", file=sys.stderr)
    return times, bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--modes", default="local,ssh")
    parser.add_argument("--hogs", type=int, default=0, help="busy loops at a higher priority (nice -5)")
    parser.add_argument("--limit", type=float, default=5.0, help="seconds a Ctrl-C may take (the issue's bar)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    hogs = [subprocess.Popen(["nice", "-n", "-5", "sh", "-c", "while :; do :; done"]) for _ in range(args.hogs)]
    work = Path(tempfile.mkdtemp(prefix="tfc-ctrlc-"))
    lab = None
    results = {}
    bad = 0
    try:
        for mode in modes:
            if mode == "local":
                spec = local_spec(work)
            elif mode == "ssh":
                from tests.labs.ssh import Lab, have_prereqs

                reason = have_prereqs()
                if reason:
                    print(f"attach_ctrl_c: ssh: {reason}", file=sys.stderr)
                    return 2
                lab = Lab(work / "lab", count=2, prefix=os.environ.get("TFCLUSTER_LAB_PREFIX", "tfcb"))
                lab.start()
                spec = ssh_spec(work, lab)
            else:
                raise SystemExit(f"attach_ctrl_c: unknown mode {mode!r} (local or ssh)")
            results[mode], wrong = run_mode(mode, spec, args.tries, args.limit)
            bad += wrong
    finally:
        for h in hogs:
            h.kill()
        if lab is not None:
            lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    for mode, times in results.items():
        print(f"attach_ctrl_c: {mode}: {len(times)} tries, Ctrl-C to exit median {statistics.median(times):.3f} s, "
              f"worst {max(times):.3f} s")
    print(f"attach_ctrl_c: {bad} tries failed (over {args.limit:g} s, not exit 0, or the run not running); "
          f"--hogs {args.hogs}; {os.cpu_count()} CPUs; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
