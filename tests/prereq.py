"""Moved to tests/support/prereq.py; kept for the ssh lab's imports until its rework moves them. New
code imports tests.support.prereq."""

from tests.support.prereq import IN_CI, require, require_root, require_tf, require_tool  # noqa: F401
