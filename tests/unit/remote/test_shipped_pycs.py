"""The bytecode of the files a task's start imports goes with them (launcher.remote.task_pycs):
the host agent writes it into the run dir's __pycache__ where the host's Python is the
launcher's, and a start from that dir then compiles none of them; a host Python of another
magic number gets none (it compiles as ever)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.remote import START_FILES, TASK_FILES, agent_source, task_files, task_pycs

# Imports every file a start imports from the run dir, counting the sources compiled meanwhile
# (the import system compiles through builtins.compile only when no valid pyc is there).
_IMPORT_ALL = """
import builtins, sys
compiled = []
real = builtins.compile
def counting(source, filename, *a, **k):
    compiled.append(str(filename).rsplit("/", 1)[-1])
    return real(source, filename, *a, **k)
builtins.compile = counting
sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
    __import__(name[:-3])
print(" ".join(sorted(compiled)))
"""


def _agent_prepares(tmp_path: Path, pycs: dict) -> Path:
    """The agent's first exchange with ``pycs``; the run dir it made."""
    run = tmp_path / "run"
    agent = subprocess.Popen([sys.executable, "-S", "-c", agent_source(), "tag"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    first = {"require": [], "workdir": str(tmp_path), "run_dir": str(run), "state_dir": str(tmp_path / "state"),
             "files": task_files(), "pycs": pycs, "ports": []}
    agent.stdin.write(json.dumps(first) + "\n")
    agent.stdin.flush()
    reply = json.loads(agent.stdout.readline())
    agent.stdin.close()
    assert agent.wait(timeout=30) == 0 and reply["error"] is None, reply
    return run


def _compiled(run: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-S", "-B", "-c", _IMPORT_ALL, str(run), *START_FILES], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_agent_writes_the_start_files_bytecode_and_a_start_compiles_none_of_them(tmp_path):
    run = _agent_prepares(tmp_path, task_pycs())
    cache = run / "__pycache__"
    tag = sys.implementation.cache_tag
    assert sorted(os.listdir(cache)) == sorted(f"{n[:-3]}.{tag}.pyc" for n in START_FILES)
    assert oct(os.stat(cache / f"taskwrap.{tag}.pyc").st_mode & 0o777) == "0o600"
    assert _compiled(run) == []
    assert set(START_FILES) <= set(TASK_FILES)


def test_a_host_python_of_another_magic_number_gets_no_bytecode_and_compiles_as_ever(tmp_path):
    other = dict(task_pycs(), magic="00000000")
    run = _agent_prepares(tmp_path, other)
    assert not (run / "__pycache__").exists()
    assert _compiled(run) == sorted(START_FILES)


def test_a_source_that_differs_from_its_bytecode_is_compiled(tmp_path):
    run = _agent_prepares(tmp_path, task_pycs())
    (run / "boot.py").write_text((run / "boot.py").read_text() + "\nCHANGED = 1\n")
    assert _compiled(run) == ["boot.py"]
