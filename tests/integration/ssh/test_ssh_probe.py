"""The preflight reachability probe: a target that refuses at first (a slow host, a
port not yet served) is retried until the probe's deadline instead of being named as a
firewall; a firewall that drops is still named (test_port_blocked_between_hosts_names_the_pair)."""

from __future__ import annotations

import threading

import pytest

from tests.support.cli import tfcluster

from .conftest import PY
from tests.support.ssh_helpers import SHOW, firewall, firewall_flush

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.timeout(240)]


def test_a_target_refusing_for_the_first_seconds_is_not_named_unreachable(lab, make_spec):
    h1, h2 = lab.host("h1"), lab.host("h2")
    spec = make_spec([PY, "-c", SHOW], workers=2, ssh={"probe_timeout": 5})
    # h1 answers h2's probe with a reset for the first 3 s of the run (the probe starts ~1 s in).
    firewall(h1, f"ip saddr {h2.address} tcp dport 23456 reject with tcp reset")
    healer = threading.Timer(3.0, firewall_flush, args=(h1,))
    healer.start()
    try:
        proc = tfcluster("up", str(spec))
    finally:
        healer.cancel()
        healer.join()
        firewall_flush(h1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cannot reach" not in proc.stderr
    assert proc.stdout.count("TASK|") == 2
