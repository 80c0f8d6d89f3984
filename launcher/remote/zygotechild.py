"""What a child of the zygote (zygote.py) does once forked, before and after its task: the
environment and the title /proc shows, a fresh interpreter's signal dispositions and random state, the watch on
its waiter, the entry run as ``__main__``, and the end an interpreter makes. Stdlib only, shipped
beside zygote.py, which imports it."""

import os
import signal
import sys

try:
    import masking  # shipped beside this file (launcher.remote.TASK_FILES): a title shows no secret
except ImportError:  # (imported as launcher's module)
    from launcher.remote import masking

# Frames of these files are left out of a task's traceback (a cold start has none of them).
_OURS = {os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
         for name in ("zygotechild.py", "zygote.py", "zygotewait.py")}


def show_environ(own: dict, pad: str) -> None:
    """Write ``own`` (the variables the task has and the zygote did not start with: TF_CONFIG,
    TFCLUSTER_TASK...) over the ``pad`` variable in this process's initial environment block, the one
    /proc/PID/environ (``ps e``, a task found by its environment) shows: else every child would
    show the zygote's. The C library's own list no longer points there (os.environ was cleared:
    unsetenv). Variables that do not fit in the room are not shown; nothing is where no ``pad`` is."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
        block = ctypes.string_at(start, end - start)
    except (OSError, ValueError, IndexError):
        return
    key = pad.encode() + b"="
    at = 0 if block.startswith(key) else block.find(b"\0" + key) + 1
    if at <= 0 and not block.startswith(key):
        return
    room = block.find(b"\0", at) - at
    if room <= 0:
        return
    out = b""
    for key, value in own.items():
        entry = f"{key}={value}".encode("utf-8", "surrogateescape") + b"\0"
        if len(out) + len(entry) <= room:
            out += entry
    ctypes.memmove(start + at, out + b"\0" * (room - len(out)), room)


# A word of the title longer than this (the standby stub's -c text, 40 KB) is cut to its start.
_TITLE_WORD = 200


def show_argv(argv: list) -> None:
    """Write ``argv`` as this process's title over its argv block (the zygote's ``zygote.py --socket
    ... --title ROOM``), the words joined by spaces, as setproctitle(3) does: /proc/PID/cmdline
    (``ps``, ``top``, ``pgrep -f train.py``) shows the task, not the zygote. A NUL ends the title
    and the block's last byte is not NUL, which is how the kernel knows to read the title up to its
    NUL. A word over _TITLE_WORD characters is cut (with "..."), control characters become spaces,
    and a title longer than the block is cut to it; a secret argument shows as ``***``
    (masking.py: every local user reads /proc/PID/cmdline). Nothing where /proc does not say the block."""
    import ctypes

    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, ValueError, IndexError):
        return
    room = end - start
    if room < 4:
        return
    words = [w if len(w) <= _TITLE_WORD else w[:60] + "..." for w in masking.mask_argv(argv)]
    title = "".join(c if c >= " " and c != "\x7f" else " " for c in " ".join(words))
    data = title.encode("utf-8", "surrogateescape")[:room - 2]
    ctypes.memmove(start, data + b"\0" + b" " * (room - len(data) - 1), room)


def python_defaults() -> None:
    """The signal dispositions and mask a fresh interpreter has, and fresh random state."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    # (the random module reseeds itself in a child: os.register_at_fork in random.py)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:  # noqa: BLE001 - numpy's legacy global generator only
            pass
    blas_threads(os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"))


# How OpenBLAS builds name their setter (numpy's and scipy's wheels: scipy_openblas, 64-bit ints).
_BLAS_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_")


def blas_threads(value) -> None:
    """OpenBLAS's pool as a cold start's import would size it from the task's OMP_NUM_THREADS (or
    OPENBLAS_NUM_THREADS): each OpenBLAS loaded (numpy's) told ``value`` threads. The zygote's
    import sized it from the zygote's environment, where a task's thread budget is not. Without
    one, the count a cold import takes (OpenBLAS's get_num_procs: this process's CPUs): the fork
    kept none of the zygote's pool threads, which a cold start would have."""
    try:
        n = int(value) if value else len(os.sched_getaffinity(0))
    except (ValueError, OSError):
        return
    if n <= 0:
        return
    import ctypes

    try:
        with open("/proc/self/maps") as fh:
            libs = {line.split()[-1] for line in fh if "openblas" in line and ".so" in line}
    except OSError:
        return
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(handle, name, None)
            if setter is not None:
                setter(n)
                break


def die_with_parent(parent: int) -> None:
    """SIGKILL once ``parent`` (the task's waiter) is gone, as a cold start under the wrapper has
    (taskwrap.py _start_task): PR_SET_PDEATHSIG, then gone at once where it is gone already."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(137)


def hide_our_frames(frame) -> None:
    """Leave the server's frames (``frame``, run_main's, and every one under it: zygote.py's serve
    loop, the waiter's fork) out of the stacks TensorFlow records in this thread. TensorFlow keeps
    each op's Python stack where the op is made and prints it in the op's errors ("Detected at node
    ... defined at (most recent call last):"); a forked task's stack starts in the server, and its
    errors said 7 frames of ours before the task's own, which a cold start's do not. TensorFlow's
    own per-thread filter of those stacks (tensorflow/python/util/tf_stack.py, ``StackTraceFilter``)
    drops them, in the main thread (the only one with them: a thread the task starts has none).
    Nothing where TensorFlow is not imported or has no such filter."""
    tf_stack = sys.modules.get("tensorflow.python.util.tf_stack")
    base = getattr(tf_stack, "StackTraceFilter", None)
    if base is None:
        return
    files = set()
    while frame is not None:
        files.add(frame.f_code.co_filename)
        frame = frame.f_back
    try:
        class _ServerFrames(base):
            def get_filtered_filenames(self):
                return frozenset(files) | self.parent.get_filtered_filenames()

        _ServerFrames().__enter__()  # (for the process's life: never left)
    except Exception:  # noqa: BLE001 - another TensorFlow's internals: its errors say our frames, nothing worse
        pass


# The zygote's own modules, not a cold start's: a task's module of the same name is its own.
_OUR_MODULES = ("zygotechild", "zygotewait", "sibling")
# The modules this process had from the zygote when its entry began (run_main): every other one,
# and ``__main__``, is the task's own, which its end clears as a cold start's teardown does.
_ZYGOTES: set = set()


def run_main(mode: str, target: str, args: list) -> int:
    """Run the entry as ``__main__`` the way ``python -c|-m|SCRIPT`` does: its sys.argv and
    sys.path[0] (nothing added with -P/-I)."""
    import types

    _ZYGOTES.update(sys.modules)
    hide_our_frames(sys._getframe())
    for name in _OUR_MODULES:
        sys.modules.pop(name, None)
    safe = getattr(sys.flags, "safe_path", False) or sys.flags.isolated
    import builtins

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    if mode == "-c":
        sys.argv[:] = ["-c", *args]
        if not safe:
            sys.path[0] = ""
        exec(compile(target, "<string>", "exec"), main.__dict__)
        return 0
    import runpy

    if mode == "-m":
        sys.argv[:] = ["-m", *args]
        if not safe:
            sys.path[0] = os.getcwd()
        runpy._run_module_as_main(target)  # sets sys.argv[0] to the module's path, as -m does
        return 0
    sys.argv[:] = [target, *args]
    if not safe:
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    if not os.path.isfile(target):  # (a directory or a zip with a __main__.py)
        runpy.run_path(target, run_name="__main__")
        return 0
    # A file runs in the one __main__ module, as python runs it (runpy.run_path would use a
    # module of its own and drop it): its globals are what the end clears (end_own_objects).
    import importlib.machinery

    with open(target, "rb") as fh:
        source = fh.read()
    where = os.path.abspath(target)
    main.__file__, main.__cached__, main.__package__, main.__spec__ = where, None, None, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", where)
    exec(compile(source, target, "exec", dont_inherit=True), main.__dict__)
    return 0


def print_uncaught(exc: BaseException) -> None:
    """The traceback the interpreter prints, without this file's and runpy's frames."""
    import runpy

    ours = _OURS | {os.path.abspath(runpy.__file__)}
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in ours:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def exit_as_interpreter(code, sig: int = 0) -> None:
    """End as the interpreter ends: non-daemon threads joined, atexit run, streams flushed, the
    code of sys.exit's argument (a text printed, exit 1)."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        import threading

        threading._shutdown()
    except Exception:  # noqa: BLE001
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except Exception:  # noqa: BLE001
        pass
    end_own_objects()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if sig:
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(code & 0xFF)


def end_own_objects() -> None:
    """What a cold start's teardown does to the task's own objects, which ``os._exit`` would skip,
    in the interpreter's order (Py_FinalizeEx's finalize_modules): the task's modules (``__main__``
    and every module it imported itself) taken out of sys.modules, what that frees collected, then
    what is left of them cleared, the last imported first, and collected again. So an object that
    writes when it goes writes: a file the script never closed, TensorFlow's summary writer (its
    events reach the file at a flush: every 2 minutes, or at its end), a ``__del__``. Forked and
    ended at once, a task's event file kept its header only (78 bytes against a cold start's 386, 5
    scalars) and an unclosed file nothing. The zygote's modules, and so what the server holds, are
    left alone (their ends may touch what it keeps; its own objects were frozen out of the
    collector before the fork); the writer a script made TensorFlow's default (``set_as_default``)
    is held by TensorFlow's module, so it is let go there. A daemon thread that meets a cleared
    module says nothing: a cold teardown stops them."""
    import gc
    import threading
    import weakref

    threading.excepthook = lambda args: None
    # (looked up first: the task may have imported it itself, and then it goes below)
    state = getattr(sys.modules.get("tensorflow.python.ops.summary_ops_v2"), "_summary_state", None)
    if getattr(state, "writer", None) is not None:
        state.writer = None
    state = None
    names = [name for name in reversed(list(sys.modules)) if name not in _ZYGOTES or name == "__main__"]
    left = []
    for name in names:
        module = sys.modules.pop(name, None)
        try:
            left.append(weakref.ref(module))
        except TypeError:  # (None, or an object that is not a module)
            pass
    module = None
    _flush_own_files(gc)
    try:
        gc.collect()
        for ref in left:
            alive = ref()
            if alive is not None and isinstance(getattr(alive, "__dict__", None), dict):
                alive.__dict__.clear()
            alive = None
        gc.collect()
    except Exception:  # noqa: BLE001
        pass


def _flush_own_files(gc) -> None:
    """Flush every open file object this process made after the fork (the collector's
    generations: the zygote's were frozen into its permanent one), text first, then its buffer.
    A cold teardown writes them as it frees them; collected together in a cycle here, a buffer
    closed before its text layer would drop the text (an unclosed file in the script: empty)."""
    import io

    std = {id(sys.stdin), id(sys.stdout), id(sys.stderr), id(sys.__stdout__), id(sys.__stderr__)}
    found = [o for o in gc.get_objects() if isinstance(o, (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom))
             and id(o) not in std]
    for obj in sorted(found, key=lambda o: not isinstance(o, io.TextIOWrapper)):
        try:
            if not obj.closed:
                obj.flush()
        except Exception:  # noqa: BLE001 - (a full disk: what a cold teardown would drop too)
            pass
