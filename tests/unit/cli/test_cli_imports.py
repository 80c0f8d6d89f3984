"""Each command imports what it needs, not what every command needs: ``tfcluster --version`` or
``completion`` reads no spec and loads no pydantic model, no YAML parser, no table renderer, no
supervisor; ``validate`` loads the spec's models but no table (rich), supervisor, run record
reader or remote client. The CLI runs hundreds of times in the suite and in users' scripts
(``tfcluster status`` in a loop, a shell's completion): what it imports is most of what it costs.

Checked on the module list a real ``python -X importtime -m launcher ...`` prints (its own
process: nothing imported by pytest counts), not on a timing."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import ROOT, tfcluster_argv
from tests.support.specs import spec_file

SPEC = """\
    name: t
    strategy: multi_worker_mirrored
    entrypoint: python -m worker --epochs 1
    tasks: {chief: 1, worker: 1}
"""

# What a command that reads no spec must not import (a package and everything under it).
SPEC_MACHINERY = ("pydantic", "pydantic_core", "yaml", "rich", "launcher.spec", "launcher.loader", "launcher.plan",
                  "launcher.app", "launcher.backends", "launcher.record", "launcher.supervise", "launcher.export",
                  "launcher.compare")
# What `validate` must not import: it loads and plans the spec, nothing runs or is shown as a table.
NOT_FOR_VALIDATE = ("rich", "launcher.supervise", "launcher.record.reader", "launcher.record.status",
                    "launcher.ui.table", "launcher.ui.panel", "launcher.export.compose", "launcher.compare",
                    "tensorflow", "paramiko", "fabric", "docker", "requests")


def imported(*args: str, cwd=None) -> list[str]:
    """The modules ``python -m launcher ARGS`` imports, in order (``-X importtime``'s lines)."""
    python, *rest = tfcluster_argv(*args)
    proc = subprocess.run([python, "-X", "importtime", *rest], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    names = [line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "launcher.cli.main" in names, proc.stderr[-3000:]  # (the list is read: a check below can fail)
    return names


def under(names: list[str], packages: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(n == p or n.startswith(p + ".") for p in packages)]


@pytest.mark.parametrize("args", [("--version",), ("completion", "bash"), ("--help",)], ids=" ".join)
def test_a_command_that_reads_no_spec_imports_none_of_its_machinery(args):
    names = imported(*args)
    assert under(names, SPEC_MACHINERY) == []


def test_validate_imports_the_spec_models_but_no_table_supervisor_or_remote_client(tmp_path):
    names = imported("validate", str(spec_file(tmp_path, SPEC)))
    assert "launcher.spec.model" in names and "launcher.loader.load" in names  # (it does read the spec)
    assert under(names, NOT_FOR_VALIDATE) == []


def test_the_bounds_see_a_module_the_command_imports():
    """The check above would pass on an empty list: here ``plan``, which draws its table with
    rich, is seen importing it."""
    assert under(imported("plan", "cluster.yaml"), ("rich",)) != []
