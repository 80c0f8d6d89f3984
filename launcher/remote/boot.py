#!/usr/bin/env python3
"""Remote task bootstrap: read the task environment from stdin, then become taskwrap.

Usage (run by the ssh backend on a host)::

    python3 boot.py TASKWRAP_PY [taskwrap options] -- ARGV...

The launcher first writes ``<decimal length>\\n<JSON object>`` to the channel's stdin: the
task's environment. Passing it this way keeps secret values off every command line (``ps``)
and out of files. The rest of stdin stays the lifeline that taskwrap watches. This process then
runs taskwrap's ``main`` in-process (same pid), so the pid taskwrap writes to its pid file is
the leader of the task's session and process group. The host agent (agent.py) starts each
host's first task through ``become`` without a shell of its own; later starts use this.

Stdlib only, Python 3.6+.
"""

import json
import os
import sys


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("launcher closed the channel before sending the environment")
        buf += chunk
    return buf


def _read_env(fd=0):
    header = b""
    while not header.endswith(b"\n"):
        c = os.read(fd, 1)
        if not c:
            raise EOFError("launcher closed the channel before sending the environment")
        header += c
        if len(header) > 20:
            raise ValueError("bad environment header")
    n = int(header.decode("ascii").strip())
    return json.loads(_read_exact(fd, n).decode("utf-8"))


def become(taskwrap_path, env, args):
    """Apply ``env`` and run taskwrap's ``main(args)`` in this process (the host agent's
    "go" ends here too). It does not return: the process ends through taskwrap's ``end`` with
    the task's code, not through the interpreter's shutdown, which a wrapper thread still
    writing to stderr would turn into an abort (exit 134)."""
    for key, value in env.items():
        os.environ[str(key)] = str(value)
    # Like the local backend: `python` in the entrypoint is the interpreter running this wrapper.
    bindir = os.path.dirname(sys.executable)
    if bindir:
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    sys.path.insert(0, os.path.dirname(os.path.abspath(taskwrap_path)))
    sys.argv = [taskwrap_path] + list(args)
    import taskwrap  # noqa: E402 - uploaded next to this file

    taskwrap.end(taskwrap.main(list(args)))


def main(argv):
    if len(argv) < 1:
        sys.stderr.write("tfcluster boot: usage: boot.py TASKWRAP_PY [options] -- ARGV...\n")
        return 2
    try:
        env = _read_env(0)
    except (EOFError, ValueError) as exc:
        sys.stderr.write("tfcluster boot: %s\n" % exc)
        return 2
    return become(argv[0], env, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
