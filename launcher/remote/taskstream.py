"""A task's output and its control channel, framed on one stream that only the wrapper writes.

Stdlib only, shipped beside taskwrap.py (which imports it for ``--control VAR``), and run on its
own where no wrapper runs beside the task (a Slurm step: ``python3 -c <this text> --control VAR
-- ARGV...``, launcher/backends/slurm/step.py).

The task gets two pipes: its standard output and error (one pipe, so its lines keep the order it
wrote them in) and a **control channel**, whose write end it inherits as a descriptor that the
variable VAR names (TFCLUSTER_CONTROL_FD). What tfcluster acts on goes there: the liveness beats
and the stacks (launcher/contract/liveness.py), the progress records (``tfcluster-step ...``),
the standby protocol. The wrapper reads both pipes and writes ONE stream on its own standard
output, line by line, each line a frame whose tag only the wrapper writes::

    \\x1e D <bytes>    a line of the task's output (its newline taken off)
    \\x1e P <bytes>    a part of a line of the task's output: the line goes on in the next P or D
    \\x1e C <bytes>    a line of the control channel
    \\x1e W <text>     a line of the wrapper's own (``taskwrap: ...``)

A line of the task's can hold any byte but the newline that ends it, so nothing the task prints
can make a frame of another kind: the launcher (launcher/backends/channel.py) hands data lines
and control lines to the supervisor apart. A line with no frame (a shell's error before the
wrapper ran, srun's own messages) is outside data. A line the task leaves unfinished is sent as
parts once its pipe has been quiet for PART_AFTER s or it reaches LINE_BYTES; a control line
over CONTROL_BYTES is dropped whole.
"""

import os
import select
import signal
import sys
import threading

MARK = b"\x1e"
DATA, PART, CONTROL, WRAPPER = b"D", b"P", b"C", b"W"
LINE_BYTES = 1 << 20  # a longer line of the task's is sent in parts of this size
CONTROL_BYTES = 1 << 16  # a longer control line is dropped (tfcluster's are under 1 KB)
PART_AFTER = 0.2  # s a pipe is quiet before an unfinished line goes out as a part
DRAIN = 3.0  # s the task's pipes are read after it ended (a process it left may hold them open)
# The wrapper's word on its task's process stopped by a signal (state T: SIGSTOP, SIGTSTP, SIGTTIN),
# read by the launcher from wrapper frames only (launcher/backends/base.py TaskHandle.wrapper_word):
# a stopped task holds its whole group in its collectives, and the supervisor need not wait for
# TensorFlow's heartbeat timeout to say so (watchdog.stopped_timeout).
STOPPED_WORD = "taskwrap: stopped: "
RUNNING_WORD = "taskwrap: running again: "
STOP_EVERY = 0.5  # s between looks at the task's state


class TaskStream:
    """The framed stream on ``fd`` (a descriptor of the wrapper's own: a copy of its stdout that no
    task inherits), and the task's pipes once ``pipes`` made them."""

    def __init__(self, fd=1):
        self.wire = os.dup(fd)
        os.set_inheritable(self.wire, False)
        self.lock = threading.Lock()
        self._reads = []
        self._child_ends = []
        self._pump = None

    def frame(self, tag, payload):
        """One frame, whole, however many threads write: dropped where the reader is gone."""
        data = MARK + tag + payload + b"\n"
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.wire, data):]
            except OSError:
                pass

    def say(self, text):
        """The wrapper's own lines (``text`` may hold several, each ends with a newline)."""
        for line in text.rstrip("\n").split("\n"):
            self.frame(WRAPPER, line.encode("utf-8", "replace"))

    def control(self, text):
        """A control line of the wrapper's own making (the deferred standby's protocol)."""
        for line in text.rstrip("\n").split("\n"):
            self.frame(CONTROL, line.encode("utf-8", "replace"))

    def pipes(self):
        """(the task's output end, its control end): both inheritable, for the task alone."""
        data_r, data_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        for fd in (data_w, ctl_w):
            os.set_inheritable(fd, True)
        self._reads = [data_r, ctl_r]
        self._child_ends = [data_w, ctl_w]
        return data_w, ctl_w

    def for_task(self, var):
        """The task's (output end, control end, VAR): its pipes made, VAR naming the control end in
        the environment it gets (this process's, which it inherits)."""
        data_w, ctl_w = self.pipes()
        os.environ[var] = str(ctl_w)
        return data_w, ctl_w, var

    def drained(self, code):
        """``code``, once what the task wrote is framed (``drain``)."""
        self.drain()
        return code

    def start(self):
        """The task has its ends: close ours (its end of file is the task's, and its children's)
        and read the pipes in a thread of their own."""
        for fd in self._child_ends:
            os.close(fd)
        self._child_ends = []
        self._pump = threading.Thread(target=self._read, name="taskstream", daemon=True)
        self._pump.start()

    def drain(self, timeout=DRAIN):
        """Wait up to ``timeout`` s for what the task wrote to be framed (both pipes at their end)."""
        if self._pump is not None:
            self._pump.join(timeout)

    def _read(self):
        data_r, ctl_r = self._reads
        pending = {data_r: b"", ctl_r: b""}
        dropping = [False]  # a control line over CONTROL_BYTES, until its newline
        live = [data_r, ctl_r]
        while live:
            try:
                ready, _, _ = select.select(live, [], [], PART_AFTER if pending[data_r] else None)
            except InterruptedError:
                continue
            if not ready:  # an unfinished line, quiet for PART_AFTER s
                self.frame(PART, pending[data_r])
                pending[data_r] = b""
                continue
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    live.remove(fd)
                    os.close(fd)
                    if pending[fd]:
                        self._lines(fd == data_r, [pending[fd]], dropping)
                    pending[fd] = b""
                    continue
                *lines, rest = (pending[fd] + chunk).split(b"\n")
                self._lines(fd == data_r, lines, dropping)
                if fd == data_r:
                    while len(rest) > LINE_BYTES:
                        self.frame(PART, rest[:LINE_BYTES])
                        rest = rest[LINE_BYTES:]
                elif len(rest) > CONTROL_BYTES:
                    dropping[0], rest = True, b""
                pending[fd] = rest

    def _lines(self, data, lines, dropping):
        for line in lines:
            if data:
                self.frame(DATA, line)
            elif dropping[0]:
                dropping[0] = False  # the end of the line too long: dropped whole
            elif len(line) <= CONTROL_BYTES:
                self.frame(CONTROL, line)


