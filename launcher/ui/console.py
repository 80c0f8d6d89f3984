"""The terminal side of a run: task lines with ``[type:index]`` prefixes, launcher messages.

Three ways to show a run (chosen by ``tfcluster up``): a live panel (launcher/ui/panel.py) pinned
at the bottom of a terminal with task output scrolling above it; plain prefixed lines (not a
terminal, or ``--plain``); launcher messages and the final report only (``--quiet``). Known
harmless TensorFlow start-up lines (launcher/record/noise.py) are hidden unless ``verbose``. Above the
panel, the tasks' progress records (their control channels', never what they print) are shown as
people's lines (launcher/ui/peoplelines.py: one line per epoch for the run, the strategy once), and so
in plain lines (``[tfcluster] epoch 2/3 ...``, a task's own ``[worker:0] evaluated ...``); with
``verbose`` plain lines show the records as they came (``[worker:0] tfcluster-step ...``).

A run's console is a listener on its record (``listen``): the supervisor prints nothing, it writes
events and logs its tasks' lines, and the console says each event as it is written
(launcher/ui/eventlines.py) and shows each task line and progress record. ``attach`` makes it a listener on the record
it follows (``saying``), so both say the same lines.

Reader threads of every task write here concurrently; one lock keeps lines whole.

The terminal may go away mid-run (its window closed, the SSH session to a jump host dropped):
every write then fails (EIO; EPIPE for a closed pipe). Nothing written here ever raises: the
first failure, or ``follow``'s check that the terminal is still there, marks the stream lost,
points its descriptor at /dev/null (so that any other writer -- a thread's traceback, Python's
last flush at exit -- goes nowhere too, silently) and tells ``follow``'s callback once, which
stops the run as Ctrl-C does (launcher/app/up.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from typing import TYPE_CHECKING, Callable, Iterator, Optional, TextIO

from launcher.bounded import escape, for_terminal, one_line
from launcher.ui.peoplelines import PeopleLines

if TYPE_CHECKING:
    from launcher.record.eventbase import RecordEvent
    from launcher.record.view import RunModel
    from launcher.record.writer import RunRecord
    from launcher.ui.eventlines import Said

_COLORS = ("36", "33", "35", "32", "34", "31")


class Stream:
    """A console stream whose writes never raise. The first one that fails (or ``lose``) makes
    it lost: its descriptor then points at /dev/null, what is written goes nowhere, and
    ``on_lost(why)`` is called once (from whichever thread wrote)."""

    def __init__(self, stream: TextIO, name: str, on_lost: Callable[["Stream", str], None]) -> None:
        self.stream = stream
        self.name = name
        self.on_lost = on_lost
        self.lost = False
        self.was_tty = _isatty(stream)

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as exc:
                self.lose(_why(exc))
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self.stream.flush()
            except (OSError, ValueError) as exc:
                self.lose(_why(exc))

    def isatty(self) -> bool:
        return not self.lost and _isatty(self.stream)

    def gone(self) -> Optional[str]:
        """Why this stream's terminal is gone, or None: a terminal answers no terminal request
        once hung up (EIO), while writes may yet be buffered; checked without writing."""
        if self.lost or not self.was_tty:
            return None
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError):
            return None
        return None if os.isatty(fd) else "hung up"

    def lose(self, why: str) -> None:
        if self.lost:
            return
        self.lost = True
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError, AttributeError):
            fd = None
        if fd is not None:
            try:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, fd)  # what the stream still buffers is flushed there, without an error
                os.close(null)
            except OSError:
                pass
        self.on_lost(self, why)

    def __getattr__(self, name: str):  # encoding, errors, fileno...: the stream's
        return getattr(self.stream, name)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno in (errno.EIO, errno.ENXIO):
        return "hung up"
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        return "broken pipe"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class Console:
    def __init__(self, out: Optional[TextIO] = None, err: Optional[TextIO] = None, color: Optional[bool] = None) -> None:
        self.out = Stream(out or sys.stdout, "stdout", self._lost)
        self.err = Stream(err or sys.stderr, "stderr", self._lost)
        self.color = (_isatty(self.out) and not no_color()) if color is None else color
        self.on_lost: Optional[Callable[[str], None]] = None  # see ``follow``
        self._watch: Optional[threading.Event] = None
        self._lost_why = ""
        # Held while a line or the panel is written: hold it too to keep a line whole (detach's hand-over).
        self.lock = threading.Lock()
        self._palette: dict[str, str] = {}
        self.quiet_tasks = False
        self.verbose = False  # also show the known harmless TF start-up lines, and the records as they came
        self._panel = None  # ui.panel.LivePanel while the live panel is up
        self._people = PeopleLines()  # the tasks' records as people read them (peoplelines.py)

    # -------------------------------------------------------------- a terminal that goes away

    def follow(self, on_lost: Callable[[str], None], every: float = 0.5) -> None:
        """Until ``unfollow``: call ``on_lost(why)`` once when stdout or stderr goes away, at
        the first write that fails or within ``every`` s of its terminal hanging up (checked
        without writing: a ``--quiet`` run may write nothing for minutes)."""
        self.on_lost = on_lost
        if self._lost_why:  # gone before this run started (``compare``'s next configuration)
            on_lost(self._lost_why)
        streams = [s for s in (self.out, self.err) if s.was_tty]
        if not streams or self._watch is not None:
            return
        stop = self._watch = threading.Event()

        def watch() -> None:
            while not stop.wait(every):
                for stream in streams:
                    why = stream.gone()
                    if why:
                        stream.lose(why)

        threading.Thread(target=watch, daemon=True, name="console-terminal").start()

    def unfollow(self) -> None:
        self.on_lost = None
        if self._watch is not None:
            self._watch.set()
            self._watch = None

    @property
    def lost(self) -> bool:
        return self.out.lost or self.err.lost

    def _lost(self, stream: Stream, why: str) -> None:
        first = not self._lost_why
        if first:
            self._lost_why = f"{stream.name}: {why}"  # "stdout: hung up"
        # The terminal is one for both streams, as a rule: once one is gone, so is the other.
        other = self.err if stream is self.out else self.out
        if stream.was_tty and other.gone():
            other.lose(why)
        callback = self.on_lost
        if first and callback is not None:
            callback(self._lost_why)

    # -------------------------------------------------------------- the live panel

    def start_panel(self, view: "RunModel") -> bool:
        """Show the live panel of ``view`` if stdout is a terminal that can move its cursor;
        True if it is up."""
        if not _isatty(self.out) or os.environ.get("TERM", "") in ("dumb", "unknown"):
            return False
        from launcher.ui.panel import LivePanel

        panel = LivePanel(view, self.out)
        panel.start()
        with self.lock:
            self._panel = panel
            self._people = PeopleLines(tasks=lambda: tuple(view.tasks))
        return True

    @contextlib.contextmanager
    def countdown(self, text: Callable[[], str]) -> Iterator[None]:
        """While the block runs, ``text()`` shown as one line redrawn twice a second below the
        messages (a wait before the run starts and its panel exists: its countdown), on a
        terminal only; elsewhere nothing (the one line said when the wait began stands)."""
        if self._panel is not None or not _isatty(self.err) or os.environ.get("TERM", "") in ("dumb", "unknown"):
            yield
            return
        from rich.console import Console as RichConsole
        from rich.live import Live
        from rich.text import Text

        live = Live(console=RichConsole(file=self.err, highlight=False, markup=False, emoji=False),
                    get_renderable=lambda: Text(one_line(text()), no_wrap=True, overflow="ellipsis"),
                    refresh_per_second=2, transient=True, redirect_stdout=False, redirect_stderr=False)
        live.start(refresh=True)  # drawn at once: a wait shorter than the refresh would show nothing
        try:
            yield
        finally:
            live.stop()

    def end_panel(self) -> None:
        with self.lock:
            if self._panel is not None:
                self._show_in_panel(self._people.flush())  # (epochs still waiting for a task)
            panel, self._panel = self._panel, None
            if panel is not None:
                panel.stop()

    # -------------------------------------------------------------- output

    def task_line(self, key: str, line: str) -> None:
        # (imported here, as eventlines below: `tfcluster --version` and `completion` make a
        # Console and read no record: tests/unit/cli/test_cli_imports.py)
        from launcher.record import noise
        if self.quiet_tasks or (not self.verbose and noise.is_noise(line)):
            return
        with self.lock:
            if self._panel is not None:  # a person reads this: the workers' start-up lines folded
                self._show_in_panel(self._people.feed(key, line))
                return
            self._plain(key, line)

    def task_progress(self, key: str, record: str) -> None:
        """One of a task's progress records (its control channel's): people's lines, in the panel
        and in plain lines alike; with ``verbose``, in plain lines, the record as it came."""
        if self.quiet_tasks:
            return
        with self.lock:
            if self._panel is not None:
                self._show_in_panel(self._people.progress(key, record))
                return
            if self.verbose:
                self._plain(key, record)
                return
            for about, text in self._people.progress(key, record):
                self._plain(about or "tfcluster", text)

    def _plain(self, key: str, line: str) -> None:
        """``[key] line`` on stdout (caller holds the lock)."""
        prefix = f"[{key}]"
        if self.color:
            code = self._palette.setdefault(key, _COLORS[len(self._palette) % len(_COLORS)])
            prefix = f"\033[{code}m{prefix}\033[0m"
        if _isatty(self.out):  # a task's colours, never its OSC/DCS/APC (a title, a clipboard write)
            line = for_terminal(line)
        self.out.write(f"{prefix} {line}\n")
        self.out.flush()

    def _show_in_panel(self, lines: "list[tuple[Optional[str], str]]") -> None:
        for key, text in lines:
            if key is None:
                self._panel.message(text)  # a line about the whole run
            else:
                self._panel.task_line(key, text)

    # -------------------------------------------------------------- a run's record, said

    def listen(self, record: "RunRecord", view: "RunModel") -> None:
        """From now on, say each event ``record`` writes (launcher/ui/eventlines.py: ``view`` is the
        run with it applied, for the final report) and show each task line it writes for the
        console: the supervisor writes its record, and this is how a person reads it."""
        record.listeners.append(self.saying(view))
        record.line_listeners.append(self.task_line)
        record.progress_listeners.append(self.task_progress)

    def saying(self, view: "RunModel") -> Callable[["RecordEvent"], None]:
        """A listener that says each event it is given, ``view`` the run with it applied (a
        record's writer, or the feed ``attach`` follows)."""
        from launcher.ui.eventlines import said

        def say(event: "RecordEvent") -> None:
            self.say(said(event, view, self.verbose))

        return say

    def say(self, items: "list[Said]") -> None:
        """Say what launcher/ui/eventlines.py's ``said`` gave, in order."""
        from launcher.ui.eventlines import BLOCK, ERROR, INFO
        for item in items:
            if item.how == INFO:
                self.info(item.lines[0])
            elif item.how == ERROR:
                self.error(item.lines[0])
            elif item.how == BLOCK:
                self.block(list(item.lines))
            else:
                self.report(list(item.lines))

    # A message may quote outside bytes (a spec's value, a host's reply): one_line keeps it one
    # bounded line with control characters escaped, whatever the caller put in it.
    def info(self, message: str) -> None:
        self._message(f"tfcluster: {one_line(message)}")

    def error(self, message: str) -> None:
        self._message(f"tfcluster: error: {one_line(message)}", style="bold red")

    def block(self, lines: list[str]) -> None:
        # (each line escaped: a report names paths, and a path may hold any byte but / and NUL)
        self._message("\n".join(escape(line) for line in lines))

    def report(self, lines: list[str]) -> None:
        """The final report: the panel goes away first, so the report is the last thing shown."""
        self.end_panel()
        self.block(lines)

    def _message(self, text: str, style: str = "") -> None:
        with self.lock:
            # On a terminal the panel owns the screen: messages go above it.
            if self._panel is not None and _isatty(self.err):
                self._panel.message(text, style)
                return
            self.err.write(text + "\n")
            self.err.flush()


def no_color() -> bool:
    """NO_COLOR (https://no-color.org) set and not empty: no colour codes, also on a terminal (rich,
    which draws the live panel, reads the same variable)."""
    return os.environ.get("NO_COLOR", "") != ""


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
