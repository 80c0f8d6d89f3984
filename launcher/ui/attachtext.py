"""``tfcluster attach`` as text (launcher/app/attach.py follows the run; this draws it): the
status block, the output lines as they arrive (task lines on stdout; what the run says, its
events, on stderr through the console, launcher/ui/eventlines.py) and how the run ended, or that
attach detached, through the console it is given."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable

from launcher.record.status import FAILED, LOST, RUNNING, STOPPED, SUCCEEDED, RunStatus
from launcher.ui.console import Console
from launcher.ui.runstatus import lost_advice, render_status

Write = Callable[[str], None]


class TextRenderer:
    """Plain-text rendering of a run for ``attach`` when stdout is not a terminal: the status
    block, then the output lines as they arrive (task lines on stdout; the run's events, said by
    the console, on stderr), then the outcome. (Its messages also serve the live panel's attach.)"""

    def __init__(self, console: Console, spec: str) -> None:
        self.console = console
        self.spec = spec

    def start(self, view: RunStatus) -> None:
        self.console.block(render_status(view, self.spec))
        if view.state == FAILED:  # (ended before attach: its failures, as `up` said them; a live run's come as events)
            for row in view.tasks:
                if row.life.reason:
                    self.console.error(f"{row.key} failed: {row.life.reason}")
        if view.state == RUNNING:
            self.console.info(f"attached to run {view.run_id}; Ctrl-C detaches (the run goes on)")

    def write_for(self, path: Path) -> Write:
        """The record's task lines (output.log) to stdout, each shown at once."""
        stream = self.console.out

        def write(text: str) -> None:
            stream.write(text)
            stream.flush()

        return write

    def detached(self, view: RunStatus) -> None:
        self.console.info(f"detached from run {view.run_id}; it goes on "
                          f"(stop it with: tfcluster down {shlex.quote(self.spec)} --run {view.run_id})")

    def finished(self, view: RunStatus) -> None:
        if view.state == STOPPED:
            self.console.info(f"run {view.run_id} stopped")
        elif view.state == LOST:
            self.console.block(lost_advice(view, self.spec))
        elif view.state in (SUCCEEDED, FAILED):
            self.console.info(f"run {view.run_id} {view.state}" + (f": {view.reason}" if view.reason else ""))
