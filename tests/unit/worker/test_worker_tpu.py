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
