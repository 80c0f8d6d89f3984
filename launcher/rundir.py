"""The run record on disk: where a run's plan, logs and events live.

Layout under ``<spec dir>/<run_dir>/<name>/``::

    <run id>/plan.json        the plan as executed
    <run id>/events.jsonl     one JSON object per start, exit, failure, restart and the outcome
    <run id>/logs/<type>-<index>.log   each task's output, all attempts
    <run id>/launcher.json    the launcher's pid and each task's pid/pgid (for ``tfcluster down``)
    latest -> <run id>
    state/                    checkpoints and backups, shared by every run of this name so a
                              rerun resumes where the last one stopped
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Optional, TextIO

from .plan import Plan, redact_env
from .procinfo import start_time


class RunRecord:
    def __init__(self, root: Path, plan: Plan, run_id: Optional[str] = None) -> None:
        self.plan = plan
        self.run_id = run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        self.name_dir = root / plan.name
        self.dir = self.name_dir / self.run_id
        self.state_dir = self.name_dir / "state"
        self.logs_dir = self.dir / "logs"
        self._lock = threading.Lock()
        self._logs: dict[str, TextIO] = {}
        self._events: Optional[TextIO] = None
        self._tasks: dict[str, dict[str, Any]] = {}

    # -------------------------------------------------------------- lifecycle

    def create(self) -> "RunRecord":
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        plan_json = self.plan.to_json()
        for task in plan_json["tasks"]:
            task["env"] = redact_env(task["env"])
        (self.dir / "plan.json").write_text(json.dumps(plan_json, indent=2) + "\n")
        self._events = open(self.dir / "events.jsonl", "a", buffering=1, encoding="utf-8")
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
            for fh in self._logs.values():
                fh.close()
            self._logs.clear()
            if self._events:
                self._events.close()
                self._events = None

    # -------------------------------------------------------------- writing

    def event(self, kind: str, **fields: Any) -> None:
        record = {"time": round(time.time(), 3), "event": kind, **fields}
        with self._lock:
            if self._events:
                self._events.write(json.dumps(record, default=str) + "\n")

    def log_line(self, key: str, line: str) -> None:
        with self._lock:
            fh = self._logs.get(key)
            if fh is None:
                fh = open(self.log_path(key), "a", buffering=1, encoding="utf-8", errors="replace")
                self._logs[key] = fh
            fh.write(line if line.endswith("\n") else line + "\n")

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
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, self.dir / "launcher.json")


def latest_run(root: Path, name: str) -> Optional[Path]:
    link = root / name / "latest"
    if link.exists():
        return link.resolve()
    return None
