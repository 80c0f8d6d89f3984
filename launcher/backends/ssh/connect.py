"""SSH connections for the ssh backend: Fabric ``Connection`` objects with real host-key checks.

Fabric's default is ``AutoAddPolicy``: any unknown host key is silently accepted. Here every
client (including ProxyJump gateways) instead loads known_hosts and gets a policy that refuses
unknown keys, unless the spec opts into trust-on-first-use, which appends the key to known_hosts.
A *changed* key is always refused (paramiko raises ``BadHostKeyException``).

Errors are turned into one line naming the host and the fix (``describe_connect_error``).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import threading
from pathlib import Path
from typing import Optional

import paramiko
from fabric import Config, Connection

# paramiko logs a refused port-forwarding channel ("Secsh channel 18 open FAILED: Connection
# refused") at ERROR; with no handler Python's last-resort handler printed each one to the
# console, twice a second while a restarted task's TF server was not up yet (port_open's probe).
# Every failure that matters reaches the user as one line of ours instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

from launcher.errors import exc_text
from launcher.spec.model import Host
from launcher.backends.ssh.options import SSHOptions

_KH_LOCK = threading.Lock()


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey, known_hosts: str) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key
        self.known_hosts = known_hosts


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}" if hasattr(key, "fingerprint") else key.get_name()


class VerifyHostKey(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only when no known_hosts entry exists for the host (a *different* key
    for it raises BadHostKeyException before this). Refuse, or trust once and remember."""

    def __init__(self, known_hosts: str, trust_on_first_use: bool) -> None:
        self.known_hosts = known_hosts
        self.trust_on_first_use = trust_on_first_use

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.trust_on_first_use:
            raise UnknownHostKey(hostname, key, self.known_hosts)
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KH_LOCK:
            path = Path(self.known_hosts)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(path, "a", encoding="ascii") as fh:
                fh.write(line)


def known_hosts_files(opts: SSHOptions, ssh_config: dict, base_dir: Path) -> list[str]:
    """The files host keys are read from; the first is where trust-on-first-use writes."""
    if opts.known_hosts:
        return [str(resolve_local(opts.known_hosts, base_dir))]
    files = []
    user_files = ssh_config.get("userknownhostsfile")
    if user_files:
        files += [os.path.expanduser(f) for f in str(user_files).split()]
    else:
        files.append(os.path.expanduser("~/.ssh/known_hosts"))
    files.append("/etc/ssh/ssh_known_hosts")
    return files


_PARSED: dict[str, tuple[tuple, paramiko.HostKeys]] = {}


def parsed_known_hosts(path: str) -> Optional[paramiko.HostKeys]:
    """``path`` parsed as a known_hosts file (None: not a file, or unreadable), once per version
    of it (inode, size, mtime): parsing it for every connection made a run's connections cost the
    square of its hosts (64 hosts, 64 entries: 0.29 s of the launcher's one busy process)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not os.path.isfile(path):
        return None
    version = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _KH_LOCK:
        held = _PARSED.get(path)
        if held is not None and held[0] == version:
            return held[1]
        keys = paramiko.HostKeys()
        try:
            keys.load(path)
        except (OSError, paramiko.SSHException):
            return None
        _PARSED[path] = (version, keys)
        return keys


def resolve_local(path: str, base_dir: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else (base_dir / p)


def secure(conn: Connection, opts: SSHOptions, base_dir: Path) -> Connection:
    """Replace Fabric's AutoAddPolicy on ``conn`` and every gateway hop with real verification."""
    hop: Optional[Connection] = conn
    while isinstance(hop, Connection):
        files = known_hosts_files(opts, hop.ssh_config, base_dir)
        client = hop.client
        keys = client.get_host_keys()
        # The name paramiko looks the server's key up under (SSHClient.connect); OpenSSH looks it up
        # under HostKeyAlias instead where one is set. Only that name's entries are given to the
        # client: each file is parsed once (below), not once a connection.
        name = hop.host if int(hop.port) == 22 else f"[{hop.host}]:{hop.port}"
        looked_up = hop.ssh_config.get("hostkeyalias") or name
        for f in files:
            entry = (parsed_known_hosts(f) or {}).get(looked_up)
            for ktype, key in (entry or {}).items():
                keys.add(name, ktype, key)
        client.set_missing_host_key_policy(VerifyHostKey(files[0], opts.trust_on_first_use))
        hop = hop.gateway if isinstance(hop.gateway, Connection) else None
    return conn


