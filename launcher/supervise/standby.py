"""Warm standby (restart.warm_standby): the next attempt's processes, started once the current
attempt is ready, import TensorFlow and wait for SIGUSR1; a restart promotes them instead of
starting cold. Their output is marked ``(standby)`` until they are promoted.

The protocol, which the reference worker follows (worker/main.py) and a script of its own can
(docs/concepts/runs.md, "Warm standby"): started with TFCLUSTER_STANDBY=1, it blocks SIGUSR1 and says,
on its control channel (TFCLUSTER_CONTROL_FD: launcher/remote/taskstream.py; a line it prints is
never read as the protocol), a line starting ``tfcluster-standby`` (``waiting``, then ``ready`` once its imports are done); promoted, it reads
the next attempt's environment from the file TFCLUSTER_STANDBY_ENV names (the backend writes it
just before the signal: TF_CONFIG may have changed, a replan) and says ``tfcluster-standby
promoted``. A standby that never said a ``tfcluster-standby`` line is not promoted (it may not
have blocked the signal); one promoted that does not say ``promoted`` within ACK_BOUND seconds
of being ready is stopped and its task started cold, in one line.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional, Sequence

from launcher.contract import envnames
from launcher.backends.base import Capabilities, StartRequest, TaskHandle
from launcher.errors import LaunchError
from launcher.plan.build import PlannedTask, redact_command
from launcher.record import events as ev
from launcher.contract.entrypoint import is_reference_worker, python_entry
from launcher.contract.liveness import BEAT
from launcher.spec.model import Restart
from launcher.supervise.context import RunContext
from launcher.supervise.output import TaskOutput

MARK = "tfcluster-standby"
PROMOTED = MARK + " promoted"
# Seconds a promoted standby (already ready) has to say PROMOTED before it is started cold.
ACK_BOUND = 10.0
# A waiting reference worker's resident memory: TensorFlow, tf_keras and TFDS imported (measured
# with bench/recovery.py: 566-572 MB on this machine; BENCHMARKS.md, "Recovery").
STANDBY_BYTES = 600 * 2**20
# What a host keeps free besides its standbys: below this plus STANDBY_BYTES per task, none there.
RESERVE_BYTES = 2**30


@lru_cache(maxsize=1)
def _stub_source() -> str:
    from pathlib import Path

    from launcher.contract import exitsync, kerasalias, liveness, portcheck, standbyprio, usestf
    from launcher.remote import source

    live = Path(liveness.__file__).read_text(encoding="utf-8")
    return (source("pystandby.py").replace('"@STANDBY@"', repr(envnames.STANDBY))
            .replace('"@STANDBY_ENV@"', repr(envnames.STANDBY_ENV)).replace('"@CONTROL@"', repr(envnames.CONTROL_FD))
            .replace('"@LIVENESS@"', repr(live))
            .replace('"@KERAS@"', repr(envnames.KERAS)).replace('"@STRATEGY@"', repr(envnames.STRATEGY))
            .replace("# @KERASALIAS@\n", Path(kerasalias.__file__).read_text(encoding="utf-8"))
            .replace("# @STANDBYPRIO@\n", Path(standbyprio.__file__).read_text(encoding="utf-8"))
            .replace("# @PORTCHECK@\n", Path(portcheck.__file__).read_text(encoding="utf-8"))
            .replace("# @USESTF@\n", Path(usestf.__file__).read_text(encoding="utf-8"))
            .replace("# @PROMOTION@\n", source("promotion.py"))
            .replace("# @EXITSYNC@\n", Path(exitsync.__file__).read_text(encoding="utf-8")))


def stub_command(argv: Sequence[str]) -> Optional[list[str]]:
    """The command a task of ``argv`` runs, cold or as a warm standby: tfcluster's worker (which
    installs its liveness itself) and commands that are not a Python script or module run as they
    are (None); ``python [options] SCRIPT ARGS...`` becomes ``python [options] -c STUB SCRIPT
    ARGS...`` (-m likewise): launcher/remote/pystandby.py, which installs the task's liveness
    (launcher/contract/liveness.py) and runs the script as a cold start would (a standby first
    imports TensorFlow and waits to be promoted)."""
    if is_reference_worker(argv):
        return None
    parts, _ = python_entry(argv)
    if parts is None:
        return None
    interpreter, target = parts
    return [*interpreter, "-c", _stub_source(), *target]


def _entry_words(argv: Sequence[str]) -> str:
    """A command's first words for a line of the plan (a secret among them masked, as the plan's own)."""
    return " ".join(redact_command(argv)[:3]) + (" ..." if len(argv) > 3 else "")


def forks(capabilities: Capabilities, restart: Restart) -> bool:
    """Whether the run's starts ask for the host's warm parent (``StartRequest.fork``): where the
    backend keeps one (``Capabilities.fork``), unless restart.warm_standby is false, whether or
    not the run keeps standbys (one import of TensorFlow for the host's tasks costs less than one
    each); ``restart.warm_standby: false`` starts every task as its own process (the rule is
    ``Capabilities.forks``, which a backend that starts its warm parents ahead reads too)."""
    return capabilities.forks(restart)


def decide(restart: Restart, commands: Sequence[Sequence[str]], capabilities: Capabilities, backend: str,
           elastic: bool = False, refused: Optional[str] = None) -> tuple[bool, str]:
    """Whether the run keeps warm standbys, and why, in words ``plan`` shows. ``auto`` (the
    default) turns it on where it is safe: a backend that can (``capabilities``; ``backend``, its
    name, is only said), a run that may restart (or move tasks: elastic), and an entrypoint known
    to honour TFCLUSTER_STANDBY (a script that does not would start training as a standby).
    ``refused``: why this backend keeps none for this spec (``Hosts.standby_off``, and before a
    run ``BackendKind.standby_off``)."""
    value = restart.warm_standby
    if value is False:
        return False, "off (restart.warm_standby: false)"
    if not capabilities.warm_standby:
        return False, (f"off: backend {backend} keeps no standby; every restart starts cold"
                       + (" (restart.warm_standby: true has no effect here)" if value is True else ""))
    if refused:
        return False, (f"off on backend {backend}: {refused}"
                       + (" (restart.warm_standby: true has no effect here)" if value is True else ""))
    if restart.max_restarts == 0 and not elastic:
        return False, "off: restart.max_restarts is 0 (no restart to make faster)"
    cost = (f"about {STANDBY_BYTES / 2**30:.1f} GB each" if not forks(capabilities, restart) else
            # the host's warm parent (launcher/remote/zygote.py): its tasks that use TensorFlow forked from one import
            "forked from its host's zygote, which imports TensorFlow once, when promoted: until then each is "
            "its wrapper, about 15 MB")
    cost += "; left off on a host with less memory available"
    stubbed = sorted({_entry_words(c) for c in commands if stub_command(c) is not None})
    how = (f"; {', '.join(stubbed)}: under tfcluster's standby stub (TensorFlow imported where the script names "
           "it, nothing of the script's; once promoted it runs as __main__ with the cold start's argv, sys.path[0] "
           "and exit code)"
           if stubbed else "")
    if value is True:
        return True, (f"on (restart.warm_standby: true): each task's next process waits, imports done ({cost})"
                      + how)
    others = {}
    for c in commands:
        if not is_reference_worker(c) and stub_command(c) is None:
            others.setdefault(_entry_words(c), python_entry(c)[1])
    if others:
        words, why = sorted(others.items())[0]
        return False, (f"off: the entrypoint ({words}) is neither tfcluster's worker nor a Python script or "
                       f"module ({why}); set restart.warm_standby: true if it honours TFCLUSTER_STANDBY "
                       "(docs: concepts/runs.md, Warm standby)")
    if stubbed:
        return True, f"on (auto: a Python entrypoint): each task's next process waits ({cost}){how}"
    return True, f"on (auto: tfcluster's worker): each task's next process waits with TensorFlow imported ({cost})"


def plan_line(spec, tasks: Sequence[PlannedTask]) -> str:
    """``tfcluster plan``'s line on warm standby: on or off, and why."""
    from launcher.backends import backend_class, placed_hosts
    from launcher.plan.elastic import elastic_enabled

    cls = backend_class(spec.backend)
    on, why = decide(spec.restart, [t.command for t in tasks], cls.capabilities, cls.name,
                     elastic=cls.capabilities.elastic and elastic_enabled(spec, placed_hosts(spec)),
                     refused=cls.standby_off(spec) if cls.capabilities.warm_standby else None)
    if not on and forks(cls.capabilities, spec.restart):
        # The host's warm parent (launcher/remote/zygote.py) serves a run without standbys too.
        why += ("; its Python tasks that use TensorFlow are still forked from their host's zygote, which imports "
                "TensorFlow once (restart.warm_standby: false starts each as its own process)")
    return f"warm standby: {why}"


