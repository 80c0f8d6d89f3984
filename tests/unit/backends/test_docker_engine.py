"""Which Docker engine a spec reaches and how: TLS from ``docker.tls`` or the docker CLI's
variables, and plain TCP to another machine refused unless ``docker.insecure: true``. The last
test speaks TLS with a real server (a loopback HTTPS listener that asks for the client's
certificate), as an engine run with --tlsverify does."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from launcher.backends.docker.engine import Engine, check_transport, client_kwargs, connect, engine_of
from launcher.errors import LaunchError
from launcher.loader.load import load_spec
from tests.support.errors import one_error
from tests.support.prereq import require_tool

BASE = "name: d\nstrategy: multi_worker_mirrored\nbackend: docker\nentrypoint: python -m worker\ntasks: {worker: 2}\n"


def loaded(tmp_path: Path, docker: str = "{}"):
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + f"docker: {docker}\n")
    return load_spec(path)


@pytest.mark.parametrize("url", ["tcp://10.1.2.3:2375", "http://engine.example:2375", "tcp://[2001:db8::1]:2375",
                                 "tcp://127.0.0.1.example:2375", "10.1.2.3:2375"])
def test_plain_tcp_to_another_machine_is_one_line_naming_the_field_and_the_fix(tmp_path, url):
    engine = engine_of(loaded(tmp_path, f"{{engine: '{url}'}}"), environ={})
    with pytest.raises(LaunchError) as info:
        check_transport(engine)
    line = str(info.value)
    assert line.startswith(f"docker.engine: {url} is plain TCP to another machine") and "\n" not in line
    assert "docker.tls: {ca, cert, key}" in line and "docker.insecure: true" in line


def test_docker_host_from_the_environment_is_named_as_such(tmp_path):
    engine = engine_of(loaded(tmp_path), environ={"DOCKER_HOST": "tcp://10.9.9.9:2375"})
    assert engine.url == "tcp://10.9.9.9:2375" and engine.field == "DOCKER_HOST"
    with pytest.raises(LaunchError, match=r"^DOCKER_HOST: tcp://10\.9\.9\.9:2375 is plain TCP"):
        check_transport(engine)


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:2375", "tcp://localhost:2375", "tcp://[::1]:2375",
                                 "unix:///var/run/docker.sock", "ssh://me@host", "https://engine.example:2376"])
def test_loopback_sockets_ssh_and_https_pass(tmp_path, url):
    check_transport(engine_of(loaded(tmp_path, f"{{engine: '{url}'}}"), environ={}))


def test_insecure_true_accepts_plain_tcp(tmp_path):
    engine = engine_of(loaded(tmp_path, "{engine: 'tcp://10.1.2.3:2375', insecure: true}"), environ={})
    check_transport(engine)
    assert "tls" not in client_kwargs(engine)


def test_tls_from_the_docker_cli_variables(tmp_path):
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (certs / name).write_text("x")
    engine = engine_of(loaded(tmp_path, "{engine: 'tcp://10.1.2.3:2376'}"),
                       environ={"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)})
    assert engine.tls and engine.verify and engine.ca == str(certs / "ca.pem")
    check_transport(engine)  # TLS: not refused
    tls = client_kwargs(engine)["tls"]
    assert tls.verify is True and tls.ca_cert == str(certs / "ca.pem") and tls.cert == (str(certs / "cert.pem"), str(certs / "key.pem"))
    # DOCKER_TLS_VERIFY empty counts as unset (the docker CLI's rule): encrypted, not verified
    engine = engine_of(loaded(tmp_path, "{engine: 'tcp://10.1.2.3:2376'}"),
                       environ={"DOCKER_TLS_VERIFY": "", "DOCKER_CERT_PATH": str(certs)})
    assert engine.tls and not engine.verify


def test_tls_from_the_spec_relative_to_it_wins_over_the_environment(tmp_path):
    (tmp_path / "tls").mkdir()
    for name in ("ca.pem", "me.pem", "me-key.pem"):
        (tmp_path / "tls" / name).write_text("x")
    engine = engine_of(loaded(tmp_path, "{engine: 'tcp://10.1.2.3:2376', tls: {ca: tls/ca.pem, cert: tls/me.pem, "
                                        "key: tls/me-key.pem}}"), environ={"DOCKER_CERT_PATH": "/nowhere"})
    assert engine.ca == str(tmp_path / "tls" / "ca.pem")
    assert engine.cert == (str(tmp_path / "tls" / "me.pem"), str(tmp_path / "tls" / "me-key.pem"))
    assert client_kwargs(engine)["tls"].ca_cert == str(tmp_path / "tls" / "ca.pem")


def test_a_client_cert_without_its_key_is_a_spec_error():
    line = one_error(BASE + "docker: {tls: {cert: me.pem}}\n")
    assert "docker.tls" in line and "give cert and key together" in line


def test_a_missing_tls_file_is_one_line_naming_docker_tls(tmp_path):
    engine = engine_of(loaded(tmp_path, "{engine: 'tcp://127.0.0.1:1', tls: {ca: nothere.pem}}"), environ={})
    with pytest.raises(LaunchError) as info:
        connect(engine)
    assert "TLS failed" in str(info.value) and "check docker.tls" in str(info.value)


class _Engine(BaseHTTPRequestHandler):
    """What the SDK asks first: the API version, then a ping."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"ApiVersion": "1.43", "Version": "24.0.0"}).encode() if "version" in self.path else b"OK"
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if "version" in self.path else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def _certs(where: Path) -> None:
    """A CA, the engine's certificate for 127.0.0.1 and a client certificate, both signed by it."""
    openssl = require_tool("openssl", "openssl")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=where, check=True, capture_output=True, timeout=60)

    run("req", "-x509", *KEY, "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=test-ca")
    (where / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, extra in (("server", ["-extfile", "san.cnf"]), ("client", [])):
        run("req", *KEY, "-nodes", "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", *extra)


@pytest.fixture
def tls_engine(tmp_path):
    """A loopback HTTPS server that requires a client certificate signed by the test CA."""
    _certs(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server-key.pem")
    context.load_verify_locations(tmp_path / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_client_speaks_tls_with_the_spec_certificates(tls_engine, monkeypatch):
    where, port = tls_engine
    # (requests would let this bundle, which lacks the test CA, replace the CA the spec gives)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(where / "server.pem"))
    url = f"tcp://127.0.0.1:{port}"
    good = engine_of(loaded(where, f"{{engine: '{url}', tls: {{ca: ca.pem, cert: client.pem, key: client-key.pem}}}}"),
                     environ={})
    client = connect(good)
    assert client.api.base_url.startswith("https://")
    client.close()
    without = Engine(url=url, field="docker.engine")  # plain HTTP to a TLS port: refused by the server
    with pytest.raises(LaunchError, match="cannot reach the Docker engine"):
        connect(without)
    no_client_cert = engine_of(loaded(where, f"{{engine: '{url}', tls: {{ca: ca.pem}}}}"), environ={})
    with pytest.raises(LaunchError, match="TLS failed"):
        connect(no_client_cert)
