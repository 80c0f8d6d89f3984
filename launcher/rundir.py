"""The run record on disk: where a run's plan, logs and events live.

Layout under ``<spec dir>/<run_dir>/<name>/``::

    <run id>/plan.json        the plan as executed
    <run id>/events.jsonl     one JSON object per start, exit, failure, restart and the outcome
    <run id>/logs/<type>-<index>.log   each task's output, all attempts
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

import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from .plan import Plan, redact_env
from .procinfo import start_time


class RunRecord:
    def __init__(self, root: Path, plan: Plan, run_id: Optional[str] = None,
                 on_problem: Optional[Callable[[str], None]] = None) -> None:
        self.plan = plan
        self.run_id = run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        self.name_dir = root / plan.name
        self.dir = self.name_dir / self.run_id
        self.state_dir = self.name_dir / "state"
        self.logs_dir = self.dir / "logs"
        self._lock = threading.Lock()
        self._logs: dict[str, int] = {}  # key -> fd
        self._events: Optional[int] = None
        self._tasks: dict[str, dict[str, Any]] = {}
        self.on_problem = on_problem or _to_stderr
        self.problems: dict[str, str] = {}  # what (a log, events.jsonl, launcher.json) -> why, once each

    # -------------------------------------------------------------- lifecycle

    def create(self) -> "RunRecord":
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        plan_json = self.plan.to_json()
        for task in plan_json["tasks"]:
            task["env"] = redact_env(task["env"])
        (self.dir / "plan.json").write_text(json.dumps(plan_json, indent=2) + "\n")
        self._events = _open_append(self.dir / "events.jsonl")
        latest = self.name_dir / "latest"
        try:
            tmp = self.name_dir / f".latest-{self.run_id}"
            tmp.symlink_to(self.run_id)
            os.replace(tmp, latest)
        except OSError:
            pass
        self._write_launcher()
        return self

    def close(self) -> None:
        with self._lock:
            for fd in self._logs.values():
                _close(fd)
            self._logs.clear()
            if self._events is not None:
                _close(self._events)
                self._events = None

    # -------------------------------------------------------------- writing

    def event(self, kind: str, **fields: Any) -> None:
        record = {"time": round(time.time(), 3), "event": kind, **fields}
        data = (json.dumps(record, default=str) + "\n").encode("utf-8")
        with self._lock:
            if self._events is None:
                return
            try:
                _write_all(self._events, data)
            except OSError as exc:
                # Later events may fit again (space freed); the one that failed is reported.
                self._problem("events.jsonl", self.dir / "events.jsonl", exc,
                              f"events from {kind!r} on are missing from it")

    def log_line(self, key: str, line: str) -> None:
        """Append one line to ``key``'s log. Never raises: the caller is the thread that drains
        the task's output, and if it stopped, the task would block writing to a full pipe."""
        data = (line if line.endswith("\n") else line + "\n").encode("utf-8", "replace")
        with self._lock:
            if f"log:{key}" in self.problems:
                return
            fd = self._logs.get(key)
            try:
                if fd is None:
                    fd = _open_append(self.log_path(key))
                    self._logs[key] = fd
                _write_all(fd, data)
            except OSError as exc:
                if fd is not None:
                    _close(self._logs.pop(key))
                self._problem(f"log:{key}", self.log_path(key), exc,
                              f"the log of {key} is no longer written; its output still shows here")

    def log_path(self, key: str) -> Path:
        return self.logs_dir / (key.replace(":", "-") + ".log")

    def task_started(self, key: str, **info: Any) -> None:
        with self._lock:
            self._tasks[key] = info
        self._write_launcher()

    def _write_launcher(self) -> None:
        data = {
            "pid": os.getpid(),
            "start_time": start_time(os.getpid()),
            "run_id": self.run_id,
            "backend": self.plan.backend,
            "tasks": self._tasks,
        }
        tmp = self.dir / "launcher.json.tmp"
        try:
            tmp.write_text(json.dumps(data, indent=2))
            os.replace(tmp, self.dir / "launcher.json")
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            with self._lock:
                self._problem("launcher.json", self.dir / "launcher.json", exc,
                              "`tfcluster down` may not find the tasks started since; this launcher still stops them")

    def _problem(self, what: str, path: Path, exc: OSError, consequence: str) -> None:
        """Report a failed write once per file (caller holds the lock)."""
        if what in self.problems:
            return
        why = exc.strerror or str(exc)
        self.problems[what] = why
        self.on_problem(f"cannot write {path}: {why}{_filesystem_note(path)}; {consequence}")


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


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


def latest_run(root: Path, name: str) -> Optional[Path]:
    link = root / name / "latest"
    if link.exists():
        return link.resolve()
    return None
