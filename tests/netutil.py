"""Moved to tests/support/ports.py (kept for the labs' imports; new code imports tests.support.ports)."""

from tests.support.ports import free_base  # noqa: F401
