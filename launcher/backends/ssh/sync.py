"""``ssh.sync`` and ``ssh.setup``: upload the project (a gzipped tar, over each host's open
connection) and run the setup commands on every host at once, before any task starts."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

from launcher.errors import LaunchError
from launcher.record.layout import runs_dir
from launcher.backends.ssh.commands import checked_mkdir, q, setup_command, sync_command

if TYPE_CHECKING:  # pragma: no cover
    from launcher.spec.model import LoadedSpec
    from launcher.backends.ssh.pool import HostPool

_SYNC_EXCLUDE = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv", "venv", "node_modules"}


def make_tar(root: Path, paths: Sequence[str], exclude_dirs: Iterable[Path] = ()) -> bytes:
    """A gzipped tar of ``paths`` (relative to ``root``), without VCS and cache dirs."""
    excluded = {p.resolve() for p in exclude_dirs}
    buf = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        parts = Path(info.name).parts
        if any(p in _SYNC_EXCLUDE for p in parts) or info.name.endswith(".pyc"):
            return None
        if (root / info.name).resolve() in excluded:
            return None
        return info

    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for rel in paths:
            src = (root / rel).resolve()
            if not src.exists():
                raise LaunchError(f"ssh.sync: {rel} does not exist under {root}; fix the path")
            arcname = os.path.relpath(src, root.resolve())
            if arcname.startswith(".."):
                raise LaunchError(f"ssh.sync: {rel} is outside the workdir {root}; list paths inside it")
            tar.add(str(src), arcname=arcname, filter=keep)
    return buf.getvalue()


def sync_and_setup(pool: "HostPool", loaded: "LoadedSpec", names: list[str]) -> None:
    """Upload ``ssh.sync`` to every host's workdir, then run ``ssh.setup``; LaunchError naming
    each host that failed. The hosts are connected already."""
    opts = pool.opts
    # tfcluster's own workdir (<remote_dir>/<name>/work) gets the run's mode; one the user named, or
    # the remote home, keeps the mode it has.
    share, own = loaded.spec.share, bool(opts.sync) and not opts.workdir
    data = None
    if opts.sync:
        root = (loaded.base_dir / loaded.spec.workdir).resolve()
        data = make_tar(root, opts.sync, exclude_dirs=[runs_dir(loaded)])

    def upload(name: str) -> Optional[str]:
        """The workdir checked (no other user can swap it: pathtrust.py) and made, then the tar into it."""
        hs = pool.hosts[name]
        command = sync_command(hs.python, hs.workdir, share, own) if data is not None \
            else checked_mkdir(hs.python, q(hs.workdir), share, own)
        code, out = pool.run_on(name, command, data, opts.setup_timeout)
        if code == 0:
            return None
        tail = " | ".join(out.strip().splitlines()[-3:])
        if "tfcluster: refusing" in out:
            return f"host {name}: {'ssh.workdir' if opts.workdir else 'ssh.remote_dir'}: {tail.split('refusing ', 1)[-1]}"
        return f"host {name}: ssh.{'sync' if data is not None else 'setup'} failed (exit {code}): {tail}"

    if opts.sync or opts.setup:
        with pool.executor(len(names)) as ex:
            problems = [r for r in ex.map(upload, names) if r]
        if problems:
            raise LaunchError(*problems, "no task was started")
    if opts.setup:
        _setup_group(pool, names)


def _setup_group(pool: "HostPool", names: list[str]) -> None:
    """Each setup command on every host at once (a Fabric ThreadingGroup over our open
    connections), command after command; the first command failing anywhere stops it."""
    from fabric import ThreadingGroup
    from fabric.exceptions import GroupException

    hosts, opts = pool.hosts, pool.opts
    group = ThreadingGroup.from_connections([hosts[n].conn for n in names])
    by_conn = {id(hosts[n].conn): n for n in names}
    for i, command in enumerate(opts.setup):
        full = setup_command(hosts[names[0]].workdir, command)
        try:
            group.run(full, hide=True, warn=False, timeout=opts.setup_timeout, in_stream=False)
        except GroupException as exc:
            lines = []
            for conn, res in exc.result.items():
                if isinstance(res, Exception):
                    name = by_conn.get(id(conn), conn.host)
                    lines.append(_setup_failure(name, i, command, res))
            raise LaunchError(*lines, "no task was started; fix the setup command and rerun") from None


def _setup_failure(name: str, i: int, command: str, res: Exception) -> str:
    result = getattr(res, "result", None)
    if result is not None and getattr(result, "exited", None) is not None:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        last = " | ".join(tail)
        return (f"host {name}: ssh.setup[{i}] `{command}` exited {result.exited}"
                + (f": {last}" if last else "") + "; fix it or the host")
    if type(res).__name__ == "CommandTimedOut":
        return f"host {name}: ssh.setup[{i}] `{command}` timed out; raise ssh.setup_timeout"
    return f"host {name}: ssh.setup[{i}] `{command}` failed ({res})"
