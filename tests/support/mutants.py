"""Mutants of the supervisor's decisions, and whether the fast tests catch each: the check that
moving a decision's test from a TensorFlow run to the scripted seams and the stand-in tasks lost
nothing the suite catches.

    python -m tests.support.mutants [--no-baseline] [NAME ...]

Each mutant is one small edit of launcher/ that a user would notice (retry exit 1, an off-by-one
in restart.max_restarts, a host loss that spends a restart, the stopped peer not blamed, a
badput category dropped, a replan on an old port, ...), made in a copy of this checkout's files
(git ls-files: what is committed and staged, as edited now), never here. Its unit tests run there
first (python -m pytest -x: the scripted supervisor and the pure decisions, seconds, no
TensorFlow); only where they all pass, its stand-in tests (``standin``: local runs of stand-in
tasks, tens of seconds). A mutant whose tests all pass SURVIVED, and the script exits 1. Each line
names the test that killed it and that test's own seconds. The unmutated copy runs first, each
test file once, with its time: every one must pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUP = "tests/unit/supervise/"
SCRIPTED = SUP + "test_supervisor_scripted.py"
POLICY = (SCRIPTED, SUP + "test_policy.py", SUP + "test_policy_silence.py")
MEMBERS = (SCRIPTED, SUP + "test_membership.py", SUP + "test_spare_loss.py", "tests/unit/plan/test_elastic.py",
           "tests/unit/plan/test_reconcile.py")
BLAME = (SUP + "test_blame.py", SUP + "test_diagnose.py", SUP + "test_tf_diagnoses.py", SCRIPTED)
HANG = (SUP + "test_hangwatch.py", SUP + "test_stuck.py", SUP + "test_tfplace.py", SCRIPTED)
GOODPUT = ("tests/unit/record/test_goodput.py", "tests/unit/record/test_record_run.py")
# The stand-in tests (local runs of tasks that keep TensorFlow's rule without importing it), run
# where a mutant's unit tests all pass. (test_hang.py's straggler runs TensorFlow: not a stand-in.)
HANG_RUNS = ("tests/integration/test_hang.py", "-k", "not straggler")
GOODPUT_RUN = ("tests/integration/test_goodput.py::test_a_clean_run_shows_its_goodput_with_no_recovery_and_nothing_redone",)
TERMINAL_RUNS = ("tests/integration/test_terminal_closed.py",)


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # under the checkout
    old: str  # must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest arguments: the unit tests (files, node ids)
    standin: tuple[str, ...] = ()  # pytest arguments: the stand-in tests, run if the unit tests all pass


MUTANTS = (
    # The restart policy (what tests/integration/test_fault_tolerance.py once checked with TensorFlow).
    Mutant("exit 1 retried", "launcher/supervise/policy.py",
           "    if code in permanent_exit_codes:\n        hint = {",
           "    if code in permanent_exit_codes and code != 1:\n        hint = {", POLICY),
    Mutant("max_restarts off by one (one restart more)", "launcher/supervise/loop.py",
           "if failures >= self.restart.max_restarts:", "if failures > self.restart.max_restarts:", POLICY),
    Mutant("a preemption's exit (42, saved) counted a failure", "launcher/supervise/policy.py",
           "    return failure.code is not None and failure.code in codes and not failure.final",
           "    return False", POLICY),
    Mutant("a partition's TensorFlow abort (exit 1) taken for the task's own error", "launcher/supervise/policy.py",
           "    if code in permanent_exit_codes and peer_abort(failure.last_lines):", "    if False:", POLICY),
    Mutant("an evaluator's failure fails training", "launcher/supervise/policy.py",
           '    members = [k for k in ranked if task_type(k) != "evaluator"]', "    members = list(ranked)", POLICY),
    Mutant("a parameter_server worker restarted alone once more than max_restarts", "launcher/supervise/phases.py",
           "        if self.worker_restarts >= self.restart.max_restarts:",
           "        if self.worker_restarts > self.restart.max_restarts:", POLICY),
    Mutant("no startup watchdog", "launcher/supervise/phases.py",
           "        if now - watch.started <= self.watchdog.startup_timeout:\n            return False",
           "        if True:\n            return False", POLICY),
    Mutant("unused standbys left at success", "launcher/supervise/standby.py",
           "            self.backend.tasks.stop([s.handle for s in left], grace=0)\n"
           "            self.record.write(ev.StandbyStopped(tasks=list(self._waiting)))",
           "            pass", (SCRIPTED,)),
    Mutant("a closed terminal (SIGHUP) kills the tasks at once, no save", "launcher/app/up.py",
           '            supervisor.stop(hangup_reason("SIGHUP"))',
           "            supervisor.interrupt(); supervisor.interrupt()", (SCRIPTED, "tests/unit/app"), TERMINAL_RUNS),
    # Membership (the ssh elastic tests' decisions).
    Mutant("a host loss spends a restart", "launcher/supervise/loop.py",
           "                        number += 1  # a host loss is the infrastructure's, not a failure of the training",
           "                        number += 1; failures += 1", MEMBERS),
    Mutant("never move a task off a lost host (no spare used)", "launcher/plan/elastic.py",
           "    target = dict(zip(lost, spares))", "    target = {}", MEMBERS),
    Mutant("a host still answering after its session dropped is not suspect", "launcher/supervise/membership.py",
           "            elif host in sessions or known is not None:", "            elif known is not None:", MEMBERS),
    Mutant("max_host_losses off by one", "launcher/plan/elastic.py",
           "    if len(losses) <= limit:", "    if len(losses) <= limit + 1:", MEMBERS),
    Mutant("a smaller group never grows onto a host back", "launcher/supervise/membership.py",
           "        if not due(self.spec, self.plan, self.seen):\n            return False\n        self.record.write(ev.Regroup())",
           "        if True:\n            return False\n        self.record.write(ev.Regroup())", MEMBERS),
    Mutant("the stale task's fence: a replan takes an old port again", "launcher/plan/elastic.py",
           "    return frozenset((t.host, t.port) for plan in plans for t in plan.tasks if t.port is not None)",
           "    return frozenset()", MEMBERS),
    # Blame (the partition and stopped-peer tests).
    Mutant("the stopped/partitioned peer not named: the task it took down blamed", "launcher/supervise/blame.py",
           "    return Fault(root, blame.why, exits.get(root), others=tuple(others), consequences=tuple(consequences))",
           "    return Fault(key, blame.why, exits.get(key), others=tuple(others), consequences=tuple(consequences))",
           BLAME),
    Mutant("an abort naming no peer not laid on the one peer in trouble", "launcher/supervise/diagnose.py",
           "    if troubled and (peer_abort(lines) or named):", "    if False:", BLAME),
    Mutant("a taken port (exit 98) not diagnosed", "launcher/supervise/diagnose.py",
           "    if code != TASK_EXIT_PORT_TAKEN:\n        return None\n    for line",
           "    if True:\n        return None\n    for line", BLAME),
    # The hang watchdog and its triage (test_hang.py's stand-in runs).
    Mutant("a stopped task's state left out of the hang watchdog's verdict", "launcher/supervise/phases.py",
           '                   + (f"; {note}" if note else ""), None)', "                   + \"\", None)", HANG, HANG_RUNS),
    Mutant("no hang watchdog for a task that counts nothing", "launcher/supervise/phases.py",
           "        hung = self.hangs.silent(now, watch.exits, since)", "        hung = None", HANG, HANG_RUNS),
    Mutant("hang_timeout ignored (auto's limit used)", "launcher/supervise/hangwatch.py",
           "            limit = hang_limit(setting, gaps[key])", '            limit = hang_limit("auto", gaps[key])',
           HANG, HANG_RUNS),
    Mutant("a group stuck before its first step never called stalled", "launcher/supervise/hangwatch.py",
           "        if keys and not progress:", "        if False:", HANG, HANG_RUNS),
    Mutant("a legit pause under hang_timeout auto taken for a hang (auto without its floor)",
           "launcher/supervise/policy.py",
           "        return max(AUTO_FLOOR, AUTO_FACTOR * longest_gap)", "        return AUTO_FACTOR * longest_gap", HANG),
    Mutant("a stopped (SIGSTOP) task not named first", "launcher/supervise/stuck.py",
           "    if halted:", "    if False:", HANG, HANG_RUNS),
    Mutant("the odd one out inside TensorFlow not named", "launcher/supervise/stuck.py",
           "    if odd is not None:", "    if False:", HANG, HANG_RUNS),
    Mutant("a thread of TensorFlow's blocked in the kernel yields to a count", "launcher/supervise/stuck.py",
           "behind is not None and not blocked and (odd", "behind is not None and (odd", HANG),
    Mutant("a long pause once named a straggler (half the windows in a row)", "launcher/supervise/straggler.py",
           "HOLD = 6  # windows in a row that must agree", "HOLD = 3  # windows in a row that must agree",
           (SUP + "test_straggler.py",)),
    Mutant("one slow window names a straggler (HOLD 1)", "launcher/supervise/straggler.py",
           "HOLD = 6  # windows in a row that must agree", "HOLD = 1  # windows in a row that must agree",
           (SUP + "test_straggler.py",)),
    # Goodput's fold (test_goodput.py's stand-in run).
    Mutant("goodput: the wait for hosts dropped (into other)", "launcher/record/goodput.py",
           '            out["waiting"] += waited', '            out["waiting"] += 0.0', GOODPUT, GOODPUT_RUN),
    Mutant("goodput: a spare's loss counted a fault of the training", "launcher/record/goodput.py",
           "        elif isinstance(event, ev.HostLost) and event.spare:", "        elif False:", GOODPUT, GOODPUT_RUN),
    Mutant("goodput: backups while training counted twice", "launcher/record/goodput.py",
           '        out["checkpoint"] += backups', '        out["checkpoint"] += 2 * backups', GOODPUT, GOODPUT_RUN),
    # The fork server's fallback.
    Mutant("a failed fork not answered cold (the wrapper left to its timeout)", "launcher/remote/zygote.py",
           '            waits.answer(conn, {"cold": f"the zygote could not fork ({exc.strerror}: a limit on processes?)"})',
           "            conn.close()", ("tests/unit/remote/test_zygote.py",)),
)


def copy_checkout(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@dataclass(frozen=True)
class Result:
    code: int  # pytest's exit code
    summary: str  # its last line
    seconds: float
    killer: str = ""  # the first test that failed (or errored), with its own seconds


UNIT_TIMEOUT = 60  # s a unit test may take under a mutant (each takes a few at most unmutated, loaded)
STANDIN_TIMEOUT = 300  # s a stand-in run may take (test_hang.py's take up to 40 s each, loaded)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)")
_TOOK = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def run_tests(where: Path, args: tuple[str, ...], timeout: int) -> Result:
    """pytest over ``args`` in ``where``: stops at the first failure (-x), names it (-rfE) with
    its own seconds (--durations=0)."""
    # (--timeout: a mutant may leave a scripted run waiting for what never comes: caught, not hung)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-rfE", "--timeout", str(timeout),
           "--durations=0", "--durations-min=0", *args]
    env = dict(os.environ, PYTHONPATH=str(where))
    began = time.monotonic()
    res = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - began
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    failed = next((m.group(1) for line in lines if (m := _FAILED.match(line))), "")
    times: dict[str, float] = {}
    for line in lines:
        if m := _TOOK.match(line):
            times[m.group(2)] = times.get(m.group(2), 0.0) + float(m.group(1))
    killer = f"{failed} ({times[failed]:.1f} s)" if failed in times else failed
    return Result(res.returncode, lines[-1] if lines else res.stderr[-300:], took, killer)


def baseline(base: Path, chosen: list[Mutant]) -> bool:
    """Each test file (or stand-in selection) the chosen mutants use, once, unmutated: its time."""
    seen: list[tuple[str, ...]] = []
    for mutant in chosen:
        for one in [(t,) for t in mutant.tests] + ([mutant.standin] if mutant.standin else []):
            if one not in seen:
                seen.append(one)
    for args in seen:
        res = run_tests(base, args, STANDIN_TIMEOUT)
        print(f"unmutated {' '.join(args)}: {res.seconds:.0f} s ({res.summary})", flush=True)
        if res.code != 0:
            print(f"unmutated: {' '.join(args)} fails: fix it first")
            return False
    return True


def main(args: list[str]) -> int:
    """``args``: mutant names (none: all); ``--no-baseline`` skips the unmutated run (only right
    after one of the same checkout passed)."""
    names = [a for a in args if a != "--no-baseline"]
    chosen = [m for m in MUTANTS if not names or m.name in names]
    assert len(chosen) == len(set(names)) or not names, f"no mutant named so: {sorted(set(names) - {m.name for m in chosen})}"
    survived = []
    with tempfile.TemporaryDirectory(prefix="tfcluster-mutants-") as tmp:
        base = Path(tmp) / "checkout"
        copy_checkout(base)
        if "--no-baseline" not in args and not baseline(base, chosen):
            return 2
        for mutant in chosen:
            path = base / mutant.path
            text = path.read_text()
            assert text.count(mutant.old) == 1, f"{mutant.name}: {mutant.path} has the text {text.count(mutant.old)} times"
            path.write_text(text.replace(mutant.old, mutant.new))
            try:
                res, tier = run_tests(base, mutant.tests, UNIT_TIMEOUT), "unit"
                if res.code == 0 and mutant.standin:
                    res, tier = run_tests(base, mutant.standin, STANDIN_TIMEOUT), "stand-in"
            finally:
                path.write_text(text)
            line = _line(mutant, text)
            if res.code == 1:
                print(f"caught    {mutant.name} ({line}) by {tier} {res.killer}; {res.seconds:.0f} s to it", flush=True)
            else:
                verdict = "SURVIVED" if res.code == 0 else f"error (pytest exit {res.code})"
                print(f"{verdict:9} {mutant.name} ({line}; {res.seconds:.0f} s: {res.summary})", flush=True)
                survived += [mutant.name] if res.code == 0 else []
    if survived:
        print(f"survived: {', '.join(survived)}")
    return 1 if survived else 0


def _line(mutant: Mutant, text: str) -> str:
    """``path:line`` of the mutated text."""
    return f"{mutant.path}:{text[:text.index(mutant.old)].count(chr(10)) + 1}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
