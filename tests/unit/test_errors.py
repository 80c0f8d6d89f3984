"""errors.exc_text: an exception as the words inside a one-line error, never an empty ``TimeoutError: ``."""

from __future__ import annotations

import socket

from launcher.errors import exc_text


def test_an_empty_timeout_says_it_timed_out_with_the_seconds_when_known():
    assert exc_text(TimeoutError()) == "timed out (TimeoutError)"
    assert exc_text(TimeoutError(), 60) == "no answer within 60 s (TimeoutError)"
    assert exc_text(socket.timeout("timed out"), 2.5) == "no answer within 2.5 s (TimeoutError)"


def test_other_exceptions_keep_their_name_and_text():
    assert exc_text(OSError("Socket is closed")) == "OSError: Socket is closed"
    assert exc_text(TimeoutError("the agent gave no reply"), 5) == "TimeoutError: the agent gave no reply"
    assert exc_text(EOFError()) == "EOFError"
