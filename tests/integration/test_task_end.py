"""A task's end, with a user's script under tfcluster's stub and every task forked by the run's
zygote (the local backend's default), as a cold start's end would be.

A forked task's own objects end as at a cold exit (launcher/remote/zygotechild.py end_own_objects):
TensorFlow's summary writer that the script never flushed or closed writes every scalar. A
TensorFlow error's stack of where its op was made ("Detected at node ... defined at") has the
frames ``python train.py`` has, none of the zygote's (zygotechild.hide_our_frames) or the stub's
(pystandby.py _hide_frames), forked or cold.

A MultiWorkerMirroredStrategy group ends together (launcher/contract/exitsync.py), 2 workers. A worker whose script has ended leaves only once its peer's has too, so no peer can
still be pulling the reply to its last collective (the end of a run that trained to the end, lost
as "Collective ops is aborted by: Socket closed ... RecvBuf"); and only for END_WAIT seconds at
most: a chief that works on alone does not hold its workers for longer."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import launcher.record.events as ev
from launcher.contract.exitsync import END_WAIT
from tests.support.specs import local_spec
from tests.support.tfrun import events, run_dir, tensorboard_scalars, up

pytestmark = [pytest.mark.integration, pytest.mark.tf]

# worker:0 stays LINGER s after the group's last step, then ends; worker:1 ends at once. Each says
# when its script ended (this machine's clock, which the run record's times are on too).
SCRIPT = """\
import json, os, sys, time
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
me = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
step = tf.function(lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None))
for _ in range(3):
    step()
time.sleep(float(sys.argv[1]) if me == 0 else 0.0)
print(f"script-end {time.time():.3f}", flush=True)
"""
END = re.compile(r"^script-end (\d+\.\d+)$", re.M)


WRITER = """\
import sys
import tensorflow as tf

writer = tf.summary.create_file_writer(sys.argv[1])
writer.set_as_default()
for step in range(5):
    tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
print("wrote 5", flush=True)
"""


def test_a_forked_tasks_summary_writer_never_flushed_writes_every_scalar(tmp_path):
    (tmp_path / "train.py").write_text(WRITER)
    spec = local_spec(tmp_path, f"[{sys.executable}, train.py, '{tmp_path / 'tb'}']", name="demo", tasks="{worker: 1}",
                      strategy="mirrored", env={"TF_CPP_MIN_LOG_LEVEL": "'2'"}, extra="restart: {max_restarts: 0}\n")
    result = up(spec, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "ready pid=" in (run_dir(spec) / "zygote.log").read_text(), "the task was not forked by the run's zygote"
    # (the writer's flush comes every 2 minutes, or at its end: a forked task's os._exit had only the header)
    assert tensorboard_scalars(tmp_path / "tb") == [("loss", i, pytest.approx(1.0 / (i + 1))) for i in range(5)]


FAILS = """\
import tensorflow as tf

@tf.function
def step(x):
    return tf.debugging.check_numerics(x / 0.0, "bad step")

try:
    step(tf.constant(0.0))
except tf.errors.InvalidArgumentError as exc:
    print("defined-at " + "|".join(line.strip() for line in exc.message.splitlines() if line.strip().startswith("File ")))
"""
DEFINED_AT = re.compile(r"^defined-at (.*)$", re.M)


def test_a_tensorflow_errors_op_stack_is_a_cold_starts(tmp_path):
    said = {}
    for how, warm in (("forked", "true"), ("cold", "false")):
        (tmp_path / how).mkdir()
        (tmp_path / how / "train.py").write_text(FAILS)
        spec = local_spec(tmp_path / how, f"[{sys.executable}, train.py]", name="demo", tasks="{worker: 1}",
                          env={"TF_CPP_MIN_LOG_LEVEL": "'2'"},  # (MWMS: a port, so the cold start checks it after the import too)
                          extra=f"restart: {{max_restarts: 0, warm_standby: {warm}}}\n")
        result = up(spec, timeout=300)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        forked = "ready pid=" in ((run_dir(spec) / "zygote.log").read_text()
                                  if (run_dir(spec) / "zygote.log").exists() else "")
        assert forked is (how == "forked"), how
        found = DEFINED_AT.findall((run_dir(spec) / "logs" / "worker-0.log").read_text())
        assert len(found) == 1, (how, found)
        said[how] = found[0].replace(str(tmp_path / how), "DIR").split("|")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "train.py").write_text(FAILS)
    plain = subprocess.run([sys.executable, "train.py"], cwd=tmp_path / "plain", capture_output=True, text=True,
                           timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    said["plain"] = DEFINED_AT.findall(plain.stdout)[0].replace(str(tmp_path / "plain"), "DIR").split("|")
    assert said["plain"] == ['File "DIR/train.py", line 8, in <module>', 'File "DIR/train.py", line 5, in step'], said
    # (before: 7 frames of zygote.py, zygotewait.py and zygotechild.py, then 3 of the stub's
    # "<string>", in the forked task's; the stub's 3 in the cold start's)
    assert said["forked"] == said["cold"] == said["plain"], said


def _run(tmp_path, linger: float) -> tuple[dict[str, float], dict[str, float]]:
    """(when each worker's script ended, when each worker's process exited), for one run."""
    tmp_path.mkdir()
    (tmp_path / "train.py").write_text(SCRIPT)
    spec = local_spec(tmp_path, f"[{sys.executable}, train.py, '{linger}']", name="demo",
                      env={"TF_CPP_MIN_LOG_LEVEL": "'2'"}, watchdog="{startup_timeout: 180, stop_grace: 2}",
                      extra="restart: {max_restarts: 0}\n")
    result = up(spec, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    run = run_dir(spec)
    assert "ready pid=" in (run / "zygote.log").read_text(), "the tasks were not forked by the run's zygote"
    ended = {}
    for key in ("worker:0", "worker:1"):
        found = END.findall((run / "logs" / f"{key.replace(':', '-')}.log").read_text())
        assert len(found) == 1, (key, found)
        ended[key] = float(found[0])
    exited = {e["task"]: e.time for e in events(spec) if isinstance(e, ev.Exit)}
    assert set(exited) == {"worker:0", "worker:1"}, exited
    return ended, exited


def test_a_worker_leaves_once_its_peer_has_ended_and_waits_no_longer_than_exit_wait(tmp_path):
    # The peer ends 3 s after this worker's script: this worker waits for it, not for END_WAIT.
    ended, exited = _run(tmp_path / "a", 3.0)
    assert ended["worker:0"] - ended["worker:1"] > 2.5, ended
    assert exited["worker:1"] >= ended["worker:0"] - 0.05, (ended, exited)  # (not before its peer's end)
    assert exited["worker:1"] - ended["worker:0"] < 2.0, (ended, exited)  # (soon after: the barrier passed)
    # The peer works on alone for longer than END_WAIT: this worker leaves after END_WAIT.
    ended, exited = _run(tmp_path / "b", END_WAIT + 5)
    waited = exited["worker:1"] - ended["worker:1"]
    assert END_WAIT - 0.5 <= waited < END_WAIT + 3, (waited, ended, exited)
    assert exited["worker:1"] < ended["worker:0"] - 1, (ended, exited)
    # The chief, arriving after the barrier ran out, is not held again.
    assert exited["worker:0"] - ended["worker:0"] < 2.0, (ended, exited)
