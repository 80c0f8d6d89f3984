"""``devices: {threads: ...}`` reaches TensorFlow: two tasks on this machine run a
script that starts TF's runtime and reports the thread pools TensorFlow made. TF names its inter-op
pool's threads ``tf_Compute`` (one per thread, /proc/self/task/*/comm); its intra-op pool (Eigen's)
is unnamed, so the script counts the process's threads in all. ``tf.config.threading``'s getters
do not say: they return the context's own setting (0) whatever the environment holds."""

from __future__ import annotations

import re

import pytest

from launcher.plan.threads import INTEROP_MIN, local_cores, shares
from tests.support.tfrun import ROOT, up
from tests.support.specs import local_spec

pytestmark = [pytest.mark.integration, pytest.mark.tf]

SCRIPT = """\
import os
import tensorflow as tf

x = tf.random.normal((256, 256))
(x @ x).numpy()  # the runtime and its pools are up
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
env = " ".join(f"{k}={os.environ.get(k, '-')}" for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                                                         "OMP_NUM_THREADS"))
print(f"tfthreads inter_op={names.count('tf_Compute')} threads={len(names)} "
      f"tf_intra_getter={tf.config.threading.get_intra_op_parallelism_threads()} {env}", flush=True)
"""


def run(tmp_path, threads) -> dict[str, dict[str, str]]:
    (tmp_path / "tfthreads.py").write_text(SCRIPT)
    spec = local_spec(tmp_path, f"python {tmp_path / 'tfthreads.py'}", name="demo",
                      env={"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": '"3"'},
                      watchdog="{startup_timeout: 120, stop_grace: 3}", extra=f"devices: {{threads: {threads}}}\n")
    result = up(spec)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = {}
    for m in re.finditer(r"^\[(worker:\d)\] tfthreads (.*)$", result.stdout, re.M):
        found[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split())
    assert sorted(found) == ["worker:0", "worker:1"], result.stdout[-3000:]
    return found


def test_the_budget_reaches_tensorflow(tmp_path):
    cores = local_cores()
    want = shares(cores, 2)
    (tmp_path / "auto").mkdir()
    (tmp_path / "off").mkdir()
    auto, off = run(tmp_path / "auto", "auto"), run(tmp_path / "off", 0)
    print(f"cores={cores} auto={auto} off={off}")  # pytest -rP shows it
    for i, key in enumerate(("worker:0", "worker:1")):
        # auto: the env holds the task's share, and TF's inter-op pool has that many threads,
        # at least threads.INTEROP_MIN (2: with one, blocking ops can deadlock)
        assert auto[key]["TF_NUM_INTRAOP_THREADS"] == auto[key]["OMP_NUM_THREADS"] == str(want[i])
        assert auto[key]["inter_op"] == str(max(want[i], INTEROP_MIN)), auto[key]
        # threads: 0 sets nothing: TF sizes its pools for the whole machine
        assert off[key]["TF_NUM_INTRAOP_THREADS"] == off[key]["OMP_NUM_THREADS"] == "-"
        assert off[key]["inter_op"] == str(cores), off[key]
        assert auto[key]["tf_intra_getter"] == off[key]["tf_intra_getter"] == "0"  # the getter cannot tell
        if cores > 1:  # fewer intra-op threads too: the whole process has fewer threads
            assert int(auto[key]["threads"]) < int(off[key]["threads"]), (auto[key], off[key])
