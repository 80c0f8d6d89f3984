"""The ssh backend's hosts: who they are, their connections and per-host state, and the
bookkeeping that keeps tasks on them alive (starts, the lease, the heartbeat).

The helpers of this package (probe, sync, state, down, supervisor, task) take a ``HostPool``
and the options, not the backend. Membership is the pool's too, for elastic runs: hosts are
added (``add_hosts``: discovery's answers, spares), lost (``lost_hosts``: silent beyond
``elastic.host_wait``, or preempted), forgotten (``forget_connection``: connect afresh next
time) and watched for their return (``hosts_back``, ``unwatch``).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait as wait_futures
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from launcher.plan.hostloss import HostLoss, LossKind
from launcher.spec.model import Host
from launcher.backends.ssh.heartbeat import Heartbeat
from launcher.backends.ssh.host import HostState, close_quietly
from launcher.backends.ssh.lease import Lease
from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.runner import Runner, close_channel, run_command
from launcher.backends.ssh.task import SSHTask
from launcher.backends.ssh.watch import HostWatch


class HostPool:
    # Who besides the user may read the run's dirs on the hosts: the spec's ``share`` (the
    # backend sets it; the agent makes the dirs 0700, or 0750 for "group").
    share = "private"
    # Where a task's script is read to know whether its host's fork server serves it (the backend
    # sets it; None: the run uses none, restart.warm_standby false), and the server's stop grace.
    zygote_cwd: Optional[Path] = None
    zygote_tasks: tuple = ()  # the last plan's tasks (ssh/zygote.py order)
    # The run record's write (the backend sets it): what a host's fork server did (ssh/zygote.py ensure).
    write: Callable = staticmethod(lambda event: None)
    # What a preflight learns, maybe before the record exists (a server kept warm: ssh/zygote.py
    # warm_event): written (early: the record's first lines once it does) and said (the backend sets it).
    write_early: Callable = staticmethod(lambda event: None)
    stop_grace = 5.0
    keep_warm = 0.0  # ssh.keep_warm: s each host's fork server stays after the run (ssh/zygote.py order)

    def __init__(self, hosts: Iterable[Host], opts: SSHOptions, base_dir: Path, dirs: tuple[str, str, str],
                 runner: Optional[Runner] = None, on_preempted: Optional[Callable[[str], None]] = None) -> None:
        """``dirs``: (run dir, state dir, workdir) on a host before its probe makes them absolute;
        ``runner`` replaces running commands over the connections (tests); ``on_preempted(host)``
        is told of a host's GCE preemption notice, once."""
        self.opts = opts
        self.base_dir = base_dir  # what ssh.config and key paths are relative to
        self.dirs = dirs
        self.hosts: dict[str, HostState] = {}
        self._runner = runner or self._paramiko_run
        self.on_preempted = on_preempted
        self.starts: dict[str, int] = {}  # task key -> how many times it was started
        self.lease = Lease(opts.lease)
        self.heartbeat = Heartbeat(interval=min(1.0, opts.lease / 4))
        self._watch: Optional[HostWatch] = None  # lost hosts, probed for their return (elastic)
        self.preempted: dict[str, float] = {}  # host -> when its GCE preemption notice came
        self._watching: set[str] = set()
        # The watch's own connections (host -> Connection), apart from the hosts' working ones: a
        # probe that gives up (no answer within a second: a loaded machine, a flapping link) closes
        # only its own, never one that a state copy or a start is using at that moment.
        self._probes: dict[str, object] = {}
        self._probes_lock = threading.Lock()
        # Host -> (its first failure in a row, wall clock; its last, monotonic; its one line).
        self._refused: dict[str, tuple[float, float, str]] = {}
        # Host -> the socket of its fork server whose keeper ended, for the new one (ssh/zygote.py order).
        self.zygote_again: dict[str, str] = {}
        self.add_hosts(hosts)

    # -------------------------------------------------------------- connections

    def executor(self, n: int) -> ThreadPoolExecutor:
        """Threads for ``n`` hosts at once (at most 64)."""
        return ThreadPoolExecutor(max_workers=max(1, min(64, n)), thread_name_prefix="ssh")

    def connect(self, names: Sequence[str], recent: float = 0.0) -> dict[str, str]:
        """Open (or reuse) one connection per host, all in parallel; {host: problem} for failures.
        ``recent``: a host that failed less than this many seconds ago is not dialled again (its
        problem as it was)."""
        with self.executor(len(names)) as pool:
            results = dict(zip(names, pool.map(lambda n: self.connect_one(n, recent), names)))
        return {k: v for k, v in results.items() if v}

    def connect_one(self, name: str, recent: float = 0.0) -> Optional[str]:
        """Open (or reuse) the host's connection; None, or the one-line problem."""
        hs = self.hosts[name]
        with hs.lock:
            if hs.transport is not None and hs.transport.is_active():
                return None
            failed = self._refused.get(name)
            if failed is not None and recent and time.monotonic() - failed[1] < recent:
                return failed[2]
            problem = self._dial(hs)
            if problem is None:
                self._refused.pop(name, None)
            else:  # (since its first failure in a row, as the preflight reports it)
                self._refused[name] = (failed[0] if failed else time.time(), time.monotonic(), problem)
            return problem

    def refused_since(self, name: str) -> float:
        """When the host's connections began failing (wall clock; now if they do not)."""
        failed = self._refused.get(name)
        return failed[0] if failed is not None else time.time()

    def _dial(self, hs: HostState) -> Optional[str]:
        from launcher.backends.ssh.connect import describe_connect_error, make_connection, open_connection

        conn = None
        try:
            conn = make_connection(hs.spec, self.opts, self.base_dir)
            open_connection(conn, self.opts)
            hs.conn = conn
            return None
        except Exception as exc:  # noqa: BLE001 - every failure becomes one line
            if conn is not None:
                close_quietly(conn)
                return describe_connect_error(exc, conn, hs.spec, self.opts)
            return f"host {hs.name}: cannot connect ({exc})"

    def run_on(self, name: str, command: str, stdin: Optional[bytes] = None, timeout: float = 30.0) -> tuple[int, str]:
        return self._runner(name, command, stdin, timeout)

    def _paramiko_run(self, name: str, command: str, stdin: Optional[bytes], timeout: float) -> tuple[int, str]:
        """Run one command on the host's open connection (connecting if needed)."""
        hs = self.hosts[name]
        transport = hs.transport
        if transport is None or not transport.is_active():
            problems = self.connect([name])
            if problems:
                return -1, problems[name]
            transport = hs.transport
        return run_command(transport, command, stdin, timeout)

    def drop_spare(self, hs: HostState) -> None:
        """Close the host agent left waiting after preflight (releasing the ports it holds)."""
        spare, hs.spare = hs.spare, None
        if spare is not None:
            close_channel(spare[1])

    def forget_connection(self, hs: HostState) -> None:
        """Connect afresh (and probe again) next time: the connection and the waiting agent go."""
        hs.forget_connection()
        self.drop_spare(hs)

    # -------------------------------------------------------------- tasks on the hosts

    def track(self, handle: SSHTask) -> SSHTask:
        """Renew ``handle``'s lease from now on, and hear its host's heartbeat."""
        self.lease.track(handle)
        hs = handle.host
        self.heartbeat.watch(hs.name, lambda: hs.transport)
        return handle

    # -------------------------------------------------------------- membership (elastic)

    def add_hosts(self, hosts: Iterable[Host]) -> None:
        """New hosts (discovery, spares): their dirs as the hosts already here have them."""
        model = next(iter(self.hosts.values()), None)
        for host in hosts:
            if host.name in self.hosts:
                continue
            hs = HostState(host, self.opts)
            if model is not None:
                hs.run_dir, hs.state_dir, hs.workdir = model.run_dir, model.state_dir, model.workdir
            else:
                hs.run_dir, hs.state_dir, hs.workdir = self.dirs
            self.hosts[host.name] = hs

    def _answers(self, name: str) -> bool:
        """The host answers now: its connection runs ``true`` (within ssh.connect_timeout), or a
        new one opens. Asked right after a task's connection dropped, a connection can still look
        active for a moment (the suite saw a preempted host taken for alive and a worker restarted
        onto it), so looking is not enough: it must answer."""
        hs = self.hosts[name]
        transport = hs.transport
        if transport is not None and transport.is_active() and self.heartbeat.silence(name) <= self.opts.lease:
            code, _ = run_command(transport, "true", None, self.opts.connect_timeout)
            if code == 0:
                self.heartbeat.heard(name)
                return True
        self.forget_connection(hs)
        if self.connect_one(name) is None:
            self.heartbeat.heard(name)
            return True
        return False

    def _silent_now(self, hosts: Sequence[str], look: Mapping[str, float]) -> list[str]:
        """The hosts of ``hosts`` that do not answer now, asked in parallel. A host in ``look``
        that has not answered within its bound counts as silent, and its look goes on in the
        background (a host shutting down can accept the connection and never send sshd's
        banner: ssh.connect_timeout would pass first)."""
        if not hosts:
            return []
        pool = self.executor(len(hosts))
        try:
            started = time.monotonic()
            futures = {n: pool.submit(self._answers, n) for n in hosts}
            silent = []
            for n, f in futures.items():
                if n in look:
                    done, _ = wait_futures([f], timeout=max(0.0, started + look[n] - time.monotonic()))
                    if f not in done or not f.result():
                        silent.append(n)
                elif not f.result():
                    silent.append(n)
            return silent
        finally:
            pool.shutdown(wait=not look)

    def host_preempted(self, name: str) -> None:
        """A task on ``name`` saw GCE's preemption notice: the host is going away; it counts as
        lost at once (``lost_hosts``), without waiting elastic.host_wait."""
        if name in self.preempted:
            return
        self.preempted[name] = time.time()
        if self._watch is None:
            self._watch = HostWatch(self._probe)
        self._watch.going(name)
        if self.on_preempted is not None:
            self.on_preempted(name)

    def lost_hosts(self, hosts: Sequence[str], wait: float, stop=None,
                   look: Mapping[str, float] = {}) -> dict[str, HostLoss]:
        """Hosts that announced their preemption are lost at once (PREEMPTED, since the notice).
        Every other host is looked at now, all in parallel (a host in ``look``: for at most that
        many seconds, silent if not answered by then); one that does not answer is tried again
        each second for ``wait`` s; those still silent then are lost (UNREACHABLE, since the look
        began)."""
        lost = {}
        for n in hosts:
            if n in self.preempted:
                at = self.preempted.pop(n)
                lost[n] = HostLoss(LossKind.PREEMPTED, n, at,
                                   f"preempted: GCE notice at {time.strftime('%H:%M:%S', time.localtime(at))}")
        hosts = [n for n in hosts if n not in lost]
        began, started = time.time(), time.monotonic()
        silent = self._silent_now(hosts, look)
        while silent and time.monotonic() - started < wait:
            if stop is not None and stop.wait(1.0):
                break
            if stop is None:
                time.sleep(1.0)
            with self.executor(len(silent)) as pool:
                answers = dict(zip(silent, pool.map(self._answers, silent)))
            silent = [n for n in silent if not answers[n]]
        took = time.monotonic() - started
        return {**lost, **{n: HostLoss(LossKind.UNREACHABLE, n, began, f"unreachable for {took:.0f} s") for n in silent}}

    def is_lost(self, name: str) -> bool:
        """Known to be gone or suspect: preempted, or lost and watched for its return (no
        connection is tried: a host whose link is down would cost ssh.connect_timeout). A suspect
        host may still answer (its sshd accepts while the machine shuts down) and is not used
        meanwhile, e.g. as the source of a state copy that would die with it."""
        return name in self.preempted or name in self._watching

    def _probe(self, name: str) -> bool:
        """One probe of a lost host (watch.py): its own connection (reused while it lasts, never
        the host's working one) that runs ``true`` within a second."""
        from launcher.backends.ssh.connect import make_connection, open_connection

        with self._probes_lock:
            conn = self._probes.get(name)
        transport = conn.client.get_transport() if conn is not None else None
        if conn is not None and (transport is None or not transport.is_active()):
            # The host dropped the probe's own session since the last round (a shutdown's SIGKILL,
            # a reboot quicker than a round, sessions that keep dropping): a break in its answers,
            # even if a new connection would open now.
            self._close_probe(name)
            return False
        if transport is None:
            try:
                conn = make_connection(self.hosts[name].spec, self.opts, self.base_dir)
                open_connection(conn, self.opts)
            except Exception:  # noqa: BLE001 - not answering is what a probe finds out
                close_quietly(conn)
                return False
            with self._probes_lock:
                old, self._probes[name] = self._probes.get(name), conn
            close_quietly(old)
            transport = conn.client.get_transport()
        # A short answer time: a link that drops for a moment must break the run of answers
        # (TCP would otherwise just deliver late), so a flapping host never looks settled.
        code, _ = run_command(transport, "true", None, min(1.0, self.opts.connect_timeout))
        if code != 0:
            self._close_probe(name)
            return False
        return True

    def _close_probe(self, name: str) -> None:
        with self._probes_lock:
            conn = self._probes.pop(name, None)
        close_quietly(conn)

    def hosts_back(self, hosts: Sequence[str], settle: float) -> list[str]:
        """Of the lost ``hosts``, those that have answered every probe for ``settle`` s."""
        if self._watch is None:
            self._watch = HostWatch(self._probe)
        for name in set(self._watching) - set(hosts):
            self._watch.forget(name)
            self._close_probe(name)
        self._watching = set(hosts)
        self._watch.watch(list(hosts))
        return [h for h in self._watch.settled(settle) if h in self._watching]

    def hosts_answering(self, hosts: Sequence[str], seconds: float) -> list[str]:
        """Of ``hosts`` that ``hosts_back`` watches, those that have answered every probe for ``seconds``."""
        if self._watch is None:
            return []
        return [h for h in self._watch.settled(seconds) if h in self._watching and h in hosts]

    def unwatch(self, names: Iterable[str]) -> None:
        """Hosts a plan uses again are no longer watched for their return."""
        if self._watch is not None:
            for name in set(names) & self._watching:
                self._watch.forget(name)
                self._watching.discard(name)
                self._close_probe(name)

    # -------------------------------------------------------------- the end

    def close(self) -> None:
        """Stop the lease, the heartbeat and the watch; close every channel and connection."""
        tasks = self.lease.close()
        self.heartbeat.close()
        if self._watch is not None:
            self._watch.close()
        for name in list(self._probes):
            self._close_probe(name)
        for t in tasks:
            close_channel(t.channel)
        for hs in self.hosts.values():
            self.drop_spare(hs)
            hs.drop_connection()
