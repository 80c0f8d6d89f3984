"""The run record on disk: where a run's plan, logs and events live.

Layout under ``<spec dir>/<run_dir>/<name>/`` (the names: launcher/record/layout.py)::

    <run id>/plan.json        the plan as executed (the first one; the cluster once: Plan.to_compact_json)
    <run id>/plan-2.json ...  later plans, after hosts were lost (launcher/plan/elastic.py)
    <run id>/events.jsonl     one JSON object per start, exit, failure, restart and the outcome
    <run id>/logs/<type>-<index>.log   each task's output, all attempts
    <run id>/output.log       every task's output interleaved as it arrived, each line "[type:index] ..."
    <run id>/supervisor.log   a detached supervisor's own messages (``up --detach``)
    <run id>/launcher.json    the launcher's pid and each task's pid/pgid (for ``tfcluster down``)
    latest -> <run id>
    state/                    checkpoints and backups, shared by every run of this name so a
                              rerun resumes where the last one stopped

Writing the record never fails the run (a full disk, a lost mount): a write that fails is
reported once, in one line naming the file system, through ``on_problem``; a task whose log
cannot be written goes on being read (its output still reaches the console), and files are
written with plain ``write(2)`` calls, so nothing half-written is left in a buffer to fail again
at ``close``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from launcher.bounded import escape
from launcher.errors import LaunchError
from launcher.remote.pathtrust import SAFE_FIX, resolved, unsafe
from launcher.safefile import file_mode_in, make_dir, open_append, share_modes, write_whole
from launcher.plan.build import Plan
from launcher.system.procinfo import cmdline, start_time
from launcher.errors import exc_text
from launcher.record.events import RecordEvent, RunRecordDamaged, parse_event
from launcher.record.layout import (EVENTS_FILE, LATEST, LAUNCHER_FILE, LOGS_DIR, OUTPUT_FILE, PLAN_FILE, allocation_path,
                            later_plan_name, log_path, progress_path, state_dir)


class RunRecord:
    def __init__(self, root: Path, plan: Plan, run_id: Optional[str] = None,
                 on_problem: Optional[Callable[[str], None]] = None, share: str = "private") -> None:
        self.plan = plan
        # The record and the state dir are the user's alone (the spec's share: group lets the
        # group read them), whatever the umask: they hold logs, the plan, checkpoints.
        self.dir_mode, self.file_mode = share_modes(share)
        self._leaf_owner: Optional[int] = None  # (trust_owner)
        self.run_id = run_id or new_run_id()
        # The runs dir as given is what is judged (every dir the kernel passes on the way: a `..`
        # after a symlink goes up from where it leads); where the kernel took it is what is used
        # (tempfile and abspath would take a `..` as text: pathtrust.resolved).
        self._given = (root / plan.name / self.run_id, state_dir(root, plan.name))
        root = Path(resolved(root))
        self.name_dir = root / plan.name
        self.dir = self.name_dir / self.run_id
        self.state_dir = state_dir(root, plan.name)
        self.logs_dir = self.dir / LOGS_DIR
        self._lock = threading.Lock()
        self._logs: dict[str, int] = {}  # key -> fd (log_path; and progress_path's under "progress:KEY")
        self._events: Optional[int] = None
        # Events written early, before ``create`` (``write_early``: the preflight's wait for hosts
        # below tasks.worker.min): written first once the record exists; a run that never starts
        # (a dry run, a preflight that fails) leaves no record of them.
        self._early: Optional[list[bytes]] = []
        self._output: Optional[int] = None
        self._tasks: dict[str, dict[str, Any]] = {}
        self._held = 0  # inside ``tasks_starting``: launcher.json waits for its end
        self._unwritten = False  # a task started meanwhile
        self.allocation: dict[str, Any] = {}
        self.on_problem = on_problem or _to_stderr
        self.problems: dict[str, str] = {}  # what (a log, events.jsonl, launcher.json) -> why, once each
        # Called with every event as written (the live view follows the run; the console says it:
        # launcher/ui/eventlines.py), with every task line written for the console (the
        # lines output.log holds: ``log_line``), and with every progress record of a task's
        # (``progress_line``: the console shows people's lines), in the order written.
        self.listeners: list[Callable[[RecordEvent], None]] = []
        self.line_listeners: list[Callable[[str, str], None]] = []
        self.progress_listeners: list[Callable[[str, str], None]] = []
        self.launcher_info: dict[str, Any] = {}  # more for launcher.json (e.g. detached: true)
        self._cmdline = cmdline(os.getpid())

    # -------------------------------------------------------------- lifecycle

    def create(self) -> "RunRecord":
        """The record's dirs made (once no other user could swap them: LaunchError naming
        run_dir otherwise), its plan and events started, ``latest`` pointed at it."""
        self._check_dirs()
        make_dir(self.name_dir, self.dir_mode, own=False)
        make_dir(self.dir, self.dir_mode)
        make_dir(self.logs_dir, self.dir_mode)
        make_dir(self.state_dir, self.dir_mode)
        self._check_dirs()  # (made by this user: none could have been made first by another)
        self._write_plan()
        self._events = _open_append(self.dir / EVENTS_FILE, self.file_mode)
        with self._lock:
            early, self._early = self._early or [], None
            for data in early:
                try:
                    _write_all(self._events, data)
                except OSError:
                    break
        latest = self.name_dir / LATEST
        try:
            tmp = self.name_dir / f".latest-{self.run_id}"
            tmp.symlink_to(self.run_id)
            os.replace(tmp, latest)
        except OSError:
            pass
        self._write_launcher()
        return self

    def trust_owner(self, uid: int) -> None:
        """The run dir and the state dir may be owned by ``uid`` too: the user a backend gives
        them to (docker: the containers' user, as root), and no one else."""
        self._leaf_owner = uid

    def _check_dirs(self) -> None:
        for path in (*self._given, self.dir, self.state_dir):
            problem = unsafe(path, leaf_owner=self._leaf_owner)
            if problem:
                raise LaunchError(f"run_dir: {escape(problem)}; fix: {SAFE_FIX}", keys=(("run_dir",),))

    def set_plan(self, plan: Plan) -> None:
        """The plan built on the backend's allocation replaces the one the record was created
        with (placeholder hosts until a workload manager allocates the nodes)."""
        if plan != self.plan:
            self.plan = plan
            self._write_plan()

    def add_plan(self, plan: Plan, number: int) -> str:
        """A later plan of the run (hosts moved, launcher/plan/elastic.py): ``plan.json`` stays the
        first; plan ``number`` (2, 3, ...) is written next to it. Returns its file name."""
        self.plan = plan
        name = later_plan_name(number)
        self._write_plan(name)
        return name

    def allocated(self, **info: Any) -> None:
        """What the backend must know to release its allocation (e.g. a Slurm job id), kept in
        launcher.json as ``allocation`` for ``tfcluster down`` (``RecordedRun.allocation``), and
        on its own in ``<backend>.json`` (``record.layout.allocation_path``; Slurm's slurm.json)."""
        with self._lock:
            self.allocation.update(info)
            text = json.dumps(self.allocation, indent=2) + "\n"
        try:
            write_atomic(allocation_path(self.dir, self.plan.backend), text, self.file_mode)
        except OSError:
            pass  # launcher.json has it too (and says so if it cannot be written)
        self._write_launcher()

    def _write_plan(self, name: str = PLAN_FILE) -> None:
        """The plan in the compact shape (``Plan.to_compact_json``: the cluster and the shared env
        once, O(n) in the tasks; ``tfcluster plan --json`` prints the full one), secrets redacted."""
        plan_json = self.plan.to_compact_json(secrets=False)
        write_atomic(self.dir / name, json.dumps(plan_json, indent=2) + "\n", self.file_mode)

    def close(self) -> None:
        with self._lock:
            for fd in self._logs.values():
                _close(fd)
            self._logs.clear()
            if self._output is not None:
                _close(self._output)
                self._output = None
            if self._events is not None:
                _close(self._events)
                self._events = None

    # -------------------------------------------------------------- writing

    def write(self, event: RecordEvent, early: bool = False) -> None:
        """Append ``event`` (record/events.py), stamped with the time now, to events.jsonl and
        hand it to the listeners. An event that would not read back (a field of the wrong type,
        NaN: a bug) is reported in one line and not written, so the record stays readable.
        Before ``create`` an event is dropped, unless ``early`` (``write_early``)."""
        event = event.stamped(round(time.time(), 3))
        try:
            data = (_line(event) + "\n").encode("utf-8")
        except (RunRecordDamaged, ValueError, TypeError) as exc:
            self.on_problem(f"an event of kind {event.kind!r} was not written: {exc_text(exc)}")
            return
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception as exc:  # noqa: BLE001 -- a display must never stop the run
                self._drop_listener(self.listeners, listener, exc)
        with self._lock:
            if self._events is None:
                if self._early is not None and early:
                    self._early.append(data)
                return
            try:
                _write_all(self._events, data)
            except OSError as exc:
                # Later events may fit again (space freed); the one that failed is reported.
                self._problem(EVENTS_FILE, self.dir / EVENTS_FILE, exc,
                              f"events from {event.kind!r} on are missing from it")

    def _drop_listener(self, listeners: list, listener: Callable, exc: Exception) -> None:
        try:
            listeners.remove(listener)
        except ValueError:
            return  # (another thread dropped it first)
        self.on_problem(f"the live view stopped following the run ({type(exc).__name__}: {exc}); the run goes on")

    def write_early(self, event: RecordEvent) -> None:
        """``write``, and where the record does not exist yet (the preflight's wait for hosts
        below tasks.worker.min), kept to be its first lines once ``create`` makes it."""
        self.write(event, early=True)

    def log_line(self, key: str, line: str, console: bool = True) -> None:
        """Append one line to ``key``'s log and, ``console``, to output.log (what ``attach`` and
        ``logs`` without a task show of a run: its console's lines) and hand it to the line
        listeners (the console). Never raises: the caller is the thread that drains the task's
        output, and if it stopped, the task would block writing to a full pipe."""
        self._log_line(key, line, console)
        if console:
            self._tell(self.line_listeners, key, line)

    def _tell(self, listeners: list, key: str, line: str) -> None:
        for listener in list(listeners):
            try:
                listener(key, line)
            except Exception as exc:  # noqa: BLE001 -- a display must never stop the run
                self._drop_listener(listeners, listener, exc)

    def _log_line(self, key: str, line: str, console: bool) -> None:
        data = (line if line.endswith("\n") else line + "\n").encode("utf-8", "replace")
        with self._lock:
            if console:
                self._append_output(b"[" + key.encode() + b"] " + data)
            self._append(key, self.log_path(key), data,
                         f"the log of {key} is no longer written; its output still shows here")

    def progress_line(self, key: str, line: str, console: bool = True) -> None:
        """Append one of ``key``'s control lines to its progress file (layout.progress_path) and,
        ``console``, hand it to the progress listeners (the console). Never raises, as ``log_line``."""
        data = (line.replace("\n", " ") + "\n").encode("utf-8", "replace")
        with self._lock:
            self._append(f"progress:{key}", progress_path(self.dir, key), data,
                         f"the progress of {key} is no longer recorded; it still shows here")
        if console:
            self._tell(self.progress_listeners, key, line)

    def _append(self, name: str, path: Path, data: bytes, consequence: str) -> None:
        """``data`` onto the file ``path`` (its descriptor kept under ``name``; caller holds the lock)."""
        if f"log:{name}" in self.problems:
            return
        fd = self._logs.get(name)
        try:
            if fd is None:
                fd = _open_append(path, self.file_mode)
                self._logs[name] = fd
            _write_all(fd, data)
        except OSError as exc:
            if fd is not None:
                _close(self._logs.pop(name))
            self._problem(f"log:{name}", path, exc, consequence)

    def _append_output(self, data: bytes) -> None:
        """output.log: every task's lines in the order they arrived (caller holds the lock)."""
        if OUTPUT_FILE in self.problems:
            return
        try:
            if self._output is None:
                self._output = _open_append(self.output_path, self.file_mode)
            _write_all(self._output, data)
        except OSError as exc:
            if self._output is not None:
                _close(self._output)
                self._output = None
            self._problem(OUTPUT_FILE, self.output_path, exc,
                          "`tfcluster logs` without a task no longer shows new lines; the task logs may still")

    def log_path(self, key: str) -> Path:
        return log_path(self.dir, key)

    @property
    def output_path(self) -> Path:
        return self.dir / OUTPUT_FILE

    def log_offsets(self, key: str) -> dict[str, int]:
        """Where the next line of ``key`` will start in its log and in output.log (``logs --attempt``):
        read under the lock that every line is written under, so never inside a line."""
        with self._lock:
            return {"log_offset": _size_of(self.log_path(key)), "output_offset": _size_of(self.output_path),
                    "progress_offset": _size_of(progress_path(self.dir, key))}

    def task_started(self, key: str, **info: Any) -> None:
        """``key``'s process, for launcher.json (written now, or at the end of ``tasks_starting``)."""
        with self._lock:
            self._tasks[key] = info
            held = self._unwritten = self._held > 0
        if not held:
            self._write_launcher()

    @contextlib.contextmanager
    def tasks_starting(self) -> Iterator[None]:
        """A group of tasks starting: launcher.json written once at the end (also when a start
        fails), not once a task. Each write replaces the whole file with every task so far, and is
        synced: one a task cost 64 tasks 1.4 s, one after another, before the last could start.
        A launcher that dies meanwhile leaves its tasks to their lifelines, as ever; ``down`` asks
        a live launcher itself."""
        with self._lock:
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                due = self._held == 0 and self._unwritten
                if due:
                    self._unwritten = False
            if due:
                self._write_launcher()

    def _write_launcher(self) -> None:
        data = {
            "pid": os.getpid(),
            "host": socket.gethostname(),  # where pid means something (status checks it there)
            "start_time": start_time(os.getpid()),
            "cmdline": self._cmdline,  # what `down` checks before it signals pid (procinfo.not_own)
            "run_id": self.run_id,
            "backend": self.plan.backend,
            "tasks": self._tasks,
            **self.launcher_info,
        }
        if self.allocation:
            data["allocation"] = self.allocation
        try:
            write_atomic(self.dir / LAUNCHER_FILE, json.dumps(data, indent=2), self.file_mode)
        except OSError as exc:
            with self._lock:
                self._problem(LAUNCHER_FILE, self.dir / LAUNCHER_FILE, exc,
                              "`tfcluster down` may not find the tasks started since; this launcher still stops them")

    def _problem(self, what: str, path: Path, exc: OSError, consequence: str) -> None:
        """Report a failed write once per file (caller holds the lock)."""
        if what in self.problems:
            return
        why = exc.strerror or str(exc)
        self.problems[what] = why
        self.on_problem(f"cannot write {path}: {why}{_filesystem_note(path)}; {consequence}")


def append_event(run_dir: Path, event: RecordEvent) -> None:
    """One event appended to a run's events.jsonl from outside its supervisor (``down`` of a run
    whose supervisor is gone), in one write(2) like the supervisor's own."""
    data = (_line(event.stamped(round(time.time(), 3))) + "\n").encode("utf-8")
    fd = _open_append(run_dir / EVENTS_FILE, file_mode_in(run_dir))
    try:
        _write_all(fd, data)
    finally:
        _close(fd)


def _line(event: RecordEvent) -> str:
    """The event's line of events.jsonl: strict JSON (no NaN), and one that reads back as the
    event it is (``parse_event``; RunRecordDamaged or ValueError otherwise)."""
    line = event.to_json()
    parse_event(line, f"the {event.kind} event being written")
    return json.dumps(line, allow_nan=False)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` so that a reader (or a crash) never sees it half-written: a new file created
    exclusively, without following a symlink, beside it, then renamed over it (launcher/safefile.py),
    with exactly ``mode``."""
    write_whole(path, text, mode)


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _open_append(path: Path, mode: int) -> int:
    return open_append(path, mode)  # (never through a symlink planted in the run dir)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _filesystem_note(path: Path) -> str:
    """" (file system /mnt/x: 1.0 MiB, 0 B free)", naming the mount point that holds ``path``."""
    mount = Path(path).parent
    try:
        while not os.path.ismount(mount) and mount != mount.parent:
            mount = mount.parent
        st = os.statvfs(mount)
    except OSError:
        return ""
    size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    return f" (file system {mount}: {_size(free)} free of {_size(size)})"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _to_stderr(message: str) -> None:
    sys.stderr.write(f"tfcluster: error: {message}\n")
    sys.stderr.flush()
