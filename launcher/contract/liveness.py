"""A Python task's liveness, apart from what it prints: how many TensorFlow function calls it has
completed, and its every thread's stack on request. Stdlib only, and imports nothing of
tfcluster's: the reference worker calls ``install`` (worker/main.py); a script of one's own runs
under the task stub (launcher/remote/pystandby.py), which carries this text and runs it first.

What ``install`` sets up:

* **The count.** Once ``tensorflow.python.eager.context`` is imported (looked for by the beat
  thread, so a task that never imports TensorFlow pays nothing but that thread's wake-ups), its
  ``Context.call_function`` is wrapped to count each call that returns. Every eager call of a
  ``tf.function``'s graph goes through it (``AtomicFunction.call_flat``): a Keras ``fit`` step, a
  custom loop's step, ``evaluate`` and ``predict`` steps. The cost is two clock reads, two
  additions and a dict update per call.
* **Where the time goes.** The same wrapper adds up the seconds spent inside those calls
  (``in=``) and counts them by thread; the beat names the counts of ParameterServerStrategy's
  coordinator threads, one per worker (``WorkerClosureProcessingLoop-I``: ``w=I:COUNT,...``). The
  supervisor reads stragglers from them (launcher/supervise/straggler.py): a worker whose closures
  run slower than the others', or, under MultiWorkerMirroredStrategy, the task that spends the
  least of its time inside TensorFlow while its peers wait there for it.
* **The channel.** What the supervisor acts on is written on the task's control channel
  (``say``): the descriptor TFCLUSTER_CONTROL_FD names, a pipe to its wrapper
  (launcher/remote/taskstream.py), never stdout or stderr, whose lines are the task's data; one
  ``os.write`` a line (no lock of ``sys.stderr``'s to be held at exit; a line is never cut by
  another writer's). Where there is none (a task started outside tfcluster, a container without
  tfcluster's wrapper), on file descriptor 2 (the beats and stacks) or 1 (progress), in band.
* **The beat.** A daemon thread wakes every ``EVERY`` seconds and, when the count changed,
  writes ``tfcluster-beat n=COUNT in=SECONDS [w=...]`` on the channel. Its first line, at once, also names the signal that takes
  the stacks: ``tfcluster-beat n=0 stacks=12``. The count's hook is set at install where
  TensorFlow is imported already (a task forked from a server that imported it), else at the
  first beat after its import; once TensorFlow is imported, one says so
  (``tf=1``): from then on the supervisor reads the count as the task's progress
  (watchdog.hang_timeout), and printing is not progress.
* **The stacks.** The stacks' signal is blocked in the thread that calls ``block`` (the stub's
  main thread, first thing: every thread started later inherits the block), and a thread of its
  own, ``tfcluster-stacks``, takes it with ``sigwait`` and writes every thread's Python stack in
  faulthandler's format on the channel (``faulthandler.dump_traceback``, all threads) while it
  holds the GIL: the other threads are then paused where Python can stop them, so their frames hold
  still. faulthandler's own signal handler reads them while they run: taking a live run's stacks
  while a thread traced a ``tf.function`` killed that task (SIGSEGV, mid-dump). That handler stays
  registered only for a thread that does not block the signal (one started before ``block``),
  where the kernel may deliver it. The process is not stopped; a thread that holds the GIL for ever
  (a C loop that never releases it) delays the dump until it lets go. SIGUSR1 is the warm standby's;
  TensorFlow uses neither.
"""

import faulthandler
import os
import signal
import stat
import sys
import threading
import time

# The control channel's variable (envnames.CONTROL_FD): given by whoever runs this text on its own
# (the standby stub, launcher/remote/pystandby.py), else read from envnames (``_channel``).
CONTROL_VAR = globals().get("CONTROL_VAR")
BEAT = "tfcluster-beat"
STACKS_SIGNAL = signal.SIGUSR2
EVERY = 1.0  # seconds between beats while the count changes
_CONTEXT = "tensorflow.python.eager.context"
_count = [0]
_inside = [0.0]  # seconds spent inside the counted calls (all threads together)
_by_thread = {}  # thread ident -> its counted calls
_installed = []
_clock = time.perf_counter
_ident = threading.get_ident
COORDINATOR_THREAD = "WorkerClosureProcessingLoop-"  # TensorFlow's cluster_coordinator.py, one per worker


def count():
    """The TensorFlow function calls completed so far in this process."""
    return _count[0]


