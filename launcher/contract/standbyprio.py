"""A warm standby's priority (docs/concepts/runs.md, "Warm standby"): it waits for its host to idle,
then imports TensorFlow at the lowest CPU and I/O priority, so that it takes only what the host's
tasks leave; promoted, every thread of it runs at the normal priority again, and so does whatever
it starts.

* CPU: SCHED_IDLE for the importing thread (the threads TensorFlow's import starts inherit it).
  Only where the process may come back from it: Linux lets a process leave SCHED_IDLE only with
  CAP_SYS_NICE or an RLIMIT_NICE that allows its nice value (root on a host has it, root in a
  default docker container does not). Elsewhere the CPU priority is left as it is: a promoted task
  stuck at SCHED_IDLE, or at nice 19, would be starved by anything else on its host.
* I/O: the idle class (ioprio_set), which any process may leave again.
* The host idles: half of its CPU time idle over a second, twice in a row (/proc/stat), or
  IDLE_WAIT seconds after the standby started at the latest.
* Starved: a standby not ready STARVED_AFTER seconds after it started (a host busy all along)
  comes back to the normal priority, and says so in its ready line.
* Promoted (SIGUSR1, taken by a thread of its own at the normal priority): every thread of the
  process back to its normal CPU and I/O priority at once, also mid-import.

Stdlib only, and no import of its own package's: the reference worker imports it
(worker/main.py), the standby stub carries its text (launcher/remote/pystandby.py).
"""

import ctypes
import os
import platform
import signal
import threading
import time

# How long a standby waits for its host to idle before it imports anyway (at idle priority).
IDLE_WAIT = 20.0
# Not ready this long after it started: back to the normal priority.
STARVED_AFTER = 45.0
# The host idles: at least this share of its CPU time idle over a window, twice in a row.
IDLE_SHARE = 0.5
IDLE_WINDOW = 1.0

_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_CLASS_IDLE = 3
# ioprio_set, ioprio_get by machine (no libc wrapper exists).
_IOPRIO_CALLS = {"x86_64": (251, 252), "aarch64": (30, 31), "ppc64le": (273, 274), "s390x": (282, 283),
                 "i686": (289, 290), "i386": (289, 290)}
_CAP_SYS_NICE = 23


def may_leave_idle() -> bool:
    """Whether this process could come back from SCHED_IDLE (CAP_SYS_NICE, or an RLIMIT_NICE that
    allows its nice value)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    if int(line.split()[1], 16) >> _CAP_SYS_NICE & 1:
                        return True
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
        return soft == resource.RLIM_INFINITY or soft >= 20 - os.nice(0)
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def _ioprio(call, *args):
    calls = _IOPRIO_CALLS.get(platform.machine())
    if calls is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(calls[call], *args)
    return None if result < 0 else result


def io_class(tid=0):
    """The I/O class of thread ``tid`` (0: this one): 0 none, 1 real-time, 2 best-effort, 3 idle; None unknown."""
    value = _ioprio(1, _IOPRIO_WHO_PROCESS, tid)
    return None if value is None else value >> _IOPRIO_CLASS_SHIFT


class Priority:
    """This process's standby priority: ``lower`` (the calling thread and what it starts),
    ``restore`` (every thread, idempotent)."""

    def __init__(self):
        self.cpu = "normal"  # what lower() did: "idle", or "normal (why)"
        self.io = "normal"
        self._policy = None  # (policy, priority) before lower()
        self._io = None  # the ioprio value before lower()
        self._lock = threading.Lock()

    def lower(self):
        """The calling thread to SCHED_IDLE (where it may come back) and the idle I/O class;
        the words for the ready line."""
        if not hasattr(os, "SCHED_IDLE"):
            self.cpu = "normal (no SCHED_IDLE here)"
        elif not may_leave_idle():
            self.cpu = "normal (SCHED_IDLE could not be left again: no CAP_SYS_NICE)"
        else:
            try:
                self._policy = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                self.cpu = "idle"
            except OSError as exc:
                self._policy, self.cpu = None, f"normal (SCHED_IDLE: {exc.strerror})"
        before = _ioprio(1, _IOPRIO_WHO_PROCESS, 0)
        if before is not None and _ioprio(0, _IOPRIO_WHO_PROCESS, 0, _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT) is not None:
            self._io, self.io = before, "idle"
        return self.words()

    def words(self):
        return f"cpu={self.cpu.split(' ')[0]} io={self.io}"

    def restore(self):
        """Every thread of this process back to the priority it had before ``lower``."""
        with self._lock:
            try:
                tids = [int(t) for t in os.listdir("/proc/self/task")]
            except OSError:
                tids = [0]
            for tid in tids:
                if self._policy is not None:
                    try:
                        if os.sched_getscheduler(tid) == os.SCHED_IDLE:
                            os.sched_setscheduler(tid, self._policy[0], os.sched_param(self._policy[1]))
                    except OSError:
                        pass  # (a thread that just ended)
                if self._io is not None and io_class(tid) == _IOPRIO_CLASS_IDLE:
                    _ioprio(0, _IOPRIO_WHO_PROCESS, tid, self._io)


def _cpu_times():
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + (fields[4] if len(fields) > 4 else 0)


def wait_idle(until, stop):
    """Until the host idles (IDLE_SHARE of its CPU time idle over IDLE_WINDOW, twice in a row),
    ``until`` (a time.time()) passes, or ``stop`` (an Event) is set; True if it idled."""
    try:
        last = _cpu_times()
    except (OSError, ValueError, IndexError):
        return False
    quiet = 0
    while time.time() < until and not stop.is_set():
        if stop.wait(IDLE_WINDOW):
            return False
        now = _cpu_times()
        total, idle = now[0] - last[0], now[1] - last[1]
        last = now
        quiet = quiet + 1 if total > 0 and idle >= IDLE_SHARE * total else 0
        if quiet >= 2:
            return True
    return False


def wait_as_standby(imports, heavy=True, say=None):
    """The standby's wait, SIGUSR1 already blocked: lower the priority, wait for the host to idle
    (``heavy``: there is something to import), run ``imports``, say ``ready``, and return once
    promoted, every thread at its normal priority again."""
    say = say or (lambda line: print(line, flush=True))
    began = time.time()
    prio = Priority()
    promoted, ready = threading.Event(), threading.Event()
    starved = []

    def take_promotion():
        # At the normal priority (made before lower()): SIGUSR1 restores the priority at once.
        while not signal.sigtimedwait({signal.SIGUSR1}, max(0.0, began + STARVED_AFTER - time.time()) or 3600):
            if not ready.is_set() and not starved:
                starved.append(True)
                prio.restore()
        prio.restore()
        promoted.set()

    threading.Thread(target=take_promotion, daemon=True, name="tfcluster-standby").start()
    prio.lower()
    if promoted.is_set():  # promoted before it lowered: the promotion's restore came first
        prio.restore()
    waited = time.time()
    idled = wait_idle(began + IDLE_WAIT, promoted) if heavy else False
    waited = time.time() - waited
    imports()
    ready.set()
    how = prio.words() + (" (starved: back to normal)" if starved else "")
    say(f"tfcluster-standby ready after={time.time() - began:.1f}s waited={waited:.1f}s"
        f"{' host-idle' if idled else ''} {how}")
    promoted.wait()
    prio.restore()  # (threads started since the promotion's restore)
