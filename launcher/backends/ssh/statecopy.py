"""The state dir's copy between hosts (``state.sync: copy``), and the channels both the copy and
the fetch use: a ``remote/statesync.py`` command per host, opened on the connections already
there. One channel on the source host packs a tar; the launcher relays its bytes to one channel
per receiver, each from its own thread (``Pipe``), so one stalled host (a cut link) never holds
up the others; each receiver extracts into a temp dir and renames it into place only when size
and sha256 match the sender's summary."""

from __future__ import annotations

import json
import queue
import shlex
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Optional

from launcher.bounded import HOST_LINE_BYTES, escape
from launcher.errors import LaunchError, exc_text
from launcher.remote import source as remote_source
from launcher.backends.ssh.runner import BadReply, parse_reply

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool

CHUNK = 1 << 16


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def state_command(python: str, mode: str, state_dir: str, areas: list[str]) -> str:
    parts = [python, "-S", "-c", remote_source("statesync.py"), mode, state_dir, *areas]
    return " ".join(shlex.quote(p) for p in parts)


def open_channel(pool: "HostPool", name: str, command: str, io_timeout: float):
    hs = pool.hosts[name]
    problems = pool.connect([name])
    if problems:
        raise LaunchError(problems[name])
    try:
        chan = hs.transport.open_session(timeout=pool.opts.connect_timeout)
        chan.set_combine_stderr(False)
        chan.settimeout(io_timeout)
        chan.exec_command(command)
    except Exception as exc:  # noqa: BLE001
        from launcher.backends.ssh.connect import describe_channel_error  # (late: paramiko is the [ssh] extra's)

        raise LaunchError(describe_channel_error(exc, pool.opts.connect_timeout)) from None
    return chan


def copy(pool: "HostPool", src: str, targets: list[str], areas: list[str], io_timeout: float) -> int:
    """``areas`` of ``src``'s state dir into every target's; the bytes copied. A host whose copy
    fails: one LaunchError line per such host (its partial copy discarded)."""
    hosts = pool.hosts
    sender = open_channel(pool, src, state_command(hosts[src].python, "pack", hosts[src].state_dir, areas), io_timeout)
    pipes: dict[str, Pipe] = {}
    failed: dict[str, str] = {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets))), thread_name_prefix="state-open") as ex:
            futures = {name: ex.submit(open_channel, pool, name, state_command(hosts[name].python, "unpack",
                                                                                hosts[name].state_dir, areas),
                                       io_timeout)
                       for name in targets}
            for name, fut in futures.items():
                try:
                    pipes[name] = Pipe(name, fut.result(timeout=io_timeout), io_timeout)
                except LaunchError as exc:
                    failed[name] = exc.lines[0]
                except FutureTimeout:
                    failed[name] = f"no answer within {io_timeout:g} s (link down?)"
                except Exception as exc:  # noqa: BLE001
                    failed[name] = f"cannot open a channel ({exc_text(exc)})"
            ex.shutdown(wait=False)
        try:
            relay(sender, pipes)
        except Exception as exc:  # noqa: BLE001 - the sender (chief's host) stalled or went away
            raise LaunchError(f"host {src}: packing its state dir for copying failed "
                              f"({exc_text(exc, io_timeout)}); check the host") from None
        summary = sender_summary(sender, io_timeout)
        trailer = {"abort": f"{src} could not pack: {summary['error']}"} if "error" in summary else summary
        for pipe in pipes.values():
            pipe.finish(struct.pack(">I", 0) + json.dumps(trailer).encode() + b"\n")
        for name, pipe in pipes.items():
            if not pipe.error:
                pipe.join(io_timeout)
            if pipe.is_alive() and not pipe.error:
                pipe.error = f"no progress for {io_timeout:g} s (link down?)"
            if pipe.error:
                failed[name] = pipe.error
                continue
            answer = reply(pipe.chan)
            if not answer.get("ok"):
                failed[name] = answer.get("error", "no answer")
        if "error" in summary:
            raise LaunchError(f"host {src}: cannot pack its state dir {hosts[src].state_dir} for copying: "
                              f"{summary['error']}; check the host")
    finally:
        # A pipe still writing is stuck on a dead link, holding its transport's write lock:
        # drop that connection first (that unblocks it; the host reconnects when next used),
        # or closing its channel would wait forever too.
        stuck = {name for name, pipe in pipes.items() if pipe.is_alive()}
        for name in stuck:
            pool.hosts[name].drop_connection()
        for chan in [sender, *(p.chan for n, p in pipes.items() if n not in stuck)]:
            try:
                chan.close()
            except Exception:  # noqa: BLE001
                pass
    if failed:
        raise LaunchError(*[
            f"host {name}: state copy from {src} failed: {why}; the partial copy was discarded; fix the host "
            f"(disk space, link) or use shared storage (state.sync: shared)" for name, why in sorted(failed.items())
        ])
    return int(summary["size"])