def _counted(call):
    def call_function(self, *args, **kwargs):
        start = _clock()
        out = call(self, *args, **kwargs)
        _inside[0] += _clock() - start
        _count[0] += 1
        ident = _ident()
        _by_thread[ident] = _by_thread.get(ident, 0) + 1
        return out

    call_function.tfcluster_counted = True
    call_function.__wrapped__ = call
    call_function.__doc__ = call.__doc__
    return call_function


def hook():
    """Wrap ``Context.call_function`` once TensorFlow's eager context module is loaded (its class
    defined); True once wrapped."""
    module = sys.modules.get(_CONTEXT)
    context = getattr(module, "Context", None)
    call = getattr(context, "call_function", None)
    if call is None:
        return False
    if not getattr(call, "tfcluster_counted", False):
        context.call_function = _counted(call)
    return True


_channel_of = [None, None]  # (pid, the control channel's descriptor or None) as this process found it


def channel():
    """The task's control channel: the descriptor its variable names, when that is a pipe (a
    child that closed it and opened something else under its number gets None), else None."""
    pid = os.getpid()
    if _channel_of[0] != pid:  # (found once per process: a forked child looks again)
        _channel_of[:] = [pid, _channel()]
    return _channel_of[1]


def _channel():
    name = CONTROL_VAR
    if not name:
        try:
            from launcher.contract.envnames import CONTROL_FD as name
        except ImportError:
            return None
    value = os.environ.get(name, "")
    if not value.isdigit():
        return None
    try:
        return int(value) if stat.S_ISFIFO(os.fstat(int(value)).st_mode) else None
    except (OSError, OverflowError):
        return None


def say(text, fallback=2):
    """One line on the task's control channel, or on ``fallback`` where it has none (in band)."""
    fd = channel()
    try:
        os.write(fallback if fd is None else fd, (text.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


_say = say


def workers():
    """The counts of ParameterServerStrategy's coordinator threads, as ``I:COUNT,...`` by worker
    index ("" where there are none)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    found = []
    for ident, n in list(_by_thread.items()):
        name = names.get(ident, "")
        if name.startswith(COORDINATOR_THREAD) and name[len(COORDINATOR_THREAD):].isdigit():
            found.append((int(name[len(COORDINATOR_THREAD):]), n))
    return ",".join("%d:%d" % pair for pair in sorted(found))


def _beat(every):
    hooked, said = False, 0
    while True:
        if not hooked:
            # At once, then every beat (install hooks at once where TensorFlow is imported
            # already: a task forked from a server that imported it reaches its first step well
            # within a beat, and with the hook a beat late none of fit's calls was counted).
            hooked = hook()
            if hooked:  # TensorFlow is in: from now on the count is this task's progress
                _say("%s n=%d tf=1" % (BEAT, _count[0]))
        time.sleep(every)
        n = _count[0]
        if n != said:
            said = n
            w = workers()
            _say("%s n=%d in=%.2f%s" % (BEAT, n, _inside[0], " w=" + w if w else ""))


def block():
    """Block the stacks' signal in this thread and every thread it starts from now on (a standby
    calls it before it imports TensorFlow, whose threads then inherit it); False where it cannot."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {STACKS_SIGNAL})
    except (ValueError, OSError, AttributeError):
        return False
    return True


def _stacks():
    while True:
        try:
            signal.sigwait({STACKS_SIGNAL})
        except (ValueError, OSError):
            return
        try:  # with the GIL held: every other Python thread's frames hold still
            faulthandler.dump_traceback(file=_stacks_fd(), all_threads=True)
        except (ValueError, OSError, RuntimeError):
            pass


def _stacks_fd():
    fd = channel()
    return 2 if fd is None else fd


def install(every=EVERY):
    """The count, the beat and the stacks' signal, once per process; False where the stacks'
    signal cannot be taken here (not the main thread's interpreter, no such signal)."""
    if _installed:
        return True
    try:  # (for a thread that does not block the signal: one started before ``block``)
        faulthandler.register(STACKS_SIGNAL, file=_stacks_fd(), all_threads=True, chain=False)
    except (ValueError, OSError, RuntimeError, AttributeError):
        return False
    if not block():
        return False
    _installed.append(True)
    hook()  # (now, in this thread, where TensorFlow is imported already: before the script's first call)
    _say("%s n=0 stacks=%d" % (BEAT, int(STACKS_SIGNAL)))
    threading.Thread(target=_stacks, name="tfcluster-stacks", daemon=True).start()
    threading.Thread(target=_beat, args=(every,), name="tfcluster-beat", daemon=True).start()
    return True
