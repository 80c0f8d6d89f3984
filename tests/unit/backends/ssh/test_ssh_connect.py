"""Host-key policy and connection error lines of the ssh backend (no network)."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import paramiko
import pytest

from launcher.backends.ssh import connect as C
from launcher.loader.load import parse_spec


def _spec(extra: str = "", host: str = "{name: a, ssh: deploy@10.0.0.1, port: 2222}"):
    return parse_spec(f"""
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts: [{host}]
tasks: {{worker: 1}}
{extra}
""")


KEY = paramiko.Ed25519Key.from_private_key_file if False else None


def _key() -> paramiko.PKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    raw = ed25519.Ed25519PrivateKey.generate()
    pem = raw.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                            serialization.NoEncryption()).decode()
    import io

    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


def test_fabric_autoadd_is_replaced_on_host_and_gateways(tmp_path):
    spec = _spec(f"ssh: {{known_hosts: {tmp_path}/kh}}", "{name: a, ssh: deploy@10.0.0.1, proxy_jump: 'j1,me@j2:2200'}")
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    hops = []
    hop = conn
    while isinstance(hop, type(conn)):
        hops.append(hop)
        hop = hop.gateway
    assert [h.host for h in hops] == ["10.0.0.1", "j2", "j1"]
    assert hops[1].user == "me" and hops[1].port == 2200
    for h in hops:
        policy = h.client._policy
        assert isinstance(policy, C.VerifyHostKey) and not policy.trust_on_first_use
        assert not isinstance(policy, paramiko.AutoAddPolicy)


def test_connection_uses_target_port_user_key_and_timeout(tmp_path):
    spec = _spec("ssh: {connect_timeout: 2.5}", "{name: a, ssh: deploy@10.0.0.1, port: 2222, key: keys/id}")
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    assert (conn.user, conn.host, conn.port, conn.connect_timeout) == ("deploy", "10.0.0.1", 2222, 3)
    assert conn.connect_kwargs["key_filename"] == [str(tmp_path / "keys" / "id")]


def test_ssh_config_alias_and_proxyjump_are_honoured_and_secured(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host vm1\n  HostName 10.1.2.3\n  User alice\n  Port 2022\n  ProxyJump bastion\n"
                   "  UserKnownHostsFile ~/.ssh/google_compute_known_hosts\n")
    spec = _spec(f"ssh: {{config: {cfg}}}", "{name: vm1, address: 10.128.0.2}")
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    assert (conn.host, conn.user, conn.port) == ("10.1.2.3", "alice", 2022)
    assert conn.gateway.host == "bastion"
    assert isinstance(conn.gateway.client._policy, C.VerifyHostKey)
    files = C.known_hosts_files(spec.ssh, conn.ssh_config, tmp_path)
    assert files[0].endswith("/.ssh/google_compute_known_hosts")


def test_unknown_key_refused_by_default(tmp_path):
    policy = C.VerifyHostKey(str(tmp_path / "kh"), trust_on_first_use=False)
    with pytest.raises(C.UnknownHostKey):
        policy.missing_host_key(paramiko.SSHClient(), "[10.0.0.1]:2222", _key())
    assert not (tmp_path / "kh").exists()


def test_trust_on_first_use_appends_to_known_hosts(tmp_path):
    kh = tmp_path / "kh"
    kh.write_text("# mine\n")
    key = _key()
    policy = C.VerifyHostKey(str(kh), trust_on_first_use=True)
    client = paramiko.SSHClient()
    policy.missing_host_key(client, "[10.0.0.1]:2222", key)
    assert kh.read_text() == f"# mine\n[10.0.0.1]:2222 ssh-ed25519 {key.get_base64()}\n"
    assert paramiko.HostKeys(str(kh)).lookup("[10.0.0.1]:2222")["ssh-ed25519"] == key


@pytest.mark.parametrize(
    "exc, expect",
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "connection refused; start sshd there"),
        (paramiko.ssh_exception.NoValidConnectionsError({("10.0.0.1", 2222): ConnectionRefusedError(errno.ECONNREFUSED, "x")}),
         "connection refused; start sshd there"),
        (socket.timeout("timed out"), "timed out after 10 s;"),
        (paramiko.AuthenticationException("nope"), "authentication failed for user deploy"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve host name"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "no route to host"),
    ],
)
def test_error_lines_name_host_and_fix(tmp_path, exc, expect):
    spec = _spec()
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    line = C.describe_connect_error(exc, conn, spec.hosts[0], spec.ssh)
    assert line.startswith("host a (deploy@10.0.0.1:2222): ")
    assert expect in line
    assert "\n" not in line


@pytest.mark.parametrize(
    "exc, expect",
    [
        # what paramiko's Transport.open_channel raises
        (paramiko.SSHException("Timeout opening channel."), "no answer within 3 s opening an ssh session (link down?)"),
        (paramiko.ChannelException(1, "Administratively prohibited"),
         "sshd refused a session (Administratively prohibited; sshd's MaxSessions?)"),
        (paramiko.SSHException("SSH session not active"), "the connection closed (sshd restarted or the link dropped)"),
        (EOFError(), "the connection closed"),
        (OSError(errno.EPIPE, "Broken pipe"), "BrokenPipeError: [Errno 32] Broken pipe"),
    ],
)
def test_channel_error_reasons(exc, expect):
    line = C.describe_channel_error(exc, 3.0)
    assert line.startswith(expect) and "\n" not in line, line


def test_host_key_error_lines(tmp_path):
    spec = _spec()
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    k1, k2 = _key(), _key()
    line = C.describe_connect_error(C.UnknownHostKey("[10.0.0.1]:2222", k1, "/kh"), conn, spec.hosts[0], spec.ssh)
    assert "unknown host key ssh-ed25519 SHA256:" in line and "ssh-keyscan -p 2222 10.0.0.1 >> /kh" in line
    assert "ssh.trust_on_first_use: true" in line
    line = C.describe_connect_error(paramiko.BadHostKeyException("[10.0.0.1]:2222", k1, k2), conn, spec.hosts[0], spec.ssh)
    assert "HOST KEY MISMATCH" in line and "ssh-keygen -R [10.0.0.1]:2222" in line


def test_spec_ssh_options_validate(tmp_path):
    from launcher.errors import SpecError

    with pytest.raises(SpecError, match="ssh.lease"):
        _spec("ssh: {lease: 0}")
    with pytest.raises(SpecError, match="unknown key 'trust_on_first_us'"):
        _spec("ssh: {trust_on_first_us: true}")
    assert _spec().ssh.trust_on_first_use is False
    assert Path(_spec("ssh: {known_hosts: kh}").ssh.known_hosts) == Path("kh")


def _hop_keys(conn) -> dict:
    """{name: [key types]} of the keys the connection's client will check the server against."""
    keys = conn.client.get_host_keys()
    return {n: sorted(keys.lookup(n).keys()) for n in keys.keys()}


def test_each_connection_gets_its_hosts_known_key_from_a_file_parsed_once(tmp_path, monkeypatch):
    ka, kb, kc = _key(), _key(), _key()
    kh = tmp_path / "kh"
    kh.write_text(f"[10.0.0.1]:2222 ssh-ed25519 {ka.get_base64()}\n10.0.0.2 ssh-ed25519 {kb.get_base64()}\n")
    loads = []
    real = paramiko.HostKeys.load
    monkeypatch.setattr(paramiko.HostKeys, "load", lambda self, f: (loads.append(f), real(self, f))[1])
    spec = _spec(f"ssh: {{known_hosts: {kh}}}")
    a = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    again = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    b = C.make_connection(_spec(f"ssh: {{known_hosts: {kh}}}", "{name: b, ssh: 10.0.0.2}").hosts[0], spec.ssh, tmp_path)
    assert loads == [str(kh)]  # one parse for three connections
    assert a.client.get_host_keys().lookup("[10.0.0.1]:2222")["ssh-ed25519"] == ka
    assert _hop_keys(a) == _hop_keys(again) == {"[10.0.0.1]:2222": ["ssh-ed25519"]}  # only its own host's
    assert b.client.get_host_keys().lookup("10.0.0.2")["ssh-ed25519"] == kb
    # The file changed (trust on first use appended, or the user edited it): parsed again, its new
    # entry found; a key that was replaced is the new one, never the one parsed before.
    kh.write_text(f"[10.0.0.1]:2222 ssh-ed25519 {kc.get_base64()}\n10.0.0.2 ssh-ed25519 {kb.get_base64()}\n")
    c = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    assert len(loads) == 2
    assert c.client.get_host_keys().lookup("[10.0.0.1]:2222")["ssh-ed25519"] == kc
    kh.unlink()
    gone = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    assert _hop_keys(gone) == {}  # no file: an unknown key, refused by the policy


def test_hashed_entries_and_host_key_alias_are_found(tmp_path):
    key, other = _key(), _key()
    hashed = paramiko.HostKeys.hash_host("[10.1.2.3]:2022")
    kh = tmp_path / "kh"
    kh.write_text(f"{hashed} ssh-ed25519 {key.get_base64()}\nmyalias ssh-ed25519 {other.get_base64()}\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host vm1\n  HostName 10.1.2.3\n  Port 2022\nHost vm2\n  HostName 10.1.2.4\n  HostKeyAlias myalias\n")
    spec = _spec(f"ssh: {{config: {cfg}, known_hosts: {kh}}}", "{name: vm1}")
    conn = C.make_connection(spec.hosts[0], spec.ssh, tmp_path)
    assert conn.client.get_host_keys().lookup("[10.1.2.3]:2022")["ssh-ed25519"] == key
    spec2 = _spec(f"ssh: {{config: {cfg}, known_hosts: {kh}}}", "{name: vm2}")
    conn2 = C.make_connection(spec2.hosts[0], spec2.ssh, tmp_path)
    # OpenSSH checks vm2's key against the alias's entry; paramiko looks it up under the address
    assert conn2.client.get_host_keys().lookup("10.1.2.4")["ssh-ed25519"] == other
    assert _hop_keys(conn2) == {"10.1.2.4": ["ssh-ed25519"]}
