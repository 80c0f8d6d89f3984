"""worker/tpu.py without a TPU or a network: the resolver's arguments, and every failure
becoming one line (mocked resolver), which ``python -m worker`` turns into exit code 2."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.tf]


@pytest.fixture
def tpu(monkeypatch):
    import tensorflow as tf

    from worker import tpu

    calls = []
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.append(("connect", r)))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append(("init", r)))
    tpu.calls = calls
    return tpu


@pytest.mark.parametrize("name, zone, project, expected", [
    ("local", None, None, {"tpu": "local", "zone": None, "project": None}),
    ("", None, None, {"tpu": "local", "zone": None, "project": None}),
    ("my-tpu", "us-central1-b", "proj", {"tpu": "my-tpu", "zone": "us-central1-b", "project": "proj"}),
])
def test_resolver_args(name, zone, project, expected):
    from worker.tpu import resolver_args

    assert resolver_args(name, zone, project) == expected


def test_connect_resolves_connects_and_initialises(tpu):
    seen = {}

    def resolver(**kwargs):
        seen.update(kwargs)
        return "resolver"

    assert tpu.connect("my-tpu", "z", "p", resolver_cls=resolver) == "resolver"
    assert seen == {"tpu": "my-tpu", "zone": "z", "project": "p"}
    assert tpu.calls == [("connect", "resolver"), ("init", "resolver")]


def test_a_failing_resolver_is_one_line_naming_the_tpu_and_what_was_tried(tpu):
    def resolver(**kwargs):
        raise ValueError("Could not lookup TPU metadata from name 'my-tpu'.\nPlease doublecheck the tpu argument")

    with pytest.raises(tpu.TpuUnavailable) as info:
        tpu.connect("my-tpu", "us-central1-b", None, resolver_cls=resolver)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg == ("TPU 'my-tpu' not usable: resolving it with TPUClusterResolver(tpu='my-tpu', zone='us-central1-b') "
                   "failed (ValueError: Could not lookup TPU metadata from name 'my-tpu'.); check that the TPU exists "
                   "and is READY (gcloud compute tpus list), and its zone and project")
    assert tpu.calls == []


def test_a_resolver_that_does_not_answer_times_out(tpu):
    def resolver(**kwargs):
        time.sleep(5)

    started = time.monotonic()
    with pytest.raises(tpu.TpuUnavailable, match=r"TPU 'local': TPUClusterResolver\(tpu='local'\) did not answer "
                                                 r"within 0.2 s while resolving it"):
        tpu.connect("local", resolver_cls=resolver, timeout=0.2)
    assert time.monotonic() - started < 2


def test_worker_main_exits_2_with_one_line(tpu, monkeypatch, capsys, tmp_path):
    from worker import main

    def no_tpu(*args, **kwargs):
        raise tpu.TpuUnavailable("TPU 'local' not usable: initialising it failed; this machine has no TPU")

    monkeypatch.setattr(tpu, "connect", no_tpu)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert main.main(["--strategy", "tpu", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["worker: error: TPU 'local' not usable: initialising it failed; this machine has no TPU"]


def test_a_resolver_still_stuck_is_not_torn_down_around(tmp_path):
    """The resolver times out while its thread is still inside TensorFlow (here: holding a lock
    that an exit hook needs, as TensorFlow's own atexit hooks need its context): the worker says
    its one line and ends with exit 2 at once, instead of finalizing the interpreter around the
    stuck thread (which waits for ever here, and aborts or hangs in TensorFlow)."""
    import subprocess
    import sys

    script = f"""
import atexit, sys, threading, time
import tensorflow as tf
from worker import main, tpu
held = threading.Lock()
def resolver(**kwargs):
    held.acquire()
    time.sleep(600)
atexit.register(lambda: held.acquire())
tf.config.experimental_connect_to_cluster = lambda r: None
tf.tpu.experimental.initialize_tpu_system = lambda r: None
real = tpu.connect
tpu.connect = lambda name, zone=None, project=None, timeout=120.0: real(name, zone, project, 0.5, resolver_cls=resolver)
sys.exit(main.main(["--strategy", "tpu", "--model-dir", {str(tmp_path)!r}]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items() if k != "TF_CONFIG"})
    err = [line for line in proc.stderr.splitlines() if line.startswith("worker: ")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert err == ["worker: error: TPU 'local': TPUClusterResolver(tpu='local') did not answer within 0.5 s "
                   "while resolving it; check tpu.name, tpu.zone and tpu.project"], proc.stderr[-2000:]
