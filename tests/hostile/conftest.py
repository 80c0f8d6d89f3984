"""What every hostile case checks (docs/concepts/trust.md): the exit code is one of the documented
ones, the output is a few lines, no traceback, no raw escape byte; and the helpers that plant what an
attacker would (a FIFO, a symlink, a spec)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import tfcluster
from tests.support.otheruser import base, mallory  # noqa: F401 (fixtures: the second real user, a dir both reach)

# Raw control bytes a terminal acts on (tab and newline are text).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
MAX_LINES = 20
EXITS = (0, 1, 2, 4)


def assert_bounded(result: subprocess.CompletedProcess, code: int | tuple = EXITS, output: bool = False,
                   task_bytes: bool = False) -> None:
    """``result`` of a tfcluster command exited with ``code`` (one of them), in at most MAX_LINES
    lines on stderr (and stdout too with ``output=False``: a command whose output is a document
    passes True), with no traceback and no raw control byte (on stdout too unless ``task_bytes``:
    `logs` into a pipe writes a task's bytes as they are)."""
    codes = code if isinstance(code, tuple) else (code,)
    assert result.returncode in codes, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    for stream in (result.stdout, result.stderr):
        if not (output and stream is result.stdout):
            assert len(stream.splitlines()) <= MAX_LINES, stream[-3000:]
        assert "Traceback" not in stream, stream[-3000:]
        if not (task_bytes and stream is result.stdout):
            assert not RAW_CONTROL.search(stream), repr(stream[:3000])


def spec_text(**extra: str) -> str:
    """A small valid local spec; ``extra`` are top-level keys with their YAML text."""
    base = {"name": "h", "strategy": "multi_worker_mirrored", "entrypoint": "python -c pass",
            "tasks": "{worker: 2}"}
    base.update(extra)
    return "".join(f"{k}: {v}\n" for k, v in base.items())


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, size and mtime: what a case compares before and
    after to say that nothing was written there."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out



def plant_socket(path: Path) -> None:
    """A Unix socket at ``path`` (bound at a short name, then moved: a socket's path has a 108-byte
    bound that pytest's folders pass)."""
    import socket
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="tfcs")) / "s"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(short))
    finally:
        sock.close()
    os.replace(short, path)
    short.parent.rmdir()


# A real run's record, shared by the cases that plant or tamper with one (test_safe_reads.py,
# test_record_is_data.py, test_no_crash.py).
SECRET = "s3cr3t-PASSWORD-hash$6$salt"
# A task that prints a colour, a window title (OSC 0), a clipboard write (OSC 52), a DCS and an APC.
ESCAPES = b"\x1b]0;TITLE\x07\x1b]52;c;ZXZpbA==\x1b\\\x1bP+q\x1b\\\x1b_apc\x1b\\\x1b[31mred\x1b[0m\n"
TASK = f"import sys; sys.stdout.buffer.write(b'hello\\n' + {ESCAPES!r})\n"
RUN_SPEC = """\
name: r
strategy: multi_worker_mirrored
entrypoint: python task.py
tasks: {worker: 2}
run_dir: ./runs
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A real run's record (two local tasks that print escapes), made once."""
    where = tmp_path_factory.mktemp("recorded")
    (where / "r.yaml").write_text(RUN_SPEC)
    (where / "task.py").write_text(TASK)
    result = tfcluster("up", "r.yaml", "--plain", cwd=where, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return where


@pytest.fixture
def run(recorded, tmp_path):
    """A copy of the recorded run: (its folder, the run dir in it, a folder 'outside' with a secret)."""
    shutil.copytree(recorded, tmp_path / "w", symlinks=True)
    work = tmp_path / "w"
    run_dir = next(p for p in (work / "runs" / "r").iterdir() if p.name != "latest" and p.is_dir()
                   and not p.is_symlink() and p.name != "state")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text(SECRET + "\n")
    return work, run_dir, outside
