"""User-facing errors: each carries one line that names the culprit and the fix.

The CLI prints these without a traceback and maps them to exit codes; anything else
escaping to the top is a bug in tfcluster and is shown with its traceback.
"""

from __future__ import annotations

# Every exit code of the ``tfcluster`` command, defined here once (the CLI returns them; a use case says
# how it ended in words, which ``exit_code_for`` below maps);
# each code's comment is its meaning in the docs' exit-code reference (launcher/cli/docsgen.py).

EXIT_OK = 0  # success: the spec is valid, the run succeeded, the command did what it says
EXIT_FAILED = 1  # the run failed (a task's failure, restarts spent) or could not start (preflight)
EXIT_USAGE = 2  # a bad spec or command line: one line per problem, nothing started
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or a closed terminal: the run was stopped (the workers saved)
EXIT_SUPERVISOR_LOST = 3  # status/attach: the run's supervisor is gone, tasks may still run
EXIT_NO_RUN = 4  # status/logs/attach/down/runs/tensorboard: no such run, or no run record at all

# How a command ended, in the words its use case's result says it (launcher/app/results.py;
# a run's are record/states.py's Outcome): the CLI alone turns it into the exit code.
_EXIT_FOR = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "interrupted": EXIT_INTERRUPTED,
             "stopped": EXIT_INTERRUPTED, "supervisor lost": EXIT_SUPERVISOR_LOST}


def exit_code_for(outcome: str) -> int:
    """The exit code of a command that ended ``outcome`` (``succeeded``, ``failed``,
    ``interrupted``, ``stopped``, ``supervisor lost``); a word without one is a bug (ValueError)."""
    try:
        return _EXIT_FOR[str(outcome)]
    except KeyError:
        raise ValueError(f"no exit code for the outcome {str(outcome)!r}") from None


class UserError(Exception):
    """An error caused by the user's input or environment; printed as one line per message."""

    exit_code = EXIT_USAGE

    def __init__(self, *lines: str, keys: tuple = ()) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)
        self.keys = tuple(keys)


class SpecError(UserError):
    """cluster.yaml is missing, malformed or violates a rule (exit 2).

    ``keys``: for a problem found after loading (while planning: ports, slots, GPUs), the key of the
    spec each line is about, as a path (``("ports", "base")``, ``("hosts", 2, "slots")``); whoever knows
    the spec's file puts ``FILE:LINE:`` before those lines (``launcher.loader.load.locate``)."""

    exit_code = EXIT_USAGE


class LaunchError(UserError):
    """The plan cannot be started here: a port is taken, a host unreachable (exit 1). ``keys``, as
    SpecError's: the spec key a line is about (a remote dir another user could swap)."""

    exit_code = EXIT_FAILED


class NoRun(LaunchError):
    """No such run, or no run record of this spec at all (exit 4): a script tells "nothing to
    look at" apart from "the run failed"."""

    exit_code = EXIT_NO_RUN


class AttemptImpossible(LaunchError):
    """No further attempt can run in what the backend holds (a Slurm allocation that ended or
    was preempted): raised by ``Tasks.prepare_attempt``, it fails the run at once instead of
    spending the restart budget on attempts that cannot start (exit 1)."""


def exc_text(exc: BaseException, timeout: float | None = None) -> str:
    """An exception as the words inside a one-line error: ``OSError: Socket is closed``. A
    timeout, whose text is often empty (``TimeoutError: ``), says so, with ``timeout``'s seconds
    when the caller knows them."""
    text = str(exc).strip()
    if isinstance(exc, TimeoutError) and (not text or text == "timed out"):
        return f"no answer within {timeout:g} s (TimeoutError)" if timeout else "timed out (TimeoutError)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
