"""``tfcluster down`` on the ssh backend: stop a run's remote tasks from its record (each
task's host and remote run dir), verified by pid file and command line, never by name."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from launcher.bounded import one_line, shown
from launcher.notices import Notices
from launcher.backends.base import RecordedRun
from launcher.backends.ssh.commands import down_command

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool


def down(pool: "HostPool", run: RecordedRun, console: Notices, stop_grace: float, spec_name: str) -> bool:
    """Stop a run's remote tasks from its record (launcher.json's tasks). True if any ran.
    Only the run's own remote run dir (``.../NAME/RUN_ID``) is looked in, and only a process proven
    the run's own task wrapper there is signalled (commands._PROVE). Closes ``pool``."""
    by_host: dict[str, set[str]] = {}
    for key, task in run.tasks.items():
        host, rdir = task.get("ssh_host"), task.get("remote_run_dir")
        if not (isinstance(host, str) and isinstance(rdir, str) and host and rdir):
            continue
        if rdir.rstrip("/").split("/")[-2:] != [spec_name, run.run_id]:
            run.refuse(console, f"{one_line(key, 80)}: not stopping anything in {shown(rdir, 80)} on host {shown(host, 60)}: "
                                f"it is not run {run.run_id}'s remote run dir (.../{spec_name}/{run.run_id})")
            continue
        by_host.setdefault(host, set()).add(rdir)
    unknown = [h for h in by_host if h not in pool.hosts]
    for h in unknown:
        console.error(f"host {one_line(h, 60)} of the run is no longer in the spec; stop its tasks by hand")
    names = [h for h in by_host if h in pool.hosts]
    if not names:
        return False
    problems = pool.connect(names)
    for name in names:
        if name in problems:
            console.error(f"{problems[name]}; its tasks stop on their own within ssh.lease "
                          f"({pool.opts.lease:g} s) of losing the launcher")
    live = [n for n in names if n not in problems]
    stopped: list[str] = []

    def one(name: str) -> list[str]:
        code, out = pool.run_on(name, down_command(sorted(by_host[name]), stop_grace, run.run_id), None,
                                stop_grace + 30)
        if code != 0:
            console.error(f"host {name}: stopping tasks failed (exit {code}): {one_line(out.strip()[-200:], 200)}")
        for line in out.splitlines():
            if line.startswith("notown "):
                pf, _, why = line[len("notown "):].partition(" ")
                run.refuse(console, f"{one_line(posixpath.basename(pf), 80)} on host {name}: not signalled: "
                                    f"{one_line(why, 200)}")
        return [f"{name}:{one_line(posixpath.basename(line.split(' ', 1)[1]), 80)}" for line in out.splitlines()
                if line.startswith("stopped ")]

    try:
        if live:
            with pool.executor(len(live)) as ex:
                for found in ex.map(one, live):
                    stopped += found
    finally:
        pool.close()
    if stopped:
        console.info(f"stopped remote tasks: {', '.join(sorted(stopped))}")
    return bool(stopped)
