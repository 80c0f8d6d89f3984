"""Each ssh host's fork server for the run (launcher/remote/zygote.py): where the run uses one
(unless ``restart.warm_standby: false``) and a host's tasks are Python that uses TensorFlow, the
preflight's host agent starts it in its first exchange (launcher/remote/zygotehost.py: in the
environment a task gets, its socket bound first), so its import runs while the preflight goes on;
at the preflight's end that agent stays its keeper over its own channel, leased like a task's:
the server ends with the run, or within ``ssh.lease`` of a lost session. Every task and standby
of the host is then forked from it (taskwrap.py ``--zygote``; a standby is only its wrapper until
promoted: ``--standby-defer``). Such a host's first task starts over a channel of its own (the
agent is the keeper).

A server that ended (killed, out of memory) is said by its keeper on that channel at once; the
next start on the host that it would serve (or promotion of a standby it would fork) decides as
the local backend does (launcher/backends/zygotes.py Restarts: a new one on the same socket, at
most RESTARTS times a run, else the host's tasks start cold), written as a zygote_ended event.
Until then a wrapper that asks finds the socket refused and starts its task cold at once."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from launcher.bounded import HOST_LINE_BYTES, one_line
from launcher.contract import envnames
from launcher.errors import LaunchError, exc_text
from launcher.plan.build import Plan
from launcher.record import events as ev
from launcher.backends.zygotes import TITLE_BYTES, entry, plain_entry, start_env
from launcher.backends.ssh.runner import BadReply, parse_reply

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.host import HostState
    from launcher.backends.ssh.pool import HostPool


def order(pool: "HostPool", plan: Plan, name: str) -> Optional[dict]:
    """What host ``name``'s agent is asked to start (agent.py request 1 "zygote"), or None where
    no task of the plan would be served: the interpreter and imports of its first such task (a
    host of no task, a hot spare, keeps standbys for any: the plan's first), and the environment
    the tasks share (a task's own variables left out, room for them)."""
    if pool.zygote_cwd is None or (name in pool.hosts and pool.hosts[name].zygote_restarts.off):
        return None
    if plan.tasks:
        pool.zygote_tasks = plan.tasks  # (a host probed later, alone: a spare made ready for its standbys)
    for task in sorted(plan.tasks or pool.zygote_tasks, key=lambda t: t.host != name):  # (its own first, in the plan's order)
        found = plain_entry(task.command, pool.zygote_cwd)
        if found is not None:
            interpreter, imports = found
            said = {"argv": interpreter, "imports": list(imports), "env": start_env(task.env_dict),
                    "pad": envnames.ZYGOTE_PAD, "title": TITLE_BYTES, "grace": pool.stop_grace}
            if pool.keep_warm > 0:  # (kept warm past the run: zygotehost.py warm)
                said["keep_warm"] = pool.keep_warm
            again = pool.zygote_again.get(name)  # (its keeper ended: the new one on the same path)
            return {**said, "socket": again} if again else said
    return None


# How long the keeper has to answer a restart (it binds the socket and starts the server: no import).
RESTART_WAIT = 15.0


class Keeper:
    """The host agent kept as its fork server's keeper: its channel, leased like a task's
    (launcher/backends/ssh/lease.py renews what has a channel and no exit code), on which it says
    when the server ended and starts a new one when asked (launcher/remote/zygotehost.py keep)."""

    def __init__(self, channel) -> None:
        self.channel = channel
        self.lock = threading.Lock()  # (one start at a time reads its channel)
        self._buf = b""
        self._said: list[dict] = []

    @property
    def exit_code(self) -> Optional[int]:
        return 0 if self.channel.closed or self.channel.exit_status_ready() else None

    def ended(self) -> Optional[dict]:
        """Its word that the server ended ({"ended": code, "cold": why}) where it came, else None."""
        self._read(0.0)
        return self._take("ended")

    def restart(self) -> dict:
        """A new server asked for: the keeper's answer ({"socket": path} or {"error": text})."""
        try:
            self.channel.sendall(b'{"restart":true}\n')
        except Exception as exc:  # noqa: BLE001 - a channel that broke: no new server
            return {"error": f"its keeper's channel failed ({exc_text(exc)})"}
        deadline = time.monotonic() + RESTART_WAIT
        while True:
            got = self._take("restarted")
            if got is not None:
                said = got.get("restarted")
                return said if isinstance(said, dict) else {"error": "a reply that is not an object"}
            left = deadline - time.monotonic()
            if left <= 0 or self.exit_code is not None:
                return {"error": f"its keeper did not answer within {RESTART_WAIT:g} s"
                        if left <= 0 else "its keeper (the host agent) ended"}
            self._read(left)

    def _take(self, key: str) -> Optional[dict]:
        for i, said in enumerate(self._said):
            if key in said:
                return self._said.pop(i)
        return None

    def _read(self, wait: float) -> None:
        """What the agent said by now (waiting up to ``wait`` s for more), as objects; garbage (a
        line not an object, or past HOST_LINE_BYTES) dropped."""
        chan = self.channel
        try:
            while chan.recv_ready() or wait > 0:
                chan.settimeout(max(wait, 0.001))
                data = chan.recv(65536)
                wait = 0.0
                if not data:
                    break
                self._buf += data
        except (socket.timeout, OSError, EOFError):
            pass
        finally:
            chan.settimeout(None)
        *lines, self._buf = self._buf.split(b"\n")
        self._buf = self._buf if len(self._buf) <= HOST_LINE_BYTES else b""
        for line in lines:
            try:
                said = parse_reply(line)
            except BadReply:
                continue
            self._said = [*self._said[-99:], said]  # (bounded: it says one line a server)


def warm_event(name: str, said: dict) -> Optional[ev.ZygoteWarm]:
    """What a host's agent said of its server kept warm (``ssh.keep_warm``; zygotehost.py warm):
    adopted from an earlier run, started to be kept, or not kept and why, as a zygote_warm event;
    None where the run did not ask."""
    warm, off = said.get("warm"), said.get("warm_off")
    if isinstance(warm, dict) and type(warm.get("pid")) is int:
        keep = warm.get("keep") if isinstance(warm.get("keep"), (int, float)) else 0
        if warm.get("reused") is True:
            line = f"{name}: forking from the fork server an earlier run kept warm (pid {warm['pid']}): no import"
        else:
            line = f"{name}: its fork server (pid {warm['pid']}) stays {keep:g} s after the run (ssh.keep_warm)"
        return ev.ZygoteWarm(host=name, pid=warm["pid"], reused=warm.get("reused") is True, said=line)
    if isinstance(off, str) and off:
        return ev.ZygoteWarm(host=name, said=one_line(f"{name}: its fork server is not kept warm: {off}; it ends "
                                                      "with the run", 300))
    return None


def keep(pool: "HostPool", hs: "HostState", chan, socket_path: str) -> None:
    """The agent on ``chan`` stays the keeper of the server at ``socket_path``: its lease renewed
    from now on; the host's tasks ask that server."""
    chan.settimeout(None)
    chan.sendall(json.dumps({"keep": {"lease": pool.opts.lease}}).encode() + b"\n")
    hs.zygote, hs.keeper = socket_path, Keeper(chan)
    pool.lease.track(hs.keeper)


def ensure(pool: "HostPool", hs: "HostState", again: Optional[Callable[[], None]] = None) -> None:
    """Before a start on ``hs`` that its server would serve: where its keeper said it ended (or the
    keeper itself is gone: its server ended with it, its lifeline), Restarts decides, the
    zygote_ended event is written (the console says its note) and a new server started on the
    same socket (by its keeper, or by a new keeper: ``again``, the host's preflight once more),
    or the host's tasks start cold from now on (``hs.zygote`` None: nothing asks the socket again)."""
    keeper = hs.keeper
    if keeper is None or not hs.zygote:
        return
    with keeper.lock:
        said, gone = keeper.ended(), keeper.exit_code is not None
        if said is None and not gone:
            return
        code, cold = (said or {}).get("ended"), (said or {}).get("cold")
        event = hs.zygote_restarts.ended(code if type(code) is int else None, cold if isinstance(cold, str) else "")
        pool.write(event)
        if event.cold:
            hs.zygote = None
            return
        if gone:
            _keep_again(pool, hs, again)
            return
        got = keeper.restart()
        if not isinstance(got.get("socket"), str) or got["socket"] != hs.zygote:
            why = got.get("error") if isinstance(got.get("error"), str) else "an answer without its socket"
            pool.write(hs.zygote_restarts.not_started(why))
            hs.zygote = None


def _keep_again(pool: "HostPool", hs: "HostState", again: Optional[Callable[[], None]]) -> None:
    """A new keeper for ``hs`` (its agent killed, its session gone), its server on the socket
    the last one had (a standby's wrapper that waits asks that path), or the host's tasks cold
    from now on, said in one line."""
    old, hs.keeper = hs.zygote, None
    if again is None:
        pool.write(hs.zygote_restarts.not_started("its keeper (the host agent) ended"))
        hs.zygote = None
        return
    pool.zygote_again[hs.name] = old
    try:
        again()  # (the new keeper's socket into hs.zygote: keep)
    except LaunchError as exc:
        pool.write(hs.zygote_restarts.not_started(f"its keeper (the host agent) ended; a new one: {exc.lines[0]}"))
        hs.zygote = None
        return
    finally:
        pool.zygote_again.pop(hs.name, None)
    if hs.keeper is None:
        pool.write(hs.zygote_restarts.not_started("its keeper (the host agent) ended, and the new agent "
                                                  "started no server"))
        hs.zygote = None


def served(pool: "HostPool", hs: "HostState", command, fork: bool) -> Optional[str]:
    """The socket of the server that forks a task of ``command`` (the stub's, or the reference
    worker's) on ``hs`` where its start asked for one (``fork``: StartRequest.fork), or None (no
    server there, the run uses none, not a task it serves)."""
    if not fork or not hs.zygote or pool.zygote_cwd is None:
        return None
    return hs.zygote if entry(list(command), pool.zygote_cwd) is not None else None


def cwd_of(base_dir: Path, workdir: str) -> Path:
    """Where a task's script is read to know whether it uses TensorFlow: the project here (the
    one ssh.sync uploads, or the same checkout the hosts have)."""
    return (base_dir / workdir).resolve()
