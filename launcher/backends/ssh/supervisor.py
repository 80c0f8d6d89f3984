"""``ssh.supervisor: HOST``: the run's supervisor and its record live on a cluster host.

This machine copies the spec to ``<ssh.remote_dir>/<name>/supervisor/cluster.yaml`` on HOST
(without ``ssh.supervisor``, so the copy describes a run supervised right there) and runs the
same ``tfcluster`` command there over one SSH channel, relaying its output and exit code:
``up --detach`` returns once every task is ready and this machine can disconnect; ``status``,
``logs``, ``attach``, ``down``, ``runs`` and ``stacks`` read the record (or ask the supervisor)
where it is. ``tfcluster`` must be
installed for ``ssh.python`` on HOST (checked first, one line if not), and the spec's paths
(keys, known_hosts, ssh config) are read on HOST.
"""

from __future__ import annotations

import posixpath
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence

import yaml

from launcher.bounded import HOST_LINE_BYTES, for_terminal
from launcher.notices import Notices
from launcher.interrupts import take_interrupt
from launcher.errors import EXIT_INTERRUPTED, EXIT_OK, LaunchError
from launcher.spec.model import LoadedSpec
from launcher.backends.ssh.commands import checked_mkdir, exclusive_write, q, remote_paths

if TYPE_CHECKING:
    from launcher.backends.ssh.pool import HostPool

_IDLE = 0.05


# tfcluster's CLI on the supervisor host, run in the tasks' workdir (relative paths in the spec
# mean what they mean for the tasks) but never from it: ``python -m launcher`` would put the
# workdir first on sys.path and run a user's own ``launcher.py`` or ``launcher/`` instead
# (launcher/app/detach.py's supervisor_argv does the same here).
_MAIN = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
         "from launcher.cli.main import main_entry; main_entry()")

class RemoteSupervisor:
    def __init__(self, loaded: LoadedSpec, console: Notices, pool: "HostPool") -> None:
        self.loaded = loaded
        self.console = console
        self.host = loaded.spec.ssh.supervisor or ""
        self.opts = loaded.spec.ssh
        self.pool = pool  # its connections: connect and run_on the supervisor host
        base = posixpath.join(self.opts.remote_dir, loaded.spec.name, "supervisor")
        self.spec_path = posixpath.join(base, "cluster.yaml")
        # The command runs in the tasks' workdir; a path under the remote home needs $HOME.
        self.spec_arg = q(self.spec_path) if base.startswith("/") else '"$HOME"/' + q(self.spec_path)
        self.base_arg = q(base) if base.startswith("/") else '"$HOME"/' + q(base)
        self.workdir = remote_paths(self.opts, loaded.spec.name, "x")[2]

    # -------------------------------------------------------------- setup

    def prepare(self, upload: bool) -> None:
        problems = self.pool.connect([self.host])
        if problems:
            raise LaunchError(f"{problems[self.host]} (ssh.supervisor)")
        code, out = self.pool.run_on(self.host, self._cli_command(["--version"]), None, 60)
        if code != 0 or not out.startswith("tfcluster "):
            raise LaunchError(f"host {self.host} (ssh.supervisor): tfcluster does not run there with {self.opts.python} "
                              f"({out.strip().splitlines()[-1][:160] if out.strip() else f'exit {code}'}); install "
                              f"tfcluster for ssh.python on {self.host}, or remove ssh.supervisor")
        if upload:
            text = self._copy_text().encode("utf-8")
            target = self.spec_arg
            code, out = self.pool.run_on(
                self.host, f'{checked_mkdir(self.opts.python, self.base_arg, self.loaded.spec.share)} && '
                           f'{exclusive_write(target)}', text, 60)
            if code != 0 and "tfcluster: refusing" in out:  # another user could swap the dir (pathtrust.py)
                raise LaunchError(f"host {self.host} (ssh.supervisor): ssh.remote_dir: "
                                  f"{out.strip().splitlines()[-1].split('refusing ', 1)[-1][:400]}")
            if code != 0:
                raise LaunchError(f"host {self.host} (ssh.supervisor): cannot write {self.spec_path}: "
                                  f"{out.strip()[-160:] or f'exit {code}'}; check ssh.remote_dir")

    def _copy_text(self) -> str:
        data = yaml.safe_load(self.loaded.path.read_text()) or {}
        data.get("ssh", {}).pop("supervisor", None)
        header = (f"# Copied by tfcluster from {self.loaded.path} for the supervisor on host {self.host};\n"
                  "# edit the original, not this copy.\n")
        return header + yaml.safe_dump(data, sort_keys=False)

    def _cli_command(self, args: Sequence[str]) -> str:
        return f"cd {q(self.workdir)} && exec {q(self.opts.python)} -c {q(_MAIN)} " + " ".join(args)

    # -------------------------------------------------------------- running

    def run(self, args: Sequence[str], on_interrupt: Optional[Sequence[str]] = None) -> int:
        """Run ``tfcluster ARGS`` on the supervisor host (ARGS naming the spec as ``{spec}``),
        streaming its stdout/stderr here; its exit code. Ctrl-C closes the channel and, if
        given, runs ``on_interrupt`` there (e.g. ``down``) before returning 130."""
        command = self._cli_command([self.spec_arg if a == "{spec}" else q(a) for a in args])
        transport = self.pool.hosts[self.host].transport
        chan = transport.open_session(timeout=30)
        chan.exec_command(command)
        chan.shutdown_write()
        out, err = _Relay(sys.stdout, self), _Relay(sys.stderr, self)
        try:
            while True:
                # Ctrl-C under `attach` / `logs -f` is a flag read here, between polls: raised
                # inside paramiko it can leave a lock held (launcher/interrupts.py).
                take_interrupt()
                busy = False
                if chan.recv_ready():
                    out.feed(chan.recv(65536))
                    busy = True
                if chan.recv_stderr_ready():
                    err.feed(chan.recv_stderr(65536))
                    busy = True
                if not busy:
                    if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if not transport.is_active():
                        raise LaunchError(f"lost the connection to host {self.host} (ssh.supervisor); "
                                          "the run goes on there; try again")
                    time.sleep(_IDLE)
            out.flush()
            err.flush()
            return chan.recv_exit_status()
        except KeyboardInterrupt:
            chan.close()
            out.flush()
            err.flush()
            if on_interrupt:
                self.console.info(f"interrupted; stopping the run on host {self.host}")
                self.run(on_interrupt)
            return EXIT_INTERRUPTED
        finally:
            try:
                chan.close()
            except Exception:  # noqa: BLE001
                pass

    def close(self) -> None:
        self.pool.close()


