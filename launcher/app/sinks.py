"""What a use case reports through while it runs: narrow sinks it is given, never the terminal.

A use case of launcher/app/ imports nothing of ``launcher.ui`` (tests/unit/app/test_use_case_rules.py):
the CLI hands it its ``launcher.ui.console.Console`` (which has every method below) or a renderer
it built, and renders the result the use case returns. ``Notices`` (launcher/notices.py, what
backends report through) is enough for ``down`` and ``tensorboard``; a run (``up``, the detached
supervisor, ``attach``) also shows its tasks' lines and the live panel, says the run's events as
the record gets them (the supervisor prints nothing: ``listen``), and stops when its terminal
goes away.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, TextIO

from launcher.notices import Notices

if TYPE_CHECKING:  # pragma: no cover
    from launcher.record.eventbase import RecordEvent
    from launcher.record.status import RunStatus
    from launcher.record.view import RunModel
    from launcher.record.writer import RunRecord


class RunConsole(Notices, Protocol):
    """Where a run's messages, its tasks' lines and its live panel go (the CLI's Console)."""

    out: TextIO
    err: TextIO
    lock: threading.Lock  # held while a line is written: no line is cut in two
    quiet_tasks: bool  # the tasks' lines are not shown (they are in the run's logs)
    verbose: bool  # also the known harmless TensorFlow start-up lines

    @property
    def lost(self) -> bool:
        """Its terminal went away (stdout or stderr)."""

    def follow(self, on_lost: Callable[[str], None]) -> None:
        """Until ``unfollow``: ``on_lost(why)`` once when its terminal goes away."""

    def unfollow(self) -> None: ...

    def start_panel(self, view: "RunModel") -> bool:
        """The live panel of ``view``, on a terminal only (False elsewhere)."""

    def end_panel(self) -> None: ...

    def task_line(self, key: str, line: str) -> None:
        """One line a task printed."""

    def task_progress(self, key: str, record: str) -> None:
        """One of a task's progress records (its control channel's)."""

    def listen(self, record: "RunRecord", view: "RunModel") -> None:
        """From now on, say the events ``record`` writes and show the task lines and progress
        records it writes for the console (``view``: the run with each event applied, for the final
        report)."""

    def saying(self, view: "RunModel") -> Callable[["RecordEvent"], None]:
        """A listener that says each event it is given (``attach``'s, on the record it follows)."""

class AttachRenderer(Protocol):
    """``attach`` as text: the run's status when it starts, the lines as they come, how it ended."""

    def start(self, view: "RunStatus") -> None: ...

    def write_for(self, path: Path) -> Callable[[str], None]:
        """Where the new text of the record's file ``path`` goes."""

    def detached(self, view: "RunStatus") -> None: ...

    def finished(self, view: "RunStatus") -> None: ...


ConsoleFor = Callable[[TextIO, TextIO], RunConsole]  # a console writing to (out, err), plain
