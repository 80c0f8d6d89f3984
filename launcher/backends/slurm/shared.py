"""What a Slurm run assumes of the file system, checked once its nodes are known: every node
sees this machine's workdir and state dir.

Tasks on the nodes run the code in the workdir and write their checkpoints and backups to the
state dir (``<run_dir>/<name>/state``); a restart resumes from what was saved there, and the
final model is read from there. A spec kept on a login node's local disk would otherwise train
on a node that cannot find the code (Slurm falls back to running the step in /tmp) or saves to
a disk nobody reads again, so a restart silently starts from scratch.

After the allocation runs, one step per node (``srun --overlap``, a second or two) enters the
workdir and reads a marker the launcher has just written into the state dir. A node that cannot
is named in one line with the fix; the caller cancels the allocation.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Sequence

from launcher.errors import LaunchError
from launcher.backends.slurm import cli

STEP_NAME = "tfcluster-shared-check"
# $1 workdir, $2 marker, $3 token: one word per node.
_SCRIPT = ('n="$SLURMD_NODENAME"; cd "$1" 2>/dev/null || { echo "$n workdir"; exit 0; }; '
           'if [ "$(cat "$2" 2>/dev/null)" = "$3" ]; then echo "$n ok"; else echo "$n state"; fi')


def argv(job_id: str, nodes: Sequence[str], workdir: Path, marker: Path, token: str) -> list[str]:
    return [*cli.step_on_each_node(job_id, nodes, STEP_NAME), "/bin/sh", "-c", _SCRIPT, "sh", str(workdir), str(marker),
            token]


def problems(stdout: str, nodes: Sequence[str], workdir: Path, state_dir: Path) -> list[str]:
    """What each node that is not fine said (pure: the step's output in, one phrase per node out)."""
    said = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            said[parts[0]] = parts[1]
    out = []
    for node in nodes:
        word = said.get(node)
        if word == "ok":
            continue
        if word == "workdir":
            out.append(f"node {node} has no workdir {workdir}")
        elif word == "state":
            out.append(f"node {node} does not see the state dir {state_dir}")
        else:
            out.append(f"node {node} did not answer the file system check")
    return out


def check(job_id: str, nodes: Sequence[str], workdir: Path, state_dir: Path, timeout: float = 60.0) -> None:
    """LaunchError naming the first node that does not share the workdir and the state dir."""
    token = secrets.token_hex(8)
    marker = state_dir / f".tfcluster-shared-{token}"
    try:
        # A new file, exclusive and never through a symlink: the state dir is on a shared disk, and
        # a link planted at the marker's name (someone else's file) is not written through.
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise LaunchError(f"state dir: something is already at {marker}, which tfcluster was about to create "
                          f"(planted there?); nothing was written: check {state_dir}") from None
    except OSError as exc:
        raise LaunchError(f"state dir: cannot write {marker}: {exc.strerror}; make {state_dir} writable "
                          "(run_dir in the spec)") from None
    try:
        os.write(fd, token.encode("ascii"))
    finally:
        os.close(fd)
    try:
        proc = cli.run(argv(job_id, nodes, workdir, marker, token), timeout=timeout)
    finally:
        marker.unlink(missing_ok=True)
    found = problems(proc.stdout, nodes, workdir, state_dir)
    if not found:
        return
    first = found[0] + (f" (and {len(found) - 1} more node(s))" if len(found) > 1 else "")
    if "did not answer" in found[0] and proc.returncode != 0:
        first += f": {cli.first_error(proc)}"
    raise LaunchError(f"slurm: {first}; the tasks there would run without this machine's code or lose their "
                      "checkpoints: put the workdir and run_dir (the state dir) on a file system every node "
                      "mounts (home or scratch on NFS/Lustre)")
