"""The ssh backend's state dir (``state:`` in the spec): shared or copied, and fetched at the end.

* ``detect``: in preflight, with ``state.sync: auto``, the chief's host agent writes a marker
  file into its state dir and every other host's agent looks for it (over the agents' channels:
  no extra remote shell); shared if every host sees it, else ``copy``. The console and the run
  record say which and why.
* ``prepare_attempt`` (``copy``, MultiWorkerMirroredStrategy): before every attempt -- so also
  before ``up`` resumes an earlier run of the same name -- the chief's latest complete backup
  (``statedir.RESUME_AREAS``) is streamed as a tar from the chief's host to every other
  host's state dir over the connections already open (``remote/statesync.py``): one channel on
  the chief's host packs, the launcher relays the bytes to one channel per other host, each
  receiver extracts into a temp dir and renames it into place only when size and sha256 match
  the sender's. A host whose copy fails fails the attempt with one line naming it.
  Under ParameterServerStrategy only the chief reads checkpoints, so nothing is copied.
* ``collect``: after a successful run the final model (``state.fetch: model``; with
  ``checkpoints`` also the checkpoints) comes back from the chief's host into the run's local
  ``runs/<name>/state/``, through the same verified unpack.
"""

from __future__ import annotations

import json
import posixpath
import queue
import shlex
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from launcher.contract import statedir
from launcher.bounded import HOST_LINE_BYTES, escape
from launcher.errors import LaunchError, exc_text
from launcher.plan.build import Plan
from launcher.record.events import Event
from launcher.remote import source as remote_source
from launcher.remote import statesync as sync_lib
from launcher.backends.ssh.runner import BadReply, parse_reply

if TYPE_CHECKING:  # pragma: no cover
    from launcher.ui.console import Console
    from launcher.spec.model import State
    from launcher.backends.ssh.pool import HostPool

# Seconds without progress on a copy channel = that host's copy failed (a cut link): twice
# ssh.lease, the silence after which remote tasks count the launcher as gone, at least 10.
_MIN_IO_TIMEOUT = 10.0
_CHUNK = 1 << 16
MWMS = "multi_worker_mirrored"


def marker_name(run_id: str) -> str:
    return f".tfcluster-shared-marker-{run_id}"


def state_command(python: str, mode: str, state_dir: str, areas: list[str]) -> str:
    parts = [python, "-S", "-c", remote_source("statesync.py"), mode, state_dir, *areas]
    return " ".join(shlex.quote(p) for p in parts)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def state_dir(cfg: "State", default: str) -> str:
    """The state dir on the hosts: state.dir, else ``default`` (under ssh.remote_dir)."""
    return cfg.dir or default


