"""Free ports for tests, below Linux's ephemeral range (32768-60999): a port there can be taken
by any outgoing connection between our check and the task's bind, and with the suite's two
shards at once one was ("Could not start gRPC server" for a PSS worker)."""

from __future__ import annotations

import random
import socket


def free_base(count: int = 4) -> int:
    """A port with ``count`` free ports from it on (all interfaces), for ``ports.base``."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        if all(_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free ports between 20000 and 32000")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False