class _Relay:
    """Whole lines, with the copy's path shown as the user's spec path. The bytes are the remote
    host's (its tfcluster relays its tasks' output raw into the channel, a pipe there): on a
    terminal here they are shown as ``logs`` shows a task's output (colours kept, OSC/DCS/APC and
    every other control sequence dropped: bounded.for_terminal), into a pipe as they are. A line
    longer than ``limit`` bytes is cut there, with a note, and the rest of it dropped: memory and
    what reaches the terminal stay bounded."""

    def __init__(self, stream, remote: RemoteSupervisor, limit: int = HOST_LINE_BYTES) -> None:
        self.stream = stream
        self.remote = remote
        self.limit = limit
        self._partial = b""
        self._cut = 0  # bytes dropped of the line being cut (0: not cutting)

    def feed(self, data: bytes) -> None:
        while data:
            if self._cut:  # the rest of an over-long line: dropped up to its end
                end = data.find(b"\n")
                if end < 0:
                    self._cut += len(data)
                    return
                self._cut += end
                self._write(f" ...({self._cut:,} bytes of this line cut)\n".encode())
                self._cut, data = 0, data[end + 1:]
                continue
            data = self._partial + data
            cut = data.rfind(b"\n") + 1
            self._partial = data[cut:]
            if cut:
                self._write(data[:cut])
            if len(self._partial) > self.limit:
                self._write(self._partial[:self.limit])
                self._cut, self._partial = len(self._partial) - self.limit, b""
            return

    def flush(self) -> None:
        if self._partial:
            self._write(self._partial)
            self._partial = b""
        if self._cut:
            self._write(f" ...({self._cut:,} bytes of this line cut)\n".encode())
            self._cut = 0

    def _write(self, data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        if _isatty(self.stream):
            text = for_terminal(text)
        self.stream.write(_local_paths(text, self.remote))
        self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _local_paths(text: str, remote: RemoteSupervisor) -> str:
    """Commands printed there name the copy; show the user's own spec file instead."""
    import re

    local = str(remote.loaded.path)
    return re.sub(r"(?:/[^\s'\"]*)?" + re.escape(remote.spec_path), local, text)


def delegate(loaded: LoadedSpec, argv: Sequence[str], spec_arg: str, command: str, console: Notices,
             pool: "HostPool") -> int:
    """Run ``argv`` (a tfcluster command line naming ``spec_arg``) on the ssh.supervisor host, over
    ``pool``'s connections (the spec's hosts; closed at the end)."""
    remote = RemoteSupervisor(loaded, console, pool)
    try:
        upload = command == "up"
        remote.prepare(upload)
        args = ["{spec}" if a == spec_arg else a for a in argv]
        if upload and "--detach" in args:
            console.info(f"the supervisor runs on host {remote.host} (ssh.supervisor): this machine can "
                         "disconnect once the run is detached")
        stop = ["down", "{spec}"] if upload else None
        code = remote.run(args, on_interrupt=stop)
        if code == EXIT_INTERRUPTED and command == "attach":  # Ctrl-C detaches, as it does here
            console.info(f"detached; the run goes on on host {remote.host} "
                         f"(stop it with: tfcluster down {loaded.path})")
            return EXIT_OK
        return code
    finally:
        remote.close()
