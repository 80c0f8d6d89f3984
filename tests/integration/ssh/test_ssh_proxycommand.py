"""A ProxyCommand in the ssh config file is honoured (VMs with no external address are
reached through `gcloud compute start-iap-tunnel VM 22 --listen-on-stdin`, a stdin/stdout relay).
Here the relay is a small script of the test's own; h2 is named by a HostName nothing resolves,
so the connection can only have gone through the relay, which logs each use."""

from __future__ import annotations

import pytest

from tests.support.tfrun import run_and_act

from .conftest import PY

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

# stdin/stdout <-> TCP, like `start-iap-tunnel --listen-on-stdin`: argv = address port log.
RELAY = r"""
import os, socket, sys, threading
address, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sock = socket.create_connection((address, port), timeout=10)
sock.settimeout(None)
with open(log, "a") as fh:
    fh.write(f"relay {' '.join(sys.argv[1:3])} {sys.argv[4]}\n")

def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)

threading.Thread(target=up, daemon=True).start()
while True:
    data = sock.recv(65536)
    if not data:
        break
    os.write(1, data)
"""


def test_a_host_reached_only_through_an_ssh_config_proxycommand_runs_its_task(lab, make_spec, tmp_path):
    relay, log = tmp_path / "relay.py", tmp_path / "relay.log"
    relay.write_text(RELAY)
    h2 = lab.host("h2")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host tunnelled-h2\n  HostName h2-behind-iap.invalid\n"
                      f"  ProxyCommand {PY} {relay} {h2.address} %p {log} %h\n")
    known = tmp_path / "known_hosts"
    known.write_text(lab.known_hosts.read_text() + f"h2-behind-iap.invalid {h2.host_pubkey}\n")
    spec = make_spec([PY, "-c", "import socket; print('ran on', socket.gethostname(), flush=True)"],
                     host_keys={"h2": {"ssh": "root@tunnelled-h2", "address": h2.address}},
                     ssh={"config": str(config), "known_hosts": str(known)})
    code, out = run_and_act(spec, [], timeout=120)
    assert code == 0, out[-4000:]
    assert "[worker:0] ran on h1" in out and "[worker:1] ran on h2" in out, out[-3000:]
    uses = log.read_text().splitlines()
    # %h expanded to the HostName, %p to 22; at least the one connection the run keeps to h2.
    assert uses and all(line == f"relay {h2.address} 22 h2-behind-iap.invalid" for line in uses), uses
