"""``tfcluster up FILE --detach``: the run goes on in a supervisor process of its own.

The foreground ``up`` starts the supervisor at once, as ``tfcluster up FILE --supervise RUN_ID``
in a new session (no controlling terminal; SIGHUP ignored) with stdin from /dev/null and its
output on one pipe. Everything up to "every task is ready" happens there as in a foreground
``up`` -- the spec check, the preflight (a taken port, an unreachable host), starting the tasks
-- and the foreground relays it line by line, so a problem is the same one line with the same
exit code. Once every task is ready the supervisor writes a hand-over line and moves its output
to ``<run>/supervisor.log``; the foreground returns the run id and its supervisor's pid (a
``DetachResult``: the CLI prints them with the commands that reach the run) and exits 0. Task
output goes on into the run's logs (``tfcluster logs``).

Ctrl-C (or a closed terminal) before the hand-over stops the run as it would stop a foreground
``up``: the supervisor gets SIGTERM and tears down.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from launcher.safefile import file_mode_in, open_append
from launcher.contract import envnames
from launcher.app.results import DetachResult, RunResult
from launcher.record.states import Outcome
from launcher.app.sinks import ConsoleFor, RunConsole

if TYPE_CHECKING:  # pragma: no cover
    from launcher.app.up import Show

_MARK = "\x1e"  # starts every line the supervisor sends to the foreground
_OUT, _ERR, _READY = "O", "E", "R"


# ------------------------------------------------------------------ supervisor side


class Handover:
    """The detached supervisor's output: relayed to the foreground until every task is ready,
    then only into the run dir. Its launcher messages also go to ``supervisor.log`` from the
    moment the run record exists."""

    def __init__(self, console_for: ConsoleFor) -> None:
        """``console_for(out, err)``: the plain console (the CLI's) the supervisor writes through."""
        self.attached = True
        self._pipe = os.dup(1)  # the foreground's end, kept apart from fd 1/2 (redirected at hand-over)
        self._log: Optional[int] = None
        self.console = console_for(_Channel(self, _OUT), _Channel(self, _ERR))

    def open_log(self, path: Path) -> None:
        try:
            self._log = open_append(path, file_mode_in(path.parent))  # (never through a symlink planted in the run dir)
        except OSError:
            self._log = None

    def send(self, tag: str, line: str) -> None:
        if tag == _ERR and self._log is not None:
            _write(self._log, line + "\n")
        if self.attached:
            _write(self._pipe, _MARK + tag + line + "\n")

    def hand_over(self, run_id: str, note: str = "") -> None:
        """Every task is ready: tell the foreground, then write only into the run dir."""
        with self.console.lock:  # no line of a task or a message is cut in two
            if not self.attached:
                return
            _write(self._pipe, f"{_MARK}{_READY}{run_id} {os.getpid()} {note}\n")
            self.attached = False
            sys.stdout.flush()
            sys.stderr.flush()
            target = self._log if self._log is not None else os.open(os.devnull, os.O_WRONLY)
            os.dup2(target, 1)
            os.dup2(target, 2)
            os.close(self._pipe)
        self.console.quiet_tasks = True  # their output is in the run's logs


class _Channel(io.TextIOBase):
    """A text stream for Console that sends whole lines through the Handover."""

    def __init__(self, handover: Handover, tag: str) -> None:
        self.handover = handover
        self.tag = tag
        self._partial = ""

    def write(self, text: str) -> int:
        data = self._partial + text
        *lines, self._partial = data.split("\n")
        for line in lines:
            self.handover.send(self.tag, line)
        return len(text)

    def isatty(self) -> bool:
        return False


def _write(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # the foreground is gone (Ctrl-C'd, terminal closed): the run goes on


def ignore_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def supervise(path: str, run_id: str, console_for: ConsoleFor, show: "Show", *, force: bool = False) -> RunResult:
    """``up FILE --supervise RUN_ID``: this process is the detached supervisor. It runs the spec
    as a foreground ``up`` would (``app.up``'s ``prepare`` and ``run``, its warnings said by the
    foreground already), its output going through a Handover to the foreground until every task
    is ready, written by ``console_for(out, err)``; ``force``: even while another run of the
    spec is running (``up --force``)."""
    from launcher.app import up

    ignore_hangup()
    handover = Handover(console_for)
    planned = up.prepare(path, handover.console, warn=False)
    if not force:
        up.refuse_if_running(planned, path)
    return up.run(planned, handover.console, show, run_id=run_id, handover=handover)


# ------------------------------------------------------------------ foreground side


def supervisor_argv(spec: str, run_id: str, extra: Sequence[str] = ()) -> list[str]:
    """This tfcluster as the detached supervisor. Not ``python -m launcher``: that would import a
    ``launcher.py`` or ``launcher/`` of the user's from the current directory instead of this one."""
    root = str(Path(__file__).resolve().parents[2])
    main = (f"import sys; sys.path[:] = [{root!r}] + [p for p in sys.path if p not in ('', '.')]; "
            "from launcher.cli.main import main_entry; main_entry()")
    return [sys.executable, "-c", main, "up", spec, "--supervise", run_id, *extra]


def start(spec: str, console: RunConsole, *, quiet: bool = False, force: bool = False) -> DetachResult:
    """``up FILE --detach`` in the foreground: a new run id, its supervisor started and relayed
    until hand-over (``launch``)."""
    from launcher.record.writer import new_run_id

    extra = [flag for flag, on in (("--quiet", quiet), ("--force", force)) if on]
    return launch(spec, new_run_id(), extra, console)


def launch(spec: str, run_id: str, extra: Sequence[str], console: RunConsole) -> DetachResult:
    """Start the detached supervisor and relay it until hand-over; the result names the run and
    its supervisor (the CLI shows how to reach it), or how the supervisor ended before it handed over."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env[envnames.SUPERVISOR] = run_id  # `down` signals it only with this mark (procinfo.not_own)
    proc = subprocess.Popen(supervisor_argv(spec, run_id, extra), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env, close_fds=True)
    assert proc.stdout is not None
    interrupted = []

    def on_signal(signum: int, _frame) -> None:
        interrupted.append(signum)
        try:
            proc.send_signal(signal.SIGTERM)  # as Ctrl-C on a foreground up: graceful, then at once
        except ProcessLookupError:
            pass

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
    ready: Optional[str] = None
    try:
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(_MARK + _READY):
                ready = line[2:]
                break
            if line.startswith(_MARK + _OUT):
                emit_line(console.out, line[2:])
            elif line.startswith(_MARK + _ERR):
                emit_line(console.err, line[2:])
            else:
                emit_line(console.err, line)
        proc.stdout.close()
        if ready is None:
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # its output closed, yet it lives on: not ours to guess
                console.error(f"the supervisor (pid {proc.pid}) closed its output without handing over; "
                              f"see `tfcluster status {spec}`")
                return DetachResult(Outcome.FAILED, run_id)
            if interrupted and code != 0:
                return DetachResult(Outcome.INTERRUPTED, run_id)
            return DetachResult(Outcome.SUCCEEDED if code == 0 else Outcome.FAILED, run_id, relayed_exit=code)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    rid, pid, note = (ready.split(" ", 2) + ["", ""])[:3]
    return DetachResult(Outcome.SUCCEEDED, rid, supervisor_pid=pid, note=note.strip())


def emit_line(stream, text: str) -> None:
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # the terminal is gone (SIGHUP forwarded already): keep draining the supervisor
