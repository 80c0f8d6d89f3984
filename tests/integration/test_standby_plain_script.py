"""Warm standby for a Python entrypoint of one's own, by default (launcher/remote/pystandby.py): a
user's plain TF_CONFIG script (tests/support/plain_tf_config.py, not one line for tfcluster) on 2
local workers, every process of it forked by the run's zygote (launcher/remote/zygote.py),
worker:1 SIGKILLed, restarted by promoting the standbys, which run the script as its cold start
did; and the stub's exit codes and tracebacks against a cold start of the same command."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.supervise.standby import stub_command
import launcher.record.events as ev
from tests.support.cli import ROOT, tfcluster
from tests.support.specs import local_spec
from tests.support.tfrun import assert_no_processes, events, kill_task, run_and_act, run_dir
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration]

PLAIN = ROOT / "tests" / "support" / "plain_tf_config.py"
READY = r"^\[worker:\d\] \(standby\) tfcluster-standby ready"
START = re.compile(r"^\[(?P<key>worker:\d)\] plain-start (?P<json>\{.*\})$", re.M)


def test_a_plain_tf_config_script_is_restarted_by_its_promoted_standby_as_its_cold_start_ran(tmp_path):
    (tmp_path / "sub").mkdir()
    shutil.copy(PLAIN, tmp_path / "sub" / "train.py")
    (tmp_path / "state").mkdir()
    # A relative script path from the run's workdir (the spec's directory): sys.argv[0] stays as
    # given, sys.path[0] and __file__ are made absolute, as python does.
    # As many steps as it takes the standbys to be ready (a loaded machine imports TensorFlow
    # slowly), then, with the kill, 30 more than the first attempt reached (read at each start).
    steps = tmp_path / "steps"
    steps.write_text("100000")
    spec = local_spec(tmp_path, f"[{sys.executable}, sub/train.py, --steps, '@{steps}', --delay, '0.1', --state, "
                                f"{tmp_path / 'state'}]", name="demo",
                      env={"TF_CPP_MIN_LOG_LEVEL": "'2'"},
                      watchdog="{startup_timeout: 180, stop_grace: 2}", extra="restart: {max_restarts: 1}\n")
    plan = tfcluster("plan", str(spec))
    assert plan.returncode == 0, plan.stderr
    assert "warm standby: on (auto: a Python entrypoint)" in plan.stdout, plan.stdout
    assert "sub/train.py --steps ...: under tfcluster's standby stub" in plan.stdout, plan.stdout

    def kill(_proc):
        kill_task(spec, "worker:1", signal.SIGKILL)
        # (worker:0 writes the step after its own line: worker:1's first line can come before it)
        written = tmp_path / "state" / "step"
        wait_for(written.exists, 30, what="worker:0's step file (tests/support/plain_tf_config.py writes it)")
        reached = int(written.read_text())
        steps.write_text(str(reached + 30))
        end.append(reached + 30)

    def look(_proc):
        # Both standbys ready, and nothing forked for them yet: the zygote's children are the two
        # running workers' waiters, each the parent of its worker (a standby is its wrapper until
        # promoted: taskwrap.py --standby-defer).
        (pid,) = re.findall(r"ready pid=(\d+)", (run_dir(spec) / "zygote.log").read_text())
        waiters = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        forked[:] = [c for w in waiters for c in Path(f"/proc/{w}/task/{w}/children").read_text().split()]
        assert len(waiters) == 2, waiters

    end: list[int] = []
    forked: list[str] = []
    code, out = run_and_act(spec, [(READY, lambda p: None), (READY, look),
                                   (r"^\[worker:1\] plain-step \d+ ", kill)], timeout=400)
    assert code == 0, out[-4000:]
    assert "run succeeded after 2 attempt(s)" in out, out[-3000:]

    recorded = events(spec)
    (started,) = [e for e in recorded if isinstance(e, ev.StandbyStart)]
    promoted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.StandbyPromoted)}
    restarted = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.Start) and e["attempt"] == 1}
    first = {e["task"]: e["pid"] for e in recorded if isinstance(e, ev.Start) and e["attempt"] == 0}
    assert promoted == restarted == started["pids"] and set(promoted) == {"worker:0", "worker:1"}, (promoted, restarted)
    assert "[worker:0] tfcluster-standby promoted" in out and "[worker:1] tfcluster-standby promoted" in out

    # Each task's script said what it was given: the cold start (attempt 0) and the promoted
    # standby (attempt 1) agree on all of it but the pids. Every one of them is forked by the run's
    # zygote (its log says its pid), the child of its own waiter there, not of its wrapper (the
    # record's pid): TensorFlow was imported once for the four.
    said = [(m["key"], json.loads(m["json"])) for m in START.finditer(out)]
    said = [(k, s) for i, (k, s) in enumerate(said) if (k, s) not in said[:i]]  # (the report repeats a last line)
    (zygote,) = re.findall(r"tfcluster-zygote ready pid=(\d+) imported=tensorflow",
                           (run_dir(spec) / "zygote.log").read_text())
    assert "started without the zygote" not in out, out[-3000:]
    cold_pids = {[s for k, s in said if k == key][0]["pid"] for key in ("worker:0", "worker:1")}
    assert sorted(int(f) for f in forked) == sorted(cold_pids), (forked, cold_pids)
    for key in ("worker:0", "worker:1"):
        cold, warm = [s for k, s in said if k == key]
        assert cold["gppid"] == warm["gppid"] == int(zygote), (cold, warm, zygote)
        assert cold["ppid"] not in (first[key], promoted[key], int(zygote))
        assert cold["pid"] != warm["pid"] and cold["ppid"] != warm["ppid"]
        for s in (cold, warm):
            del s["pid"], s["ppid"], s["gppid"]
        assert warm == cold, (key, cold, warm)
        assert cold["argv"][0] == "sub/train.py" and cold["path0"] == str((tmp_path / "sub").resolve())
        assert cold["name"] == "__main__" and cold["usr1_blocked"] is False
    assert set(first) == {"worker:0", "worker:1"} and not set(first.values()) & set(promoted.values())

    # It finished right: every step all-reduced both workers' 1.0, both said done, and the second
    # attempt went on from the step the first one reached (the script's own progress file).
    sums = re.findall(r"plain-step (\d+) sum=(\S+)", out)
    assert sums and {s for _, s in sums} == {"2"}, sorted({s for _, s in sums})
    (last,) = end
    assert f"plain-done worker:0 steps={last}" in out and f"plain-done worker:1 steps={last}" in out
    assert (tmp_path / "state" / "step").read_text() == str(last)
    assert_no_processes(spec)


# ------------------------------------------------------------------ exit codes and tracebacks


def _cold(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _warm(argv: list[str], cwd: Path, env: dict, promotion: Path) -> subprocess.Popen:
    """The standby the backends start for ``argv``: TFCLUSTER_STANDBY=1 and a promotion file."""
    promotion.write_text(json.dumps({"ATTEMPT_ONLY": "1"}))
    return subprocess.Popen(stub_command(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "TFCLUSTER_STANDBY": "1", "TFCLUSTER_STANDBY_ENV": str(promotion)})


CASES = {
    # (TensorFlow's name written in two halves: the stub reads the script's text for it)
    "exit7": ("import sys, os\nprint(os.environ.get('ATTEMPT_ONLY'), 'TFCLUSTER_STANDBY' in os.environ, "
              "('tensor' + 'flow') in sys.modules)\n"
              "print(sys.orig_argv[1:])\n"  # (the command as written: no '-c <the stub>')
              "sys.exit(7)\n", None),
    "raises": ("def f():\n    raise ValueError('boom')\n\nf()\n", None),
    "message": ("import sys\nsys.exit('stopped: ' + sys.argv[1])\n", None),
    "syntax": ("x = (\n", None),
    "module": ("import sys\nprint(__name__, __spec__.name, sys.argv, sys.orig_argv[1:])\nraise SystemExit(3)\n", "-m"),
    # The stub imports TensorFlow ahead only for a script that names it (or keras), as this one does.
    "tfnamed": ("import sys  # keras\nprint(('tensor' + 'flow') in sys.modules)\n", None),
}


def test_the_stub_exits_and_reports_errors_as_a_cold_start_does(tmp_path):
    """Each script run cold (``python [-u] script.py a``, ``python -m pkg a``) and as a promoted
    standby: the same exit code, the same stderr at its end (the traceback without the stub's
    frames), the same stdout after the ``promoted`` line (but what the promotion file changed and
TensorFlow, imported ahead for a script that names it)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONDONTWRITEBYTECODE": "1"}
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    runs = {}
    for name, (text, how) in CASES.items():
        if how == "-m":
            (tmp_path / "pkg" / "__main__.py").write_text(text)
            argv = [sys.executable, "-m", "pkg", "a"]
        else:
            # (each in a folder of its own)
            (tmp_path / name).mkdir()
            (tmp_path / name / f"{name}.py").write_text(text)
            argv = [sys.executable, "-u", f"{name}/{name}.py", "a"]
        runs[name] = (argv, _warm(argv, tmp_path, env, tmp_path / f"{name}.promotion.json"))
    try:
        for name, (argv, proc) in runs.items():
            lines: list[str] = []
            wait_for(lambda: (lines.append(proc.stdout.readline()) or "tfcluster-standby ready" in lines[-1]
                              or proc.poll() is not None), 180, what=f"{name}'s standby to say it is ready")
            assert proc.poll() is None, (name, lines, proc.stderr.read())
            proc.send_signal(signal.SIGUSR1)
            out, err = proc.communicate(timeout=120)
            # The stub's beats (launcher/contract/liveness.py) are the launcher's, which takes them out.
            err = "".join(line for line in err.splitlines(True) if not line.startswith("tfcluster-beat "))
            cold = _cold(argv, tmp_path, env)
            assert proc.returncode == cold.returncode, (name, proc.returncode, cold.returncode, err[-2000:])
            expected = {"exit7": ("None False False", "1 False False"),
                        "tfnamed": ("False", "True")}.get(name, ("", ""))
            assert out.split("tfcluster-standby promoted\n", 1)[1] == cold.stdout.replace(*expected), \
                (name, out, cold.stdout)
            assert err.endswith(cold.stderr), (name, err[-2000:], cold.stderr)
            assert bool(cold.stderr.strip()) is (name in ("raises", "message", "syntax")), (name, cold.stderr)
            assert "<string>" not in err, (name, err[-2000:])
            assert not (tmp_path / f"{name}.promotion.json").exists()
    finally:  # (a case that fails leaves the standbys after it waiting to be promoted: ended here)
        for _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [runs[n][1].returncode for n in CASES] == [7, 1, 1, 1, 3, 0]
