"""A warm standby's promotion (docs/concepts/runs.md, "Warm standby"): the next attempt's
environment, from the file the backend wrote just before its SIGUSR1. Stdlib only: the standby stub
carries this text (launcher/supervise/standby.py, stub_command), and zygoteask.py, shipped beside
it, imports it (a standby whose fork waits for its promotion). The stub's text is its task's
command line: it names no file the tests tell wrappers by."""

import json
import os


def take_promotion(standby, standby_env, warn):
    """Drop the standby's variables (``standby``, ``standby_env``) from os.environ and add the ones
    of the promotion file ``standby_env`` named, then remove it; one that cannot be read:
    ``warn(line)``, and the environment the standby started with is kept."""
    os.environ.pop(standby, None)
    path = os.environ.pop(standby_env, "")
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            env = json.load(fh)
        os.unlink(path)
        os.environ.update({str(k): str(v) for k, v in env.items()})
    except (OSError, ValueError, AttributeError) as exc:
        warn(f"tfcluster-standby: warning: promotion file {path}: {exc}; keeping the environment it started with")
