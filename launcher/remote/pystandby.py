"""tfcluster's stub for a Python entrypoint of one's own: every such task runs under it, cold
starts and warm standbys alike (docs/concepts/runs.md, "Warm standby"; docs/guides/hangs.md).

Before the script runs, it installs the task's liveness (launcher/contract/liveness.py, whose
text the launcher puts in LIVENESS below): the count of TensorFlow function calls, the beat lines
that report it, and the stacks' signal; then it checks that the task's own TensorFlow port is
still free (launcher/contract/portcheck.py: one line naming the holder and exit 98 if not). A cold start (TFCLUSTER_STANDBY not "1") then runs the
script at once, as below.

Stdlib only. A warm standby: a task whose command is ``python [options] SCRIPT ARGS...`` or ``python [options] -m
MODULE ARGS...`` gets its standby started as ``python [options] -c <this text> SCRIPT ARGS...``
(``-m MODULE ARGS...``): nothing of the script is imported; this imports TensorFlow (when installed
and the script, or a module beside it that it imports, names tensorflow or keras), follows the
standby protocol (SIGUSR1 blocked, the ``tfcluster-standby`` lines on its control channel, the promotion file
TFCLUSTER_STANDBY_ENV names) at the lowest priority once its host idles (standbyprio.py), and
once promoted runs the script as ``__main__`` with what a cold start of the same command gives
it: ``sys.argv``, ``sys.orig_argv`` (as written), ``sys.path[0]`` (the script's directory with symlinks resolved; for ``-m`` the
working directory; nothing with -P/-I), the ``__main__`` module's ``__file__``/``__loader__``/``__spec__``, the signal dispositions it
started with (TensorFlow's import may not change them) and SIGUSR1 unblocked, the exit code (an
uncaught exception: its traceback without this stub's frames, exit 1; a missing script: exit 2),
and TensorFlow's record of where each op is made without them too (_hide_frames).
"""
import os
import signal
import sys

# The variables' names, from launcher/contract/envnames.py: the launcher puts them in this text
# before it passes it (launcher/supervise/standby.py's stub_command).
STANDBY, STANDBY_ENV, CONTROL = "@STANDBY@", "@STANDBY_ENV@", "@CONTROL@"
KERAS, STRATEGY = "@KERAS@", "@STRATEGY@"
LIVENESS = "@LIVENESS@"


_LIVE = {"__name__": "tfcluster_liveness", "CONTROL_VAR": CONTROL}


def _say(line):
    """A line of the standby protocol, on the task's control channel (liveness.say; printed
    where the liveness could not be had)."""
    if "say" in _LIVE:
        _LIVE["say"](line, 1)
    else:
        print(line, flush=True)


def _liveness(step):
    """The task's liveness (launcher/contract/liveness.py, its frames named <tfcluster-liveness>):
    ``block`` (the stacks' signal, first thing: every thread started later inherits the block) or
    ``install``."""
    try:
        if "install" not in _LIVE:
            exec(compile(LIVENESS, "<tfcluster-liveness>", "exec"), _LIVE)
        _LIVE[step]()
    except Exception as exc:  # noqa: BLE001 - the script runs all the same, without it
        print(f"tfcluster: warning: no liveness for this task ({exc!r})", file=sys.stderr, flush=True)

# launcher/contract/standbyprio.py's text goes here (stub_command): the standby's priority and wait.
# @STANDBYPRIO@

# launcher/contract/portcheck.py's text goes here (stub_command): the task's own port, checked
# right before the script runs (check_task_port).
# @PORTCHECK@


# launcher/contract/usestf.py's text goes here (stub_command): whether the script uses TensorFlow.
# @USESTF@

# launcher/contract/kerasalias.py's text goes here (stub_command): ``import keras`` as tf_keras.
# @KERASALIAS@

# launcher/remote/promotion.py's text goes here (stub_command): the promoted environment.
# @PROMOTION@

# launcher/contract/exitsync.py's text goes here (stub_command): the group's end together.
# @EXITSYNC@


def _main():
    argv = sys.argv[1:]
    module = argv[:1] == ["-m"]
    target, args = (argv[1], argv[2:]) if module else (argv[0], argv[1:])
    _liveness("block")
    if os.environ.get(STANDBY) == "1":
        _standby(target, module)
    _liveness("install")
    if os.environ.get(KERAS) == "tf_keras":  # (the promoted environment's: read after the standby's wait)
        install_keras_alias(os.environ.get(STRATEGY, "this strategy"))
    # The task's own TensorFlow port, last thing before the script (a promoted standby has
    # TensorFlow imported: its script's server binds soon after), and for a cold start again once
    # the script's import of TensorFlow is done: taken, one line, exit 98.
    check_task_port()
    check_task_port_once_imported()
    _hide_frames()
    return _as_main(target, args, module)


