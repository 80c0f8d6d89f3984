"""Free loopback ports for tests (probed, in the ephemeral range)."""

from __future__ import annotations

import socket


def free_base(count: int = 4) -> int:
    """A port with ``count`` free ports from it on (all interfaces), for ``ports.base``."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count < 61000 and all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False
