"""Moved to tests/support (processes, waits, specs, approx); kept for the ssh lab's imports until
its rework moves them. New code imports from tests.support.<module>."""

from tests.support.approx import flat  # noqa: F401
from tests.support.processes import pids_with_env, task_pid, task_pids  # noqa: F401
from tests.support.specs import script_spec  # noqa: F401
from tests.support.waits import wait_for  # noqa: F401
