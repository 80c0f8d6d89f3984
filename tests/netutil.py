"""Moved to tests/support/ports.py; kept for the ssh lab's imports until its rework moves them. New
code imports tests.support.ports."""

from tests.support.ports import free_base  # noqa: F401
