"""Running commands over an open SSH connection (paramiko), and the channel helpers the probe
and state copy share: read one reply line, drain stderr, close quietly."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Optional

from launcher.bounded import HOST_LINE_BYTES, shown
from launcher.errors import exc_text

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
            del out[:-HOST_LINE_BYTES]  # (the output's end is what a message quotes; a flood stays bounded)
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
        return -1, exc_text(exc)


def readline(chan, limit: int = HOST_LINE_BYTES) -> bytes:
    """Read one reply line. Replies answer requests one at a time, so nothing follows the
    newline until we send again, and whole chunks can be read. Reading stops past ``limit``
    bytes (a host that sends 100 MB without a newline): parse_reply then refuses the line."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        data = chan.recv(65536)
        if not data:
            break
        buf += data
        if len(buf) > limit:
            break
    return bytes(buf)


class BadReply(ValueError):
    """A host's agent answered with something its agent never sends; the text says what, bounded."""


def parse_reply(line: bytes, limit: int = HOST_LINE_BYTES) -> dict[str, Any]:
    """A reply line from a host's agent as its JSON object; BadReply (a few words, the bytes shown
    shortened and escaped) for a line past ``limit``, one that is not JSON, or not an object."""
    if len(line) > limit:
        raise BadReply(f"a line of more than {limit:,} bytes")
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise BadReply(f"{shown(bytes(line).rstrip(), 80)}, not JSON") from None
    if not isinstance(data, dict):
        raise BadReply(f"{shown(bytes(line).rstrip(), 80)}, not a JSON object")
    return data


_VERSION = re.compile(r"^\d+\.\d+")


def check_probe_reply(reply: dict[str, Any]) -> None:
    """The preflight reply has what the launcher reads of it (remote/agent.py's reply), with the
    right types; else BadReply."""
    deps, ports = reply.get("deps"), reply.get("ports")
    ok = (isinstance(reply.get("python"), str) and _VERSION.match(reply["python"])
          and isinstance(deps, dict) and all(isinstance(v, list) and len(v) == 2 for v in deps.values())
          and isinstance(ports, dict) and all(v is None or isinstance(v, str) for v in ports.values())
          and all(reply.get(k) is None or isinstance(reply.get(k), str) for k in ("run_dir", "state_dir", "workdir",
                                                                                    "error")))
    if not ok:
        raise BadReply(f"{shown(reply, 80)}, not the preflight agent's reply")


def check_probe_results(reply: dict[str, Any]) -> list[tuple[str, Optional[str]]]:
    """The reachability probe's ``results``: [[task key, None or the problem], ...]; else BadReply."""
    results = reply.get("results")
    if not (isinstance(results, list) and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                              and (r[1] is None or isinstance(r[1], str)) for r in results)):
        raise BadReply(f"{shown(reply, 80)}, not the reachability probe's results")
    return [(key, problem) for key, problem in results]


def close_channel(chan) -> None:
    try:
        chan.shutdown_write()
        chan.close()
    except Exception:  # noqa: BLE001
        pass


def drain_stderr(chan) -> str:
    """What the remote command wrote to stderr (up to 5 s, until it exits; its last
    HOST_LINE_BYTES, however much it writes)."""
    out = bytearray()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if chan.recv_stderr_ready():
            out += chan.recv_stderr(65536)
            del out[:-HOST_LINE_BYTES]
        elif chan.exit_status_ready() and not chan.recv_stderr_ready():
            break
        else:
            time.sleep(0.02)
    return out.decode("utf-8", "replace")
