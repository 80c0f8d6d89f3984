"""Mutants of the supervisor's decisions, and whether the unit-speed tests catch each: the check that
moving a decision's test from a TensorFlow run to the scripted seams lost nothing the suite catches.

    python -m tests.support.mutants [NAME ...]

Each mutant is one small edit of launcher/ (retry exit 1, an off-by-one in restart.max_restarts, no
startup watchdog, never move a task off a lost host, ...), made in a copy of this checkout's files
(git ls-files: what is committed and staged, as edited now), never here. The tests named for it
run there (python -m pytest, the scripted supervisor tests: seconds, no TensorFlow); a mutant whose
tests all pass SURVIVED, and the script exits 1. The unmutated copy runs first: its tests must pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = "tests/unit/supervise/test_supervisor_scripted.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under the checkout
    old: str  # must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest node ids or files (-k with ``k``)
    k: str = ""


MUTANTS = (
    Mutant("exit 1 retried", "launcher/supervise/policy.py",
           "    if code in permanent_exit_codes:\n        hint = {",
           "    if code in permanent_exit_codes and code != 1:\n        hint = {",
           (SCRIPTED,), k="exit_1 or permanent_exit"),
    Mutant("max_restarts off by one (one restart more)", "launcher/supervise/loop.py",
           "if failures >= self.restart.max_restarts:", "if failures > self.restart.max_restarts:",
           (SCRIPTED,), k="max_restarts or budget"),
    Mutant("no startup watchdog", "launcher/supervise/phases.py",
           "        if now - watch.started <= self.watchdog.startup_timeout:\n            return False",
           "        if True:\n            return False",
           (SCRIPTED,), k="startup_watchdog or never_starts"),
    Mutant("a stopped task's state left out of the hang watchdog's verdict", "launcher/supervise/phases.py",
           '                   + (f"; {note}" if note else ""), None)', "                   + \"\", None)",
           (SCRIPTED,), k="hang_watchdog"),
    Mutant("no hang watchdog", "launcher/supervise/phases.py",
           "        hung = self.hangs.silent(now, watch.exits, since)", "        hung = None",
           (SCRIPTED,), k="hang_watchdog"),
    Mutant("unused standbys left at success", "launcher/supervise/standby.py",
           "            self.backend.tasks.stop([s.handle for s in left], grace=0)\n"
           "            self.record.write(ev.StandbyStopped(tasks=list(self._waiting)))",
           "            pass",
           (SCRIPTED,), k="standby"),
    Mutant("never move a task off a lost host (no spare used)", "launcher/plan/elastic.py",
           "    target = dict(zip(lost, spares))", "    target = {}",
           (SCRIPTED, "tests/unit/supervise/test_spare_loss.py", "tests/unit/supervise/test_membership.py"),
           k="spare or lost or moves or discovery"),
    Mutant("a host still answering after its session dropped is not suspect", "launcher/supervise/membership.py",
           "            elif host in sessions or host in quiet:",
           "            elif host in quiet:",
           (SCRIPTED,), k="session or shutting or still_answering"),
    Mutant("max_host_losses off by one", "launcher/plan/elastic.py",
           "    if len(losses) <= limit:", "    if len(losses) <= limit + 1:",
           (SCRIPTED,), k="max_host_losses"),
    Mutant("a smaller group never grows onto a host back", "launcher/supervise/membership.py",
           "        if not due(self.spec, self.plan, self.seen):\n            return False\n        self.console.info(\"growing",
           "        if True:\n            return False\n        self.console.info(\"growing",
           (SCRIPTED,), k="grow"),
    Mutant("a legit pause under hang_timeout auto taken for a hang (auto without its floor)",
           "launcher/supervise/policy.py",
           "        return max(AUTO_FLOOR, AUTO_FACTOR * longest_gap)", "        return AUTO_FACTOR * longest_gap",
           ("tests/unit/supervise/test_hangwatch.py",), k="legit or auto"),
    Mutant("a long pause once named a straggler (half the windows in a row)", "launcher/supervise/straggler.py",
           "HOLD = 6  # windows in a row that must agree", "HOLD = 3  # windows in a row that must agree",
           ("tests/unit/supervise/test_straggler.py",), k="pause"),
)


def copy_checkout(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def run_tests(where: Path, mutant: Mutant) -> tuple[int, str, float]:
    """(pytest's exit code, its summary line, seconds) for ``mutant``'s tests in ``where``."""
    # (--timeout: a mutant may leave a scripted run waiting for what never comes: caught, not hung)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--timeout", "120", *mutant.tests]
    if mutant.k:
        cmd += ["-k", mutant.k]
    env = dict(os.environ, PYTHONPATH=str(where))
    began = time.monotonic()
    res = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    return res.returncode, (lines[-1] if lines else res.stderr[-300:]), time.monotonic() - began


def main(names: list[str]) -> int:
    chosen = [m for m in MUTANTS if not names or m.name in names]
    survived = []
    with tempfile.TemporaryDirectory(prefix="tfcluster-mutants-") as tmp:
        base = Path(tmp) / "checkout"
        copy_checkout(base)
        for mutant in chosen:
            code, summary, took = run_tests(base, mutant)
            if code != 0:
                print(f"unmutated: the tests of {mutant.name!r} fail ({summary}): fix them first")
                return 2
        print("unmutated: every mutant's tests pass")
        for mutant in chosen:
            path = base / mutant.path
            text = path.read_text()
            assert text.count(mutant.old) == 1, f"{mutant.name}: {mutant.path} has the text {text.count(mutant.old)} times"
            path.write_text(text.replace(mutant.old, mutant.new))
            try:
                code, summary, took = run_tests(base, mutant)
            finally:
                path.write_text(text)
            verdict = "caught" if code == 1 else ("SURVIVED" if code == 0 else f"error (pytest exit {code})")
            print(f"{verdict:9} {mutant.name}  ({mutant.path}; {took:.0f} s: {summary})")
            if code == 0:
                survived.append(mutant.name)
    if survived:
        print(f"survived: {', '.join(survived)}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
