"""What the ssh backend knows about one host: its connection, its remote dirs, and the host
agent left waiting after preflight to become the host's first task."""

from __future__ import annotations

import posixpath
import threading
from typing import Optional

from launcher.plan.build import PlannedTask
from launcher.spec.model import Host
from launcher.backends.zygotes import Restarts
from launcher.backends.ssh.options import SSHOptions


class HostState:
    def __init__(self, host: Host, opts: SSHOptions) -> None:
        self.spec = host
        self.name = host.name
        self.python = host.python or opts.python
        self.conn = None  # fabric.Connection, set when connected
        self.ready = False  # probe ran: run dir exists and helpers are uploaded
        self.run_dir = ""
        self.state_dir = ""
        self.workdir = ""
        # Its GPUs as the preflight agent found them (nvidia-smi -L: (index, name, uuid)); None: not asked.
        self.gpus: Optional[tuple] = None
        self.lock = threading.Lock()
        self.forwarding = True
        # After preflight: (task key, channel) of the host agent waiting to become that task's
        # wrapper, so the host's first task costs no second remote shell.
        self.spare: Optional[tuple[str, object]] = None
        # Its fork server's socket for the run and the agent kept as its keeper (ssh/zygote.py), or None.
        self.zygote: Optional[str] = None
        self.keeper = None
        self.zygote_restarts = Restarts(self.name)  # (for the run: a new connection keeps the count)

    @property
    def transport(self):
        return self.conn.client.get_transport() if self.conn is not None else None

    def drop_connection(self) -> None:
        """Close the connection: the next command connects afresh."""
        with self.lock:
            conn, self.conn = self.conn, None
        close_quietly(conn)

    def forget_connection(self) -> None:
        """Close the connection and forget the probe: the next start connects afresh and probes
        again (a host that was lost, rebooted or partitioned)."""
        with self.lock:
            conn, self.conn, self.ready = self.conn, None, False
            self.zygote = self.keeper = None  # (its keeper's channel goes with the connection, and the server)
        close_quietly(conn)

    def pidfile(self, task: PlannedTask, n: int) -> str:
        """The pid file of the ``n``-th start (0-based) of ``task`` on this host."""
        return posixpath.join(self.run_dir, "pids", f"{task.slug}.{n}.pid")


def close_quietly(conn) -> None:
    """Close a connection (or None); a connection that fails to close is closed enough."""
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass
