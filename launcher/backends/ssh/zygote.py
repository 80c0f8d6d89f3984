"""Each ssh host's fork server for the run (launcher/remote/zygote.py): where the run uses one
(unless ``restart.warm_standby: false``) and a host's tasks are Python that uses TensorFlow, the
preflight's host agent starts it in its first exchange (launcher/remote/zygotehost.py: in the
environment a task gets, its socket bound first), so its import runs while the preflight goes on;
at the preflight's end that agent stays its keeper over its own channel, leased like a task's:
the server ends with the run, or within ``ssh.lease`` of a lost session. Every task and standby
of the host is then forked from it (taskwrap.py ``--zygote``; a standby is only its wrapper until
promoted: ``--standby-defer``). Such a host's first task starts over a channel of its own (the
agent is the keeper)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from launcher.contract import envnames
from launcher.plan.build import Plan
from launcher.backends.zygotes import TITLE_BYTES, entry, plain_entry, start_env

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.host import HostState
    from launcher.backends.ssh.pool import HostPool


def order(pool: "HostPool", plan: Plan, name: str) -> Optional[dict]:
    """What host ``name``'s agent is asked to start (agent.py request 1 "zygote"), or None where
    no task of the plan would be served: the interpreter and imports of its first such task (a
    host of no task, a hot spare, keeps standbys for any: the plan's first), and the environment
    the tasks share (a task's own variables left out, room for them)."""
    if pool.zygote_cwd is None:
        return None
    if plan.tasks:
        pool.zygote_tasks = plan.tasks  # (a host probed later, alone: a spare made ready for its standbys)
    for task in sorted(plan.tasks or pool.zygote_tasks, key=lambda t: t.host != name):  # (its own first, in the plan's order)
        found = plain_entry(task.command, pool.zygote_cwd)
        if found is not None:
            interpreter, imports = found
            return {"argv": interpreter, "imports": list(imports), "env": start_env(task.env_dict),
                    "pad": envnames.ZYGOTE_PAD, "title": TITLE_BYTES, "grace": pool.stop_grace}
    return None


class Keeper:
    """The host agent kept as its fork server's keeper: its channel, leased like a task's
    (launcher/backends/ssh/lease.py renews what has a channel and no exit code)."""

    def __init__(self, channel) -> None:
        self.channel = channel

    @property
    def exit_code(self) -> Optional[int]:
        return 0 if self.channel.closed or self.channel.exit_status_ready() else None


def keep(pool: "HostPool", hs: "HostState", chan, socket_path: str) -> None:
    """The agent on ``chan`` stays the keeper of the server at ``socket_path``: its lease renewed
    from now on; the host's tasks ask that server."""
    chan.settimeout(None)
    chan.sendall(json.dumps({"keep": {"lease": pool.opts.lease}}).encode() + b"\n")
    hs.zygote, hs.keeper = socket_path, Keeper(chan)
    pool.lease.track(hs.keeper)


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
