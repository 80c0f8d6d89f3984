"""The files a task's host gets (launcher.remote.TASK_FILES: the ssh backend's upload, the worker
image's copy) are all the wrapper needs: a module of launcher/remote/ they import from their own
dir is in the list, and the wrapper run from a dir that holds only them makes a task's threads and
GPUs and watches its GPUs."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from launcher.remote import HERE, TASK_FILES, task_files
from launcher.remote.gpuplace import format_request


def _siblings_imported(path: Path) -> set[str]:
    """The modules of launcher/remote/ that ``path`` imports from its own dir: ``import gpuplace``
    or ``sibling("gpuplace")`` (sibling.py's)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "sibling" and node.args \
                and isinstance(node.args[0], ast.Constant):
            names.add(node.args[0].value)
    return {n for n in names if (HERE / f"{n}.py").is_file()}


def test_every_module_the_shipped_files_import_is_shipped():
    for name in TASK_FILES:
        missing = {f"{n}.py" for n in _siblings_imported(HERE / name)} - set(TASK_FILES)
        assert not missing, f"{name} imports {sorted(missing)}: add them to launcher.remote.TASK_FILES"
    assert set(task_files()) == set(TASK_FILES) and all(task_files().values())
    assert _siblings_imported(HERE / "taskwrap.py") == {"sibling", "taskenv", "zygoteask", "gcewatch", "taskstream"}  # (the scan finds what it should)


def test_the_wrapper_runs_from_a_dir_holding_only_the_shipped_files(tmp_path):
    host = tmp_path / "run"
    host.mkdir()
    for name in TASK_FILES:
        shutil.copy(HERE / name, host / name)
    bindir = tmp_path / "bin"  # no nvidia-smi: a host without GPUs
    bindir.mkdir()
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "THREADS": "0/2", "GPUS": format_request("auto"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    show = "import os; print(os.environ.get('OMP_NUM_THREADS'), 'GPUS' in os.environ)"
    wrapper = subprocess.Popen([sys.executable, "-S", str(host / "taskwrap.py"), "--threads", "THREADS", "--gpus",
                                "GPUS", "--gpu-watch", "0.1", "--", sys.executable, "-c", show],
                               env=env, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wrapper.wait(timeout=60)  # (its stdin, the lifeline, stays open until it has ended)
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, 9)
            wrapper.wait()
    out, err = wrapper.stdout.read(), wrapper.stderr.read()
    wrapper.stdin.close()
    assert wrapper.returncode == 0, err
    threads, marker_left = out.split()
    assert int(threads) >= 1 and marker_left == "False"  # the budget made, the request taken
    assert "taskwrap: GPUs given none" in err
    assert sorted(os.listdir(host)) == sorted(TASK_FILES)  # (nothing else was there to import)