def relay(sender, pipes: dict) -> None:
    """Read the tar from the chief's host; each receiver gets it through its own thread, so
    one stalled host (a cut link) never holds up the others."""
    while True:
        data = sender.recv(CHUNK)
        if not data:
            return
        frame = struct.pack(">I", len(data)) + data
        for pipe in pipes.values():
            pipe.put(frame)


def early_error(chan) -> Optional[str]:
    """A receiver that stopped reading usually said why (e.g. its disk is full)."""
    try:
        chan.settimeout(5.0)
        answer = json.loads(chan.recv(65536).decode("utf-8", "replace").splitlines()[0])
        return answer.get("error")
    except Exception:  # noqa: BLE001
        return None


def sender_summary(chan, timeout: float) -> dict:
    err = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
            del err[:-HOST_LINE_BYTES]  # its last line is the summary: a flood before it stays bounded
        elif chan.exit_status_ready():
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                del err[:-HOST_LINE_BYTES]
            break
        else:
            time.sleep(0.01)
    lines = err.decode("utf-8", "replace").strip().splitlines()
    try:
        summary = parse_reply(lines[-1].encode())
        if "error" not in summary and not isinstance(summary.get("size"), int):
            raise BadReply(f"{lines[-1][:80]!r}, not the summary of a copy")
    except (IndexError, BadReply):
        summary = {"error": escape((lines[-1] if lines else "no answer")[-300:])}
    if chan.exit_status_ready() and chan.recv_exit_status() != 0 and "error" not in summary:
        summary = {"error": f"exit {chan.recv_exit_status()}"}
    return summary


def reply(chan) -> dict:
    from launcher.backends.ssh.runner import readline as _readline

    try:
        line = _readline(chan)
        return parse_reply(line) if line else {"error": "no answer (connection lost?)"}
    except BadReply as exc:
        return {"error": f"the agent answered {exc}"}
    except Exception as exc:  # noqa: BLE001
        return {"error": f"no answer ({type(exc).__name__})"}


class Pipe(threading.Thread):
    """Writes frames to one receiver's channel from its own thread. A receiver that fails keeps
    its first error and drops the rest; one that stops taking data for ``timeout`` s is stalled."""

    def __init__(self, name: str, chan, timeout: float) -> None:
        super().__init__(daemon=True, name=f"state-copy-{name}")
        self.chan, self.timeout = chan, timeout
        self.error: Optional[str] = None
        self.frames: queue.Queue = queue.Queue(maxsize=32)
        self.start()

    def put(self, frame: Optional[bytes]) -> None:
        if self.error:
            return
        try:
            self.frames.put(frame, timeout=self.timeout)
        except queue.Full:
            self.error = f"no progress for {self.timeout:g} s (link down?)"

    def finish(self, trailer: bytes) -> None:
        self.put(trailer)
        self.put(None)

    def run(self) -> None:
        while True:
            frame = self.frames.get()
            if frame is None:
                break
            if self.error:
                continue
            try:
                self.chan.sendall(frame)
            except Exception as exc:  # noqa: BLE001 - the receiver failed or the link is gone
                self.error = early_error(self.chan) or f"connection lost ({exc_text(exc, self.timeout)})"
        if not self.error:
            try:
                self.chan.shutdown_write()
            except Exception as exc:  # noqa: BLE001
                self.error = f"connection lost ({exc_text(exc, self.timeout)})"
