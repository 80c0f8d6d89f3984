"""The liveness' note of TensorFlow's PreemptionCheckpointHandler (launcher/contract/liveness.py): its
``__init__`` wrapped once the failure handling module is loaded, the beat's ``psave=1`` after one
was made, and the task group reading it (launcher/supervise/group.py), cleared for a new process."""

from __future__ import annotations

import sys
import types

from launcher.contract import liveness
from launcher.supervise.group import BEAT, AttemptGroup


def test_a_made_handler_is_noted_once_its_module_is_loaded(monkeypatch):
    assert liveness.hook_handler() in (False, True)  # (TensorFlow's module may be loaded here or not)
    module = types.ModuleType(liveness._HANDLER)

    class PreemptionCheckpointHandler:
        def __init__(self, n):
            self.n = n

    module.PreemptionCheckpointHandler = PreemptionCheckpointHandler
    monkeypatch.setitem(sys.modules, liveness._HANDLER, module)
    monkeypatch.setattr(liveness, "_handler", [])
    assert liveness.hook_handler() and liveness.hook_handler()  # (wrapped once)
    assert PreemptionCheckpointHandler.__init__.__wrapped__.__name__ == "__init__"
    assert not liveness._handler
    assert PreemptionCheckpointHandler(3).n == 3 and liveness._handler == [True]


def test_the_group_reads_psave_and_forgets_it_for_a_new_process():
    group = AttemptGroup(lambda: 1.0)
    group.new_process("worker:0")
    assert group.line("worker:0", "tfcluster-beat n=3 in=0.50") == BEAT and "worker:0" not in group.handler
    assert group.line("worker:0", "tfcluster-beat n=4 in=0.60 psave=1") == BEAT and "worker:0" in group.handler
    group.new_process("worker:0")
    assert "worker:0" not in group.handler
