"""Helpers for tests that run real TensorFlow clusters through ``tfcluster up``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.netutil import free_base

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 240



def write_spec(tmp_path: Path, tfds_dir: Path, entrypoint: str, tasks: str = "{worker: 2}", extra: str = "") -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: demo
        strategy: multi_worker_mirrored
        entrypoint: {entrypoint}
        tasks: {tasks}
        ports: {{base: {free_base()}}}
        env:
          PYTHONPATH: {ROOT}
          TFDS_DATA_DIR: {tfds_dir}
          TF_CPP_MIN_LOG_LEVEL: "2"
        watchdog: {{startup_timeout: 120, stop_grace: 3}}
    """) + textwrap.dedent(extra))
    return path


def up(path: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "up", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "launcher", "up", str(path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def run_dir(path: Path) -> Path:
    return (path.parent / "runs" / "demo" / "latest").resolve()


def progress(text: str, kind: str, task: str = "worker:0") -> list[dict]:
    out = []
    for line in text.splitlines():
        m = re.match(rf"\[{re.escape(task)}\] tfcluster-{kind} (.*)", line)
        if m:
            out.append(dict(kv.split("=", 1) for kv in m.group(1).split()))
    return out


def wait_line(proc: subprocess.Popen, pattern: str, seen: list[str], timeout: float) -> None:
    """Read the launcher's output until a line matches (bounded by a watchdog kill)."""
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if re.search(pattern, line):
                return
    finally:
        timer.cancel()
    raise AssertionError(f"launcher ended before printing {pattern!r}:\n" + "\n".join(seen[-30:]))