@dataclass
class _Standby:
    task: PlannedTask  # the plan it started under
    handle: TaskHandle
    active: bool = False  # promoted: its lines are the task's
    marked: bool = False  # said a tfcluster-standby line: SIGUSR1 is blocked
    ready: bool = False  # its imports are done
    acked: bool = False  # said PROMOTED
    stopping: bool = False  # being stopped: what it still says (a shell's "Killed") is only logged
    promoted_at: Optional[float] = None
    bound_from: Optional[float] = None  # when ACK_BOUND started counting


def _same_process(a: PlannedTask, b: PlannedTask) -> bool:
    """Whether a standby started for ``a`` can become ``b``: same host, command and environment
    but for TF_CONFIG and the task's name (which the promotion file carries)."""
    return a.host == b.host and a.command == b.command and a.base_env == b.base_env


class WarmStandby:
    def __init__(self, ctx: RunContext, output: TaskOutput) -> None:
        """``ctx``: the run's context (its backend, record and clock, context.py);
        ``output``: where a promoted standby's lines go (output.py: ``line``), and the
        never-raising sink every output reader calls (``drain``)."""
        self.backend = ctx.backend
        self.record = ctx.record
        self.clock = ctx.clock
        self.output = output
        # Whether every start of the run (standbys, promotions, cold starts: starts.py) asks for the
        # host's warm parent, decided once.
        self.fork = forks(ctx.backend.capabilities, ctx.restart)
        self._waiting: dict[str, list[_Standby]] = {}  # task key -> its standbys (its host's, spares')
        self._promoted: dict[str, _Standby] = {}  # promoted, not yet heard saying so
        self._short_said: set[str] = set()
        self._free: dict[str, int] = {}  # host -> bytes available, as the last start found them

    def start(self, number: int, tasks: Sequence[PlannedTask], env: dict[str, str],
              spares: Sequence[tuple[str, str]] = ()) -> None:
        """Start attempt ``number``'s processes now; they import TensorFlow and wait for SIGUSR1.
        Hot spares: each spare host ((name, address), elastic runs) keeps one standby per task,
        for the task that moves there. Hosts short of memory get none (said once per host); a
        task that has one waiting on a host already (``restock``) gets no second one there."""
        tasks = list(tasks) + [replace(t, host=name, address=address) for name, address in spares for t in tasks]
        tasks = [t for t in tasks if not self.waiting_on(t)]
        short = self._short_hosts(tasks)
        started = [s for s in (self._start_one(t, env) for t in tasks if t.host not in short) if s is not None]
        if started:
            own = {s.task.key: s.handle.info().local_pid() for s in started if s.task.host not in dict(spares)}
            self.record.write(ev.StandbyStart(
                attempt=number, pids=own, hosts=sorted({s.task.host for s in started}),
                # what each host said it had (Hosts.free_memory), when it could
                available_mb={h: n // 2**20 for h, n in sorted(self._free.items())} if self._free else None,
                spares=sorted({s.task.host for s in started} & set(dict(spares))) if spares else None))

    def restock(self, number: int, task: PlannedTask, env: dict[str, str]) -> None:
        """``task``'s standby was promoted while the attempt goes on (a parameter_server worker
        restarted alone): a new one for it, so that its next restart is warm too."""
        self.start(number, [task], env)

    def waiting_on(self, task: PlannedTask) -> bool:
        """Whether a standby for ``task`` waits on its host."""
        return any(s.task.host == task.host for s in self._waiting.get(task.key, []))

    def hosts(self) -> set[str]:
        """The hosts where standbys wait."""
        return {s.task.host for mine in self._waiting.values() for s in mine}

    def sessions_lost(self, hosts: Sequence[str]) -> dict[str, float]:
        """Of ``hosts``, those where a waiting standby's session with its host was lost (the
        backend's own sign that a host is gone: a dropped connection, a host silent past its
        lease; ``TaskHandle.session_lost``), and when (the earliest). A standby that exited by
        itself is no sign."""
        lost: dict[str, float] = {}
        for mine in self._waiting.values():
            for s in mine:
                if s.task.host in hosts and s.handle.poll() is not None and s.handle.session_lost is not None:
                    lost[s.task.host] = min(s.handle.session_lost, lost.get(s.task.host, s.handle.session_lost))
        return lost

    def forget(self, hosts: Sequence[str]) -> None:
        """The standbys on ``hosts`` (lost) no longer wait: no promotion picks them; those still
        running are stopped (a lost session's has ended already)."""
        gone = [s for mine in self._waiting.values() for s in mine if s.task.host in hosts]
        if not gone:
            return
        for key in list(self._waiting):
            self._waiting[key] = [s for s in self._waiting[key] if s.task.host not in hosts]
            if not self._waiting[key]:
                del self._waiting[key]
        for s in gone:
            s.stopping = True
        self.backend.tasks.stop([s.handle for s in gone], grace=0)

    def _start_one(self, task: PlannedTask, env: dict[str, str]) -> Optional[_Standby]:
        """One standby process for ``task`` (its output marked ``(standby)`` until promoted), or None."""
        entry: list[_Standby] = []

        def line(key: str, text: str) -> None:  # a line it printed
            s = entry[0] if entry else None
            if s is not None and s.active:
                self.output.line(key, text)
                return
            # (a standby being stopped: what it still says, a shell's "Killed", is only logged)
            self.record.log_line(key, f"(standby) {text}", console=s is None or not s.stopping)

        def control(key: str, text: str) -> None:  # a line of its control channel: the protocol is read there only
            s = entry[0] if entry else None
            if s is not None and text.startswith(MARK):
                s.marked = True
                s.ready = s.ready or text.startswith(MARK + " ready")
                s.acked = s.acked or text.startswith(PROMOTED)
            if s is not None and s.active:
                self.output.control(key, text)
            elif not text.startswith(BEAT + " "):  # (shown unless it is being stopped, as its lines)
                self.record.progress_line(key, f"(standby) {text}", console=s is None or not s.stopping)

        stub = stub_command(task.command)  # a Python script or module: under the standby stub
        try:
            handle = self.backend.tasks.start(
                StartRequest(task if stub is None else replace(task, command=tuple(stub)), env, standby=True,
                             fork=self.fork),
                self.output.sink(line, control))
        except LaunchError as exc:
            self.record.write(ev.StandbyFailed(task=task.key, stage=ev.StandbyFailed.START, why=exc.lines[0]))
            return None
        entry.append(_Standby(task, handle))
        self._waiting.setdefault(task.key, []).append(entry[0])
        return entry[0]

    def _short_hosts(self, tasks: Sequence[PlannedTask]) -> set[str]:
        per_host: dict[str, int] = {}
        for t in tasks:
            per_host[t.host] = per_host.get(t.host, 0) + 1
        try:
            free = self.backend.hosts.free_memory(sorted(per_host))
        except Exception:  # noqa: BLE001 - memory unknown: not a reason to fail the run
            free = {}
        self._free = dict(free)
        short = {h for h, n in per_host.items() if h in free and free[h] < n * STANDBY_BYTES + RESERVE_BYTES}
        new = sorted(short - self._short_said)
        if new:
            self._short_said.update(new)
            self.record.write(ev.StandbyNoRoom(free={h: max(0, int(free[h])) for h in new},
                                               processes={h: per_host[h] for h in new}, each=STANDBY_BYTES,
                                               reserve=RESERVE_BYTES))
        return short

    def promote(self, task: PlannedTask, env: dict[str, str]) -> Optional[TaskHandle]:
        """Hand over the waiting standby for ``task`` (of the plan now in use) with the next
        attempt's ``env``, or None: none, dead, not (yet) blocking SIGUSR1, started for another
        host or command (a replan moved the task), or its promotion failed; then it is stopped
        and the task starts cold."""
        return self.promote_all([task], env).get(task.key)

    def promote_all(self, tasks: Sequence[PlannedTask], env: dict[str, str]) -> dict[str, TaskHandle]:
        """``promote`` for each of ``tasks``, every host's at once (a thread per host, its own
        tasks one after another): a restart over ssh costs one round trip, not one a host. The
        record's StandbyPromoted events say when each promotion began and ended."""
        picked = [(t, s) for t in tasks if (s := self._take(t)) is not None]
        by_host: dict[str, list[tuple[PlannedTask, _Standby]]] = {}
        for t, s in picked:
            by_host.setdefault(t.host, []).append((t, s))

        def host(pairs: list[tuple[PlannedTask, _Standby]]) -> list[tuple]:
            done = []
            for t, s in pairs:
                began = time.time()
                try:
                    self.backend.tasks.promote(s.handle, StartRequest(t, env, fork=self.fork))
                    done.append((t, s, began, time.time(), None))
                except LaunchError as exc:
                    done.append((t, s, began, time.time(), exc))
            return done

        if len(by_host) > 1:
            with ThreadPoolExecutor(max_workers=min(len(by_host), 64), thread_name_prefix="promote") as ex:
                results = [r for rs in ex.map(host, by_host.values()) for r in rs]
        else:
            results = [r for pairs in by_host.values() for r in host(pairs)]
        handles = {}
        for t, s, began, ended, exc in results:  # (the record on this thread)
            if exc is not None:
                self.record.write(ev.StandbyFailed(task=t.key, stage=ev.StandbyFailed.PROMOTE, why=exc.lines[0]))
                s.stopping = True
                self.backend.tasks.stop([s.handle], grace=0)
                continue
            s.promoted_at = self.clock()
            self._promoted[t.key] = s
            self.record.write(ev.StandbyPromoted(task=t.key, process=s.handle.info().to_json(), began=round(began, 3),
                                                 ended=round(ended, 3)))
            handles[t.key] = s.handle
        return handles

    def _take(self, task: PlannedTask) -> Optional[_Standby]:
        """The waiting standby that can become ``task``, taken from the waiting ones and marked
        active (its lines are the task's from now on), or None (one unfit is stopped)."""
        mine = self._waiting.get(task.key, [])
        s = next((s for s in mine if s.task.host == task.host), None)
        if s is None:
            return None  # none on its host: the others are stopped once the attempt has started
        mine.remove(s)
        if not mine:
            del self._waiting[task.key]
        if s.handle.poll() is not None or not s.marked or not _same_process(s.task, task):
            s.stopping = True
            self.backend.tasks.stop([s.handle], grace=0)
            return None
        s.active = True
        return s

    def overdue(self) -> list[tuple[str, TaskHandle]]:
        """Promoted standbys that said nothing of their promotion within ACK_BOUND seconds of
        being promoted and ready (removed from here: the caller stops them and starts cold)."""
        late = []
        now = self.clock()
        for key, s in list(self._promoted.items()):
            if s.acked or s.handle.poll() is not None:
                del self._promoted[key]
                continue
            if not s.ready:
                continue  # still importing: the startup watchdog bounds that
            if s.bound_from is None:
                s.bound_from = max(now, s.promoted_at or now)
            if now - s.bound_from > ACK_BOUND:
                del self._promoted[key]
                late.append((key, s.handle))
        return late

    def drop(self, run_ends: bool = True) -> None:
        """Stop every standby not promoted: the run ends, or (``run_ends`` False) a new attempt has
        started without them (a task left out by a replan, a standby on a lost host)."""
        if run_ends:
            self._promoted.clear()
        if self._waiting:
            left = [s for mine in self._waiting.values() for s in mine]
            for s in left:
                s.stopping = True
            self.backend.tasks.stop([s.handle for s in left], grace=0)
            self.record.write(ev.StandbyStopped(tasks=list(self._waiting)))
            self._waiting.clear()