def _standby(target, module):
    """The standby protocol: SIGUSR1 blocked, TensorFlow imported ahead, promoted by SIGUSR1 with
    the next attempt's environment."""
    # Blocked first thing (threads started later inherit it): an early SIGUSR1 waits, it does not kill.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    _say("tfcluster-standby waiting")
    handlers = {}
    for s in signal.valid_signals():
        try:
            handlers[s] = signal.getsignal(s)
        except (OSError, ValueError):
            pass
    # Forked by its host's zygote (launcher/remote/zygote.py), TensorFlow is imported already:
    # nothing to wait for the host's idle for.
    heavy = uses_tensorflow(target, module) and "tensorflow" not in sys.modules

    def imports():
        if heavy:
            try:
                import tensorflow  # noqa: F401 - the slow part of a cold start, done ahead
            except ImportError:
                pass
        for s, h in handlers.items():
            if h is not None and signal.getsignal(s) is not h:
                try:
                    signal.signal(s, h)
                except (OSError, ValueError, TypeError):
                    pass

    # Waits for the host to idle, imports at the lowest priority, returns once promoted with every
    # thread at the normal priority again (wait_as_standby: launcher/contract/standbyprio.py's text, above).
    wait_as_standby(imports, heavy, say=_say)
    take_promotion(STANDBY, STANDBY_ENV, lambda line: print(line, file=sys.stderr, flush=True))
    _say("tfcluster-standby promoted")
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})


def _as_main(target, args, module):
    """What runs the script (or module) as ``__main__``, as a cold start of it would."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__, main.__annotations__ = builtins, {}
    safe = getattr(sys.flags, "safe_path", False) or sys.flags.isolated
    orig = getattr(sys, "orig_argv", None)  # (3.10+) the command as written: without ``-c <this text>``
    if orig and "-c" in orig[1:]:
        at = orig.index("-c", 1)
        sys.orig_argv = [*orig[:at], *(["-m"] if module else []), target, *args]
    if module:
        import runpy

        sys.argv[:] = ["-m", *args]
        if not safe and sys.path[:1] == [""]:
            sys.path[0] = os.getcwd()
        sys.modules["__main__"] = main
        return lambda: runpy._run_module_as_main(target)
    where = os.path.abspath(target)
    sys.argv[:] = [target, *args]
    if not safe and sys.path[:1] == [""]:
        sys.path[0] = os.path.dirname(os.path.realpath(where))
    try:
        with open(where, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        print(f"{sys.executable}: can't open file {where!r}: [Errno {exc.errno}] {exc.strerror}",
              file=sys.stderr, flush=True)
        sys.exit(2)
    import importlib.machinery

    main.__file__, main.__cached__, main.__spec__, main.__package__ = where, None, None, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", where)
    sys.modules["__main__"] = main
    return lambda: exec(compile(source, where, "exec", dont_inherit=True), main.__dict__)


def _hide_frames():
    """TensorFlow's record of where each op is made (its errors print it: "Detected at node ...
    defined at") without this text's frames ("<string>"), as its tracebacks are (_run): TensorFlow's
    own per-thread filter of those stacks (tensorflow/python/util/tf_stack.py, ``StackTraceFilter``),
    set at once where TensorFlow is imported (a standby, a forked task), else right after the
    script's own import of it (after_import: launcher/contract/portcheck.py's text, above)."""
    def hide():
        tf_stack = sys.modules.get("tensorflow.python.util.tf_stack")
        try:
            class _StubFrames(tf_stack.StackTraceFilter):
                def get_filtered_filenames(self):
                    return frozenset({"<string>"}) | self.parent.get_filtered_filenames()

            _StubFrames().__enter__()  # (for the process's life)
        except Exception:  # noqa: BLE001 - another TensorFlow's internals: its errors say our frames
            pass

    if "tensorflow" in sys.modules:
        hide()
    else:
        after_import("tensorflow", hide)


def _run(go):
    try:
        go()()
    except SystemExit as exc:  # (sys.exit(0) ends well too)
        exit_together(os.environ.get(STRATEGY), exc.code)
        raise
    except Exception as exc:  # noqa: BLE001 - what the interpreter does with it, without our frames
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        del exc, tb
        sys.exit(1)
    else:
        exit_together(os.environ.get(STRATEGY))


_run(_main)
