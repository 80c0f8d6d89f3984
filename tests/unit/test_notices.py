"""launcher/notices.py: the sink a backend says things through, and the console that fills it."""

from __future__ import annotations

import io

from launcher.notices import Notices, PlainNotices
from launcher.ui.console import Console


def _said(notices: Notices) -> None:
    notices.info("pulling image a\x1b]0;title\x07b")
    notices.error("host x: gone\nfor good")
    notices.block(["  | line one", "  | line two"])
    with notices.countdown(lambda: "waiting 3 s"):
        pass


def test_plain_notices_write_the_lines_the_console_writes_off_a_terminal():
    plain, err = io.StringIO(), io.StringIO()
    _said(PlainNotices(plain))
    _said(Console(out=io.StringIO(), err=err, color=False))
    assert plain.getvalue() == err.getvalue()
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("tfcluster: pulling image a") and "\x1b" not in lines[0] and "\x07" not in lines[0]
    assert lines[1].startswith("tfcluster: error: host x: gone") and len(lines) == 4  # one line per message
    assert lines[2:] == ["  | line one", "  | line two"]


def test_a_notice_that_cannot_be_written_is_dropped():
    closed = io.StringIO()
    closed.close()
    PlainNotices(closed).info("nowhere to go")  # no exception: a notice never stops a run
