"""Running commands over an open SSH connection (paramiko), and the channel helpers the probe
and state copy share: read one reply line, drain stderr, close quietly."""

from __future__ import annotations

import time
from typing import Callable, Optional

# (host name, command, stdin bytes or None, timeout) -> (exit code, combined output); -1 = no answer
Runner = Callable[[str, str, Optional[bytes], float], tuple[int, str]]


def run_command(transport, command: str, stdin: Optional[bytes], timeout: float) -> tuple[int, str]:
    """Run one command in a new session of ``transport``; (exit code, stdout+stderr). -1 = no answer."""
    try:
        chan = transport.open_session(timeout=timeout)
        chan.set_combine_stderr(True)
        chan.settimeout(timeout)
        chan.exec_command(command)
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        out = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            data = chan.recv(65536)
            if not data:
                break
            out += data
            if time.monotonic() > deadline:
                raise TimeoutError
        end = deadline - time.monotonic()
        if not chan.status_event.wait(max(0.1, end)):
            raise TimeoutError
        code = chan.exit_status
        chan.close()
        return code, out.decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, TimeoutError) or type(exc).__name__ == "timeout":
            return -1, f"no answer within {timeout:g} s"
        return -1, f"{type(exc).__name__}: {exc}"


def readline(chan, limit: int = 1 << 20) -> bytes:
    """Read one reply line. Replies answer requests one at a time, so nothing follows the
    newline until we send again, and whole chunks can be read."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        data = chan.recv(65536)
        if not data:
            break
        buf += data
        if len(buf) > limit:
            break
    return bytes(buf)


def close_channel(chan) -> None:
    try:
        chan.shutdown_write()
        chan.close()
    except Exception:  # noqa: BLE001
        pass


def drain_stderr(chan) -> str:
    """What the remote command wrote to stderr (up to 5 s, until it exits)."""
    out = bytearray()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if chan.recv_stderr_ready():
            out += chan.recv_stderr(65536)
        elif chan.exit_status_ready() and not chan.recv_stderr_ready():
            break
        else:
            time.sleep(0.02)
    return out.decode("utf-8", "replace")