def stop_state(pid):
    """(state letter, context switches so far) of ``pid``'s main thread, or None (it is gone). The
    switches tell a process stopped all along from one continued and stopped again between two
    looks (a throttle's SIGSTOP/SIGCONT duty cycle): every stop is a switch of its own."""
    try:
        with open("/proc/%d/status" % pid, "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    state, switches = "", 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == "State":
            state = value.strip()[:1]
        elif name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            try:
                switches += int(value)
            except ValueError:
                pass
    return state, switches


def watch_stop(pid, say, ended, every=STOP_EVERY):
    """Until ``ended`` is set (or ``pid`` is gone): ``say`` STOPPED_WORD once the task has been
    stopped by a signal for two looks in a row, without running in between, and RUNNING_WORD once
    it runs again. A tracer's stop (``t``: a debugger attached) is not a stop here."""
    first, said = None, False
    while not ended.wait(every):
        seen = stop_state(pid)
        if seen is None:
            return
        state, switches = seen
        if state != "T":
            if said:
                say("%srunning again (pid %d)\n" % (RUNNING_WORD, pid))
            first, said = None, False
        elif first != switches:
            first, said = switches, False  # (stopped since this look: stopped again if it ran between)
        elif not said:
            say("%sthe task's process (pid %d) has been stopped by a signal (state T) for %g s or more\n"
                % (STOPPED_WORD, pid, every))
            said = True


def exec_task(cmd, data_w, ctl_w):
    """In a forked child: the task's stdout and stderr onto its output pipe, stdin /dev/null, its
    control end kept (inheritable), then exec ``cmd``. Never returns."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(data_w, 1)
    os.dup2(data_w, 2)
    for fd in (devnull, data_w):
        if fd > 2:
            os.close(fd)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        os.write(2, f"taskstream: cannot run {cmd[0]!r}: {exc.strerror}\n".encode("utf-8", "replace"))
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def main(argv):
    """``--control VAR -- ARGV...``: run ARGV with its output and control channel framed on this
    process's stdout; exit as it did (128+N for signal N). A stop signal is every process's of a
    Slurm step (srun and scancel signal them all): this one outlives it, to report the exit."""
    if len(argv) < 4 or argv[0] != "--control" or argv[2] != "--":
        sys.stderr.write("taskstream: usage: taskstream.py --control VAR -- ARGV...\n")
        return 2
    var, cmd = argv[1], argv[3:]
    stream = TaskStream()
    data_w, ctl_w, _ = stream.for_task(var)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda *_: None)  # (a handler, not SIG_IGN: the task gets its default back at exec)
    child = os.fork()
    if child == 0:
        exec_task(cmd, data_w, ctl_w)
    stream.start()
    ended = threading.Event()
    threading.Thread(target=watch_stop, args=(child, stream.say, ended), daemon=True, name="stop-watch").start()
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    ended.set()
    stream.drain()
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
