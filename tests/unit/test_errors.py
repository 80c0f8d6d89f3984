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


def test_every_run_outcome_has_one_exit_code_and_a_stray_word_none():
    import pytest

    from launcher.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_SUPERVISOR_LOST, exit_code_for
    from launcher.record.states import Outcome, RunState

    assert {o: exit_code_for(o) for o in Outcome} == {Outcome.SUCCEEDED: EXIT_OK, Outcome.FAILED: EXIT_FAILED,
                                                      Outcome.INTERRUPTED: EXIT_INTERRUPTED,
                                                      Outcome.STOPPED: EXIT_INTERRUPTED}
    assert exit_code_for(RunState.LOST) == EXIT_SUPERVISOR_LOST
    with pytest.raises(ValueError, match="no exit code for the outcome 'running'"):
        exit_code_for(RunState.RUNNING)
