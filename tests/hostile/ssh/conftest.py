"""The ssh lab's spec writer for the hostile cases on ssh hosts (the lab itself: the session
fixture ``lab``, tests/support/lab_fixtures.py). Their node ids hold ``/ssh/``: the labs shard
runs them (tests/conftest.py, ``shard_of``)."""

from tests.support.ssh_helpers import make_spec  # noqa: F401