class StateSync:
    def __init__(self, pool: "HostPool", cfg: "State", console: "Console", record, run_id: str) -> None:
        self.pool = pool  # the hosts and their connections
        self.console = console
        self.record = record  # the run record, or None (no run: down, the supervisor)
        self.run_id = run_id
        self.cfg = cfg  # the spec's state:
        self.mode: Optional[str] = None  # "shared" | "copy", once decided
        self.plan: Optional[Plan] = None
        # Where the newest backup is: the host of the chief of the last attempt that started (the
        # chief writes the backups; the others got a copy at its start), and that attempt's
        # training hosts (each holds that copy). None before the first attempt.
        self.writer: Optional[str] = None
        self.last_group: list[str] = []
        self.copies: list[dict] = []  # one entry per copy: size, seconds, hosts
        self.io_timeout = max(_MIN_IO_TIMEOUT, 2 * pool.opts.lease)

    # ------------------------------------------------------------------ preflight

    def state_dir(self, default: str) -> str:
        return state_dir(self.cfg, default)

    def chief_host(self) -> str:
        assert self.plan is not None
        return self.plan.task(self.plan.success_task).host

    def detect(self, plan: Plan, names: list[str], sessions: dict) -> list[str]:
        """Decide shared or copy (once, in preflight); problem lines, or []."""
        if self.mode is not None or not plan.tasks:
            return []
        self.plan = plan
        hosts = sorted({t.host for t in plan.tasks})
        if self.cfg.sync != "auto":
            self.mode, why = self.cfg.sync, "state.sync"
        elif self.cfg.is_url:
            self.mode, why = "shared", "a gs:// dir"
        elif len(hosts) < 2:
            self.mode, why = "shared", "one host"
        else:
            seen, problems = self._markers(hosts, sessions)
            if problems:
                return problems
            blind = [h for h in hosts if not seen.get(h)]
            chief = self.chief_host()
            if blind:
                self.mode = "copy"
                why = f"{', '.join(blind)} cannot see a file written through {chief}"
            else:
                self.mode, why = "shared", f"every host sees a file written through {chief}"
        self.console.info(f"state dir {self.pool.hosts[self.chief_host()].state_dir}: {self.mode} ({why})")
        if self.record is not None:
            self.record.event(Event.STATE_SYNC, mode=self.mode, why=why, fetch=self.cfg.fetch)
        return self._placement_problems(plan)

    def _placement_problems(self, plan: Plan) -> list[str]:
        """With copy, an evaluator must run where the chief writes its checkpoints."""
        if self.mode != "copy":
            return []
        chief = self.chief_host()
        return [f"{t.key} is on host {t.host} but with state.sync: copy the chief's checkpoints are only on "
                f"{chief}; put it there (tasks.evaluator.hosts: [{chief}]) or use shared storage"
                for t in plan.tasks if t.type == "evaluator" and t.host != chief]

    def _markers(self, hosts: list[str], sessions: dict) -> tuple[dict[str, bool], list[str]]:
        chief = self.chief_host()
        path = {h: posixpath.join(self.pool.hosts[h].state_dir, marker_name(self.run_id)) for h in hosts}
        problems: list[str] = []
        try:
            ok = self._ask(sessions[chief], "write", path[chief])
            if ok is not True:
                return {}, [f"host {chief}: cannot write in the state dir {self.pool.hosts[chief].state_dir}: {ok}; "
                            "fix state.dir or its permissions"]
            others = [h for h in hosts if h != chief]
            with self.pool.executor(len(others)) as pool:  # all hosts at once: the slowest one, not the sum
                answers = list(pool.map(lambda h: self._ask(sessions[h], "check", path[h]) is True, others))
            return {chief: True, **dict(zip(others, answers))}, problems
        finally:
            try:
                self._ask(sessions[chief], "remove", path[chief])
            except Exception:  # noqa: BLE001 - a leftover marker is harmless (run-unique name)
                pass

    @staticmethod
    def _ask(chan, op: str, path: str):
        from launcher.backends.ssh.runner import readline as _readline

        chan.sendall(json.dumps({"marker": {"op": op, "path": path}}).encode() + b"\n")
        try:
            reply = parse_reply(_readline(chan) or b"{}")
        except BadReply as exc:
            return f"the agent answered {exc}"
        return reply.get("marker") if not reply.get("error") else reply["error"]

    # ------------------------------------------------------------------ before each attempt

    def use(self, plan: Plan) -> None:
        """A new plan (elastic: hosts moved, the group shrunk or grown): its tasks' hosts from the
        next attempt on. Where the newest backup is does not change with it (``writer``)."""
        self.plan = plan

    def training_hosts(self) -> list[str]:
        """The plan's chief and worker hosts, sorted (where the backup is needed)."""
        return sorted({t.host for t in self.plan.tasks if t.type in ("chief", "worker")}) if self.plan else []

    def source(self) -> str:
        """The host to copy the latest backup from: the last attempt's chief host while it
        answers, else one of that attempt's hosts still here (the plan's chief's first), else
        the chief's. Never merely the new plan's chief: after a move, a shrink or a grow that
        can be a host that just joined, with an old backup or none, and the group would resume
        from that (step 0 or an old step: every step since lost)."""
        chief, group = self.chief_host(), self.training_hosts()
        candidates = [self.writer] if self.writer else []
        candidates += sorted((h for h in self.last_group if h in group), key=lambda h: h != chief)
        for host in dict.fromkeys(candidates):
            if host in self.pool.hosts and not self.pool.is_lost(host) and not self.pool.connect([host]):
                return host
        return chief

    def prepare_attempt(self, number: int) -> None:
        if self.mode != "copy" or self.plan is None or self.plan.strategy != MWMS:
            return
        chief = self.chief_host()
        group = self.training_hosts()
        src = self.source()
        targets = [h for h in group if h != src]
        if not targets:
            self.writer, self.last_group = chief, group
            return
        areas = [sync_lib.LATEST + a for a in statedir.RESUME_AREAS]
        started = time.monotonic()
        size = self._copy(src, targets, areas)
        self.writer, self.last_group = chief, group
        took = time.monotonic() - started
        self.copies.append({"attempt": number, "bytes": size, "seconds": round(took, 3), "to": targets})
        self.console.info(f"state: copied {src}'s latest backup ({_mb(size)}) to {', '.join(targets)} "
                            f"in {took:.1f} s")
        if self.record is not None:
            self.record.event(Event.STATE_COPY, attempt=number, source=src, to=targets, bytes=size,
                                seconds=round(took, 3))

    def _open(self, name: str, command: str):
        hs = self.pool.hosts[name]
        problems = self.pool.connect([name])
        if problems:
            raise LaunchError(problems[name])
        try:
            chan = hs.transport.open_session(timeout=self.pool.opts.connect_timeout)
            chan.set_combine_stderr(False)
            chan.settimeout(self.io_timeout)
            chan.exec_command(command)
        except Exception as exc:  # noqa: BLE001
            from launcher.backends.ssh.connect import describe_channel_error  # (late: paramiko is the [ssh] extra's)

            raise LaunchError(describe_channel_error(exc, self.pool.opts.connect_timeout)) from None
        return chan

    def _copy(self, src: str, targets: list[str], areas: list[str]) -> int:
        hosts = self.pool.hosts
        sender = self._open(src, state_command(hosts[src].python, "pack", hosts[src].state_dir, areas))
        pipes: dict[str, _Pipe] = {}
        failed: dict[str, str] = {}
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(32, len(targets))), thread_name_prefix="state-open") as pool:
                futures = {name: pool.submit(self._open, name, state_command(hosts[name].python, "unpack",
                                                                           hosts[name].state_dir, areas))
                           for name in targets}
                for name, fut in futures.items():
                    try:
                        pipes[name] = _Pipe(name, fut.result(timeout=self.io_timeout), self.io_timeout)
                    except LaunchError as exc:
                        failed[name] = exc.lines[0]
                    except FutureTimeout:
                        failed[name] = f"no answer within {self.io_timeout:g} s (link down?)"
                    except Exception as exc:  # noqa: BLE001
                        failed[name] = f"cannot open a channel ({exc_text(exc)})"
                pool.shutdown(wait=False)
            try:
                self._relay(sender, pipes)
            except Exception as exc:  # noqa: BLE001 - the sender (chief's host) stalled or went away
                raise LaunchError(f"host {src}: packing its state dir for copying failed "
                                  f"({exc_text(exc, self.io_timeout)}); check the host") from None
            summary = self._sender_summary(sender, self.io_timeout)
            trailer = {"abort": f"{src} could not pack: {summary['error']}"} if "error" in summary else summary
            for pipe in pipes.values():
                pipe.finish(struct.pack(">I", 0) + json.dumps(trailer).encode() + b"\n")
            for name, pipe in pipes.items():
                if not pipe.error:
                    pipe.join(self.io_timeout)
                if pipe.is_alive() and not pipe.error:
                    pipe.error = f"no progress for {self.io_timeout:g} s (link down?)"
                if pipe.error:
                    failed[name] = pipe.error
                    continue
                reply = self._reply(pipe.chan)
                if not reply.get("ok"):
                    failed[name] = reply.get("error", "no answer")
            if "error" in summary:
                raise LaunchError(f"host {src}: cannot pack its state dir {hosts[src].state_dir} for copying: "
                                  f"{summary['error']}; check the host")
        finally:
            # A pipe still writing is stuck on a dead link, holding its transport's write lock:
            # drop that connection first (that unblocks it; the host reconnects when next used),
            # or closing its channel would wait forever too.
            stuck = {name for name, pipe in pipes.items() if pipe.is_alive()}
            for name in stuck:
                self.pool.hosts[name].drop_connection()
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

    @staticmethod
    def _relay(sender, pipes: dict) -> None:
        """Read the tar from the chief's host; each receiver gets it through its own thread, so
        one stalled host (a cut link) never holds up the others."""
        while True:
            data = sender.recv(_CHUNK)
            if not data:
                return
            frame = struct.pack(">I", len(data)) + data
            for pipe in pipes.values():
                pipe.put(frame)

    @staticmethod
    def _early_error(chan) -> Optional[str]:
        """A receiver that stopped reading usually said why (e.g. its disk is full)."""
        try:
            chan.settimeout(5.0)
            reply = json.loads(chan.recv(65536).decode("utf-8", "replace").splitlines()[0])
            return reply.get("error")
        except Exception:  # noqa: BLE001
            return None

    @staticmethod
    def _sender_summary(chan, timeout: float) -> dict:
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

    @staticmethod
    def _reply(chan) -> dict:
        from launcher.backends.ssh.runner import readline as _readline

        try:
            line = _readline(chan)
            return parse_reply(line) if line else {"error": "no answer (connection lost?)"}
        except BadReply as exc:
            return {"error": f"the agent answered {exc}"}
        except Exception as exc:  # noqa: BLE001
            return {"error": f"no answer ({type(exc).__name__})"}

    # ------------------------------------------------------------------ after success

    def collect(self) -> None:
        """Bring the final model and the TensorBoard logs (and, with state.fetch: checkpoints,
        the checkpoints) here."""
        if self.cfg.fetch == "none" or self.plan is None or self.record is None:
            return
        # The TensorBoard logs too (the chief's train/; small), for `tfcluster tensorboard`.
        areas = [statedir.FINAL_MODEL, statedir.TENSORBOARD] + (
            [statedir.CHECKPOINTS] if self.cfg.fetch == "checkpoints" else [])
        src = self.chief_host()
        hs = self.pool.hosts[src]
        local: Path = self.record.state_dir
        started = time.monotonic()
        try:
            chan = self._open(src, state_command(hs.python, "pack", hs.state_dir, areas))
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"host {src}: cannot fetch the final model ({exc}); it is still in {hs.state_dir} "
                              "there") from None
        tmp = None
        try:
            reader = sync_lib.HashingReader(lambda: chan.recv(_CHUNK))
            try:
                tmp = sync_lib.extract(reader, str(local))
            except Exception as exc:  # noqa: BLE001
                raise LaunchError(f"host {src}: fetching {', '.join(areas)} failed: {sync_lib.describe(exc)}; "
                                  f"it is still in {hs.state_dir} there") from None
            summary = self._sender_summary(chan, self.io_timeout)
            problem = summary.get("error") or reader.matches(summary)
            if problem:
                raise LaunchError(f"host {src}: fetching {', '.join(areas)} failed: {problem}; it is still in "
                                  f"{hs.state_dir} there")
            present = [a for a in areas if (Path(tmp) / a).exists()]
            # Only what came: an entrypoint that saved no final model leaves the local one alone.
            sync_lib.commit(tmp, str(local), present)
            tmp = None
        finally:
            if tmp:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
            chan.close()
        took = time.monotonic() - started
        if present:
            self.console.info(f"fetched {', '.join(present)} from {src} ({_mb(reader.size)}) into {local} "
                                f"in {took:.1f} s")
        else:
            self.console.info(f"nothing to fetch: no {', '.join(areas)} in {hs.state_dir} on {src}")
        self.record.event(Event.STATE_FETCH, source=src, areas=present, bytes=reader.size, seconds=round(took, 3))


class _Pipe(threading.Thread):
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
                self.error = StateSync._early_error(self.chan) or f"connection lost ({exc_text(exc, self.timeout)})"
        if not self.error:
            try:
                self.chan.shutdown_write()
            except Exception as exc:  # noqa: BLE001
                self.error = f"connection lost ({exc_text(exc, self.timeout)})"