def make_connection(host: Host, opts: SSHOptions, base_dir: Path) -> Connection:
    """An unopened Fabric Connection for ``host`` (ssh_config aliases, ProxyJump or else
    ProxyCommand honoured, as OpenSSH does when both are set)."""
    config = Config(runtime_ssh_path=str(resolve_local(opts.config, base_dir))) if opts.config else Config()
    timeout = max(1, math.ceil(opts.connect_timeout))
    connect_kwargs: dict = {"banner_timeout": timeout, "auth_timeout": timeout}
    if host.key:
        connect_kwargs["key_filename"] = [str(resolve_local(host.key, base_dir))]
    conn = Connection(
        host.ssh_target,
        user=host.user,
        port=host.port,
        config=config,
        connect_timeout=timeout,
        connect_kwargs=connect_kwargs,
        gateway=False,  # set below, in OpenSSH's order
    )
    jump = host.proxy_jump or conn.ssh_config.get("proxyjump")
    command = conn.ssh_config.get("proxycommand")
    if jump and jump.lower() != "none":
        conn.gateway = jump_chain(jump, config, timeout, connect_kwargs)
    elif command and command.lower() != "none":
        # ssh_config's ProxyCommand (%h, %p expanded by paramiko's lookup), e.g. `gcloud compute
        # start-iap-tunnel %h %p --listen-on-stdin ...` for VMs with no external address.
        conn.gateway = command
    return secure(conn, opts, base_dir)


def jump_chain(jump: str, config: Config, timeout: int, connect_kwargs: dict) -> Connection:
    """``ProxyJump a,b`` as OpenSSH does it: connect to a, then b through a, then the target
    through b. (Fabric 3 builds multi-hop chains in the reverse order.)"""
    gateway = None
    for hop in [h.strip() for h in jump.split(",") if h.strip()]:
        # The host's key is offered to the jump hosts too (plus agent and default keys).
        kwargs = {"config": config.clone(), "connect_timeout": timeout, "connect_kwargs": dict(connect_kwargs)}
        if gateway is not None:
            kwargs["gateway"] = gateway
        gateway = Connection(hop, **kwargs)
    return gateway


def describe_target(conn: Connection) -> str:
    return f"{conn.user}@{conn.host}:{conn.port}"


def open_connection(conn: Connection, opts: SSHOptions) -> None:
    conn.open()
    transport = conn.client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)


def describe_channel_error(exc: BaseException, timeout: float) -> str:
    """Why a session could not be opened on a live connection, without the host (the caller
    names it): a timeout reads as a link that went down, a refusal as sshd's session limit."""
    if isinstance(exc, paramiko.SSHException) and "timeout opening channel" in str(exc).lower():
        return f"no answer within {timeout:g} s opening an ssh session (link down?)"
    if isinstance(exc, paramiko.ChannelException):
        return f"sshd refused a session ({exc.text or exc}; sshd's MaxSessions?)"
    if isinstance(exc, EOFError) or (isinstance(exc, paramiko.SSHException) and "not active" in str(exc).lower()):
        return "the connection closed (sshd restarted or the link dropped)"
    return exc_text(exc, timeout)


def describe_connect_error(exc: BaseException, conn: Connection, host: Host, opts: SSHOptions) -> str:
    """One line: what went wrong connecting to ``host`` and how to fix it."""
    who = f"host {host.name} ({describe_target(conn)})"
    if isinstance(exc, UnknownHostKey):
        return (
            f"{who}: unknown host key {fingerprint(exc.key)} (not in {exc.known_hosts}); verify it and add it "
            f"with `ssh-keyscan -p {conn.port} {conn.host} >> {exc.known_hosts}`, or set ssh.trust_on_first_use: true"
        )
    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"{who}: HOST KEY MISMATCH: the server offered {fingerprint(exc.key)} but known_hosts has "
            f"{fingerprint(exc.expected_key)}; this may be an attack. If the host was really reinstalled, "
            f"remove the old key with `ssh-keygen -R {exc.hostname}` and verify the new one"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return (
            f"{who}: authentication failed for user {conn.user}; check hosts[{host.name}].key / user, "
            f"ssh-agent, and the server's authorized_keys"
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        errs = list(exc.errors.values())
        inner = errs[0] if errs else None
        if isinstance(inner, OSError) and inner.errno in (errno.ECONNREFUSED,):
            return f"{who}: connection refused; start sshd there or fix hosts[{host.name}].ssh/port"
        if inner is not None:
            return describe_connect_error(inner, conn, host, opts)
    if isinstance(exc, ConnectionRefusedError):
        return f"{who}: connection refused; start sshd there or fix hosts[{host.name}].ssh/port"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return (
            f"{who}: timed out after {opts.connect_timeout:g} s; check the address, firewall and that the host is "
            f"up, or raise ssh.connect_timeout"
        )
    if isinstance(exc, socket.gaierror):
        return f"{who}: cannot resolve host name ({exc.strerror}); fix hosts[{host.name}].ssh or ~/.ssh/config"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"{who}: no route to host ({exc.strerror}); check the address and network"
    if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
        return f"{who}: no SSH banner ({exc}); is an SSH server listening on port {conn.port}?"
    if isinstance(exc, EOFError):
        return f"{who}: the server closed the connection during the handshake; check sshd's logs (MaxStartups?)"
    text = str(exc) or type(exc).__name__
    return f"{who}: cannot connect ({text}); check `ssh -p {conn.port} {conn.user}@{conn.host}` by hand"
