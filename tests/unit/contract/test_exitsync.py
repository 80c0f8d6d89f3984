"""``launcher/contract/exitsync.py``: which ends of a task wait at the group's exit barrier, through
the real stub process that carries the module's text (a user's script under tfcluster's stub).

TensorFlow here is a stand-in package on the script's path with only what exitsync reads of the
real one (``tensorflow.python.eager.context``: ``context()``, its ``coordination_service``, its
``_context_handle`` and ``wait_at_barrier(barrier_id, timeout_in_ms)``, as TensorFlow 2.21's
eager/context.py has them): it writes each call to a file. That the real barrier holds a real
group's workers is tests/integration/test_exit_together.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.contract import envnames
from launcher.contract.exitsync import END_BARRIER, END_WAIT, exit_together
from launcher.supervise.standby import stub_command

CONTEXT = """\
import json, os

class _Context:
    coordination_service = object() if os.environ.get("FAKE_COORDINATION") == "1" else None
    _context_handle = object()

    def wait_at_barrier(self, barrier_id, timeout_in_ms):
        with open(os.environ["FAKE_CALLS"], "a") as fh:
            fh.write(json.dumps([barrier_id, timeout_in_ms]) + "\\n")
        if os.environ.get("FAKE_BARRIER_FAILS") == "1":
            raise RuntimeError("DEADLINE_EXCEEDED: Barrier timed out.\\nsecond line")

_CTX = _Context()

def context():
    return _CTX
"""


@pytest.fixture
def fake_tf(tmp_path):
    root = tmp_path / "site"
    eager = root / "tensorflow" / "python" / "eager"
    eager.mkdir(parents=True)
    for d in (root / "tensorflow", root / "tensorflow" / "python", eager):
        (d / "__init__.py").write_text("")
    (eager / "context.py").write_text(CONTEXT)
    return root


def _stub(tmp_path, fake_tf, body: str, strategy="multi_worker_mirrored", coordination=True):
    """The task stub running ``body`` as its script; (exit code, the barrier calls made)."""
    script = tmp_path / "train.py"
    script.write_text("import tensorflow\n" + body)
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(fake_tf), "FAKE_CALLS": str(calls),
           "FAKE_COORDINATION": "1" if coordination else "0", envnames.STRATEGY: strategy}
    env.pop(envnames.STANDBY, None)
    proc = subprocess.run(stub_command([sys.executable, str(script)]), env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return proc.returncode, made, proc.stderr


BARRIER = [END_BARRIER, int(END_WAIT * 1000)]


@pytest.mark.parametrize("body,code,waits", [
    ("print('trained')\n", 0, True),                     # the script's end
    ("import sys\nsys.exit(0)\n", 0, True),              # sys.exit(0) ends well too
    ("import sys\nsys.exit()\n", 0, True),
    ("import sys\nsys.exit(42)\n", 42, False),           # a preemption handler's restart code
    ("raise ValueError('bad batch')\n", 1, False),       # a crash: its peers must fail fast
    ("import os\nos._exit(0)\n", 0, False),              # nothing runs after os._exit
])
def test_only_a_script_that_ended_well_waits_at_the_barrier(tmp_path, fake_tf, body, code, waits):
    got, made, err = _stub(tmp_path, fake_tf, body)
    assert got == code, err
    assert made == ([BARRIER] if waits else []), (made, err)


def test_no_wait_without_multi_worker_mirrored_or_its_coordination_service(tmp_path, fake_tf):
    assert _stub(tmp_path, fake_tf, "print('x')\n", strategy="parameter_server")[:2] == (0, [])
    assert _stub(tmp_path, fake_tf, "print('x')\n", coordination=False)[:2] == (0, [])


def test_a_failed_barrier_leaves_the_tasks_own_exit_code(tmp_path, fake_tf, monkeypatch):
    monkeypatch.setenv("FAKE_BARRIER_FAILS", "1")
    got, made, err = _stub(tmp_path, fake_tf, "print('trained')\n")
    assert (got, made) == (0, [BARRIER]), err
    assert "Barrier" not in err, err  # (nothing printed: the task ended well)


def test_in_this_process_the_words_say_why(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    assert exit_together("multi_worker_mirrored", 1) == "not waited: the task failed"
    assert exit_together("mirrored") == "not waited: not MultiWorkerMirroredStrategy"
    assert exit_together("multi_worker_mirrored") == "not waited: no TensorFlow in this process"
