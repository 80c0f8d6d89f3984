"""The shell command lines the ssh backend sends to hosts (pure: strings in, strings out).

Every value that reaches a remote shell is ``shlex.quote``d; task environments never appear on
a command line (they go over the channel's stdin, see ``env_block``).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import signal as _signal
from typing import Iterable, Mapping, Optional, Sequence

from launcher.contract import envnames
from launcher.remote import agent_source, pathtrust_command_source
from launcher.backends.pyspy import PAUSE_LIMIT, remote_command
from launcher.backends.ssh.options import SSHOptions

def q(value: str) -> str:
    return shlex.quote(str(value))


# Seconds between the task wrapper's samples of its task's GPU figures (taskwrap.py --gpu-watch;
# the local backend's watch samples as often: launcher/supervise/gpuwatch.py).
GPU_WATCH = 5.0


# Seconds a task's wrapper waits for its host's fork server to answer (its import, at the run's start).
ZYGOTE_WAIT = 120.0


def task_command(python: str, workdir: str, run_dir: str, pidfile: str, lease: float, grace: float,
                 argv: Sequence[str], gce_metadata: str = "off", zygote: Optional[str] = None,
                 defer: bool = False) -> str:
    """The shell command that starts one task. The env is NOT in it (it goes over stdin).
    The wrapper runs ``quiet`` (see there): exit 128+N if it dies of signal N, and nothing
    of the shell's own in the task's output. ``zygote``: the host's fork server's socket, which
    forks the task (``defer``: a warm standby, forked once promoted)."""
    boot = posixpath.join(run_dir, "boot.py")
    wrap = posixpath.join(run_dir, "taskwrap.py")
    # The run dir is checked again just before boot.py runs from it: no other user could have
    # swapped it since the preflight (launcher/remote/pathtrust.py), else one line and exit 2.
    # -S: the wrapper needs only the stdlib; skipping site saves a large part of its start-up.
    # The task itself starts its own interpreter normally.
    parts = [q(python), "-S", q(boot), q(wrap), "--lease", f"{lease:g}", "--grace", f"{grace:g}",
             "--pidfile", q(pidfile), "--threads", envnames.THREADS, "--gpus", envnames.GPUS,
             "--gpu-memory-var", envnames.GPU_MEMORY, "--collective-var", envnames.COLLECTIVE,
             "--gpu-watch", f"{GPU_WATCH:g}", "--control", envnames.CONTROL_FD] \
        + (["--gce-metadata", q(gce_metadata)] if gce_metadata != "off" else []) \
        + (["--zygote", q(zygote), "--zygote-wait", f"{ZYGOTE_WAIT:g}"] if zygote else []) \
        + (["--standby-defer", f"{envnames.STANDBY},{envnames.STANDBY_ENV}"] if zygote and defer else []) \
        + ["--"] + [q(a) for a in argv]
    return f"cd {q(workdir)} && " + quiet(" ".join(parts), first=path_check(python, q(run_dir), "boot.py", "taskwrap.py"))


def path_check(python: str, path: str, *files: str) -> str:
    """Shell: exit 0 if no user but this one and root can swap ``path`` (shell text: quoted, or
    ``"$HOME"/'...'``), any dir above it, or its ``files``; else one line on stderr and exit 2
    (launcher/remote/pathtrust.py, run with the host's Python)."""
    return f"{q(python)} -S -c {q(pathtrust_command_source())} {path}" + "".join(f" {q(f)}" for f in files)


def checked_mkdir(python: str, path: str, share: str, own: bool = True) -> str:
    """Shell: make the dir ``path`` (shell text) and those missing above it, 0700 (0750 with
    ``share: group``) whatever the umask, once no other user could swap any dir on the way, and
    check it again once made (someone could have made it first in a sticky dir). ``own``: the
    dir is tfcluster's (under ssh.remote_dir), so an older one gets that mode too; a dir the user
    named keeps the mode it has."""
    umask, mode = ("027", "750") if share == "group" else ("077", "700")
    check = path_check(python, path)
    made = f"(umask {umask} && mkdir -p {path}) && chmod {mode} {path}"
    if not own:
        made = f"{{ [ -d {path} ] || {{ {made}; }}; }}"
    return f"{check} && {made} && {check}"


def quiet(command: str, first: str = "") -> str:
    """Run ``command`` (one simple command: the task wrapper or the host agent) so that the
    shell has nothing to say about it, and report how it ended.

    The shell stays and waits (``; exit $?``), so a wrapper killed by signal N is reported as
    exit status 128+N (paramiko ignores SSH's exit-signal message, which ``exec`` alone would
    leave us). But a shell that sees its child die of a signal prints ``line 1: PID Killed
    <the whole command line>``, and for the host agent that line is agent.py's whole source,
    which then reached the task's output and the console. So the shell's own stderr is
    /dev/null while it waits, and the command gets the channel's stderr back (kept on fd 3) in
    a subshell that becomes it (``exec``): its own messages, and the shell's "not found" for
    a missing interpreter, still reach the launcher. (In a subshell, not as a redirection on
    the command itself: dash applies those in the shell, and prints "Killed" through them.)
    POSIX sh, bash, dash and zsh alike; no extra process (the subshell is the command).
    ``first``: a command the subshell runs before it becomes ``command``, which it becomes only
    if that exits 0 (its messages reach the channel's stderr too)."""
    first = f"{first} && " if first else ""
    return f"exec 3>&2 2>/dev/null && (exec 2>&3 3>&- && {first}exec {command}); exit $?"


def env_block(env: Mapping[str, str]) -> bytes:
    body = json.dumps(dict(env), separators=(",", ":")).encode("utf-8")
    return str(len(body)).encode("ascii") + b"\n" + body


def pid_tag(pidfile: str) -> str:
    """The run-unique tail of a pid file path (``NAME/RUN_ID/pids/FILE``). A wrapper's command
    line always contains it: the host agent is started with it before the remote run dir's
    absolute path is known, boot.py with the whole path."""
    return "/".join(pidfile.split("/")[-4:])


_VERIFY = (
    'read pid child st < "$pf" 2>/dev/null || {{ echo "nopid $pf"; continue; }}; '
    'case $pid in ""|*[!0-9]*) echo "nopid $pf"; continue;; esac; '
    'tag=${{pf#"${{pf%/*/*/*/*}}"}}; tag=${{tag#/}}; [ -n "$tag" ] || tag=$pf; '
    'grep -qaF -- "$tag" /proc/$pid/cmdline 2>/dev/null || {{ echo "gone $pf"; continue; }}; '
)


# The task of a verified wrapper (``$pid``, ``$child`` from its pid file) is its own: its child,
# or (forked by the host's fork server) the child of a waiter whose title names it (a line of
# its cmdline to itself: launcher/remote/zygotewait.py's title, first as a fork of the server, an
# argument once it runs its small wait), or the wrapper itself (a warm standby the fork server forks
# once promoted: taskwrap.py --standby-defer). Sets ``pp`` (the task's parent) and ``own``.
_OWN_TASK = (
    'pp=$(sed "s/.*) //" /proc/$child/stat 2>/dev/null | cut -d" " -f2); own=""; '
    'if [ -n "$pp" ] && {{ [ "$pp" = "$pid" ] || [ "$child" = "$pid" ] || tr "\\000" "\\n" < /proc/$pp/cmdline 2>/dev/null '
    '| grep -qxF -- "tfcluster-zygote: the waiter of task $child"; }}; then own=1; fi; '
)
# What a wrapper cannot pass on to a task the fork server forked (in a group of its own): sent
# to the task's group too (its leader is the task: a cold task has none, and nothing is sent).
_UNCATCHABLE = ("KILL", "STOP", "CONT")


def signal_command(sig: int, pidfiles: Iterable[str]) -> str:
    """Signal each task's process group, but only if the pid in its pid file is still the
    wrapper that wrote it (its /proc cmdline names the pid file's run-unique tail). SIGKILL,
    SIGSTOP and SIGCONT also go to the group of a task the host's fork server forked, first."""
    name = _signal.Signals(sig).name.removeprefix("SIG")
    files = " ".join(q(p) for p in pidfiles)
    task = ('case $child in ""|*[!0-9]*) ;; *) ' + _OWN_TASK.format()
            + f'[ -n "$own" ] && kill -s {name} -- "-$child" 2>/dev/null;; esac; ') if name in _UNCATCHABLE else ""
    return (
        f"for pf in {files}; do "
        + _VERIFY.format() + task
        + f'kill -s {name} -- "-$pid" 2>/dev/null && echo "sent $pf" || echo "gone $pf"; done; true'
    )


def process_signal_command(sig: int, pidfiles: Iterable[str]) -> str:
    """Signal each task's own process (the pid file's TASK_PID), not its group: only while the
    wrapper is still the one that wrote the file (as ``signal_command``) and the task is its own
    (its child, or forked for it by the host's fork server: _OWN_TASK)."""
    name = _signal.Signals(sig).name.removeprefix("SIG")
    files = " ".join(q(p) for p in pidfiles)
    return (
        f"for pf in {files}; do "
        + _VERIFY.format()
        + 'case $child in ""|*[!0-9]*) echo "nopid $pf"; continue;; esac; '
        + _OWN_TASK.format() + '[ -n "$own" ] || { echo "gone $pf"; continue; }; '
        + f'kill -s {name} "$child" 2>/dev/null && echo "sent $pf" || echo "gone $pf"; done; true'
    )


def native_stacks_command(pidfile: str, pause_limit: float = PAUSE_LIMIT) -> str:
    """py-spy's dump of the task of ``pidfile`` (its own process, checked as ``process_signal_command``
    checks it), where py-spy is on its host, ended if it holds the task stopped ``pause_limit`` s
    (launcher/backends/pyspy.py)."""
    return remote_command(_VERIFY.format(), pidfile, _OWN_TASK.format(), pause_limit)


def promote_command(promotion: str, pidfile: str) -> str:
    """A warm standby's promotion: its environment (stdin, JSON) into its promotion file, whole
    (a rename), then SIGUSR1 to its group, verified as ``signal_command`` does."""
    return (f"umask 077 && {exclusive_write(q(promotion))} && "
            + signal_command(_signal.SIGUSR1, [pidfile]))


def exclusive_write(target: str) -> str:
    """Shell: stdin into ``target`` (shell text: quoted, or ``"$HOME"/'...'``) whole, never through
    a planted symlink: a new file of a name no one can know beforehand (``mktemp``: exclusive, mode
    0600) in the target's directory, then renamed over the target (``mv -T``: a symlink there is
    replaced, its target untouched, even a directory's). On failure the temporary file is removed
    and the status is non-zero."""
    return (f'{{ t=$(mktemp "$(dirname {target})/.tfcluster.XXXXXXXX") && '
            f'{{ cat > "$t" && mv -fT "$t" {target} || {{ rm -f "$t"; false; }}; }}; }}')


def state_command(pidfile: str) -> str:
    """Print the scheduler state letter of the task process (the wrapper's child)."""
    return (
        f"pf={q(pidfile)}; tag={q(pid_tag(pidfile))}; read pid child st < \"$pf\" && "
        "grep -qaF -- \"$tag\" /proc/$pid/cmdline && sed 's/.*) //' /proc/$child/stat | cut -d' ' -f1"
    )


# ``down``'s proof that a pid file's process is the run's own task wrapper (a record and the files
# it points at are input from someone else): the pid's start time is the one the wrapper wrote
# (else the wrapper is gone and the pid reused: quiet), its command line names the pid file's
# run-unique tail, its child (the task) is its child and carries the run's TFCLUSTER_RUN_ID.
# Anything else is one ``notown PIDFILE WHY`` line, and no signal.
_PROVE = (
    'read pid child st < "$pf" 2>/dev/null || {{ echo "nopid $pf"; continue; }}; '
    'case $pid in ""|*[!0-9]*) echo "nopid $pf"; continue;; esac; '
    'now=$(sed "s/.*) //" /proc/$pid/stat 2>/dev/null | cut -d" " -f20); '
    '[ -n "$now" ] || {{ echo "gone $pf"; continue; }}; '
    'if [ -n "$st" ] && [ "$st" != "$now" ]; then echo "gone $pf"; continue; fi; '
    'tag=${{pf#"${{pf%/*/*/*/*}}"}}; tag=${{tag#/}}; [ -n "$tag" ] || tag=$pf; '
    'grep -qaF -- "$tag" /proc/$pid/cmdline 2>/dev/null || '
    '{{ echo "notown $pf process $pid is not the task wrapper of $tag (its command line does not name it)"; continue; }}; '
    '[ -n "$st" ] || {{ echo "notown $pf the pid file gives no start time for process $pid"; continue; }}; '
    'case $child in ""|*[!0-9]*) echo "notown $pf the pid file names no task process"; continue;; esac; '
    + _OWN_TASK +
    '[ -n "$pp" ] || {{ echo "gone $pf"; continue; }}; '
    '[ -n "$own" ] || {{ echo "notown $pf process $child is not the task of wrapper $pid"; continue; }}; '
    '{{ [ "$child" = "$pid" ] || tr "\\000" "\\n" < /proc/$child/environ 2>/dev/null | grep -qxF -- "$mark"; }} || '
    '{{ echo "notown $pf process $child carries no $mark marker"; continue; }}; '
)


def down_command(run_dirs: Iterable[str], grace: float, run_id: str) -> str:
    """Stop every task of the given remote run dirs of run ``run_id``: TERM to each group proven
    the run's own (_PROVE), wait up to ``grace`` s, then KILL what is left. Prints ``stopped
    PIDFILE`` per task it stopped, ``notown PIDFILE WHY`` per live process it left alone."""
    globs = " ".join(f"{q(posixpath.join(d, 'pids'))}/*.pid" for d in run_dirs)
    return (
        f"mark={q(f'{envnames.RUN_ID}={run_id}')}; "
        f'found=""; for pf in {globs}; do [ -f "$pf" ] || continue; '
        + _PROVE.format()
        + 'kill -s TERM -- "-$pid" 2>/dev/null && { found="$found $pid"; echo "stopped $pf"; }; done; '
        f"n=0; while [ -n \"$found\" ] && [ $n -lt {max(0, int(round(grace * 10)))} ]; do "
        'alive=""; for pid in $found; do kill -0 -- "-$pid" 2>/dev/null && alive="$alive $pid"; done; '
        'found=$alive; [ -n "$found" ] || break; sleep 0.1; n=$((n+1)); done; '
        'for pid in $found; do kill -s KILL -- "-$pid" 2>/dev/null; done; true'
    )


def setup_command(workdir: str, command: str) -> str:
    """Shell: one ``ssh.setup`` command in the workdir (made and checked just before: sync.py)."""
    return f"mkdir -p {q(workdir)} && cd {q(workdir)} && {command}"


def sync_command(python: str, workdir: str, share: str = "private", own: bool = True) -> str:
    """Shell: the project's tar (stdin) into ``workdir``, checked and made private first; the
    files get the modes the umask leaves (0700/0600; 0750/0640 with ``share: group``), never
    the archive's owner."""
    umask = "027" if share == "group" else "077"
    return (f"{checked_mkdir(python, q(workdir), share, own)} && "
            f"(umask {umask} && tar -xzf - -C {q(workdir)} --no-same-owner --no-same-permissions)")


def wrap_args(workdir: str, pidfile: str, lease: float, grace: float, argv: Sequence[str],
              gce_metadata: str = "off") -> list[str]:
    """taskwrap's arguments for a task started by the host agent (which has no shell to cd)."""
    gce = ["--gce-metadata", gce_metadata] if gce_metadata != "off" else []
    return ["--lease", f"{lease:g}", "--grace", f"{grace:g}", "--pidfile", pidfile, "--cwd", workdir,
            "--threads", envnames.THREADS, "--gpus", envnames.GPUS, "--gpu-memory-var", envnames.GPU_MEMORY,
            "--collective-var", envnames.COLLECTIVE, "--gpu-watch", f"{GPU_WATCH:g}", "--control", envnames.CONTROL_FD,
            *gce, "--", *argv]


def agent_command(python: str, pidfile: Optional[str]) -> str:
    """The host agent (preflight, then the host's first task). -S for a fast start; it imports
    site itself when it has modules to look for. Run ``quiet``, as a task: its source is on
    this command line, and nothing of a shell may ever print it."""
    tag = f" {q(pid_tag(pidfile))}" if pidfile else ""
    return quiet(f"{q(python)} -S -c {q(agent_source())}{tag}")


def remote_paths(opts: SSHOptions, name: str, run_id: str) -> tuple[str, str, str]:
    """(run dir, state dir, workdir) on a host, relative to the remote home unless absolute."""
    base = posixpath.join(opts.remote_dir, name)
    run_dir = posixpath.join(base, run_id)
    state = posixpath.join(base, "state")
    if opts.workdir:
        workdir = opts.workdir
    elif opts.sync:
        workdir = posixpath.join(base, "work")
    else:
        workdir = "."
    return run_dir, state, workdir


def probe_deadline(probe_timeout: float, hosts: int) -> float:
    """How long a host keeps retrying a target before naming it unreachable: ``ssh.probe_timeout``
    for a few hosts, growing with the host count (every host probes every task port at once,
    and on a loaded machine the last hosts up answer late); a dropping firewall is named then."""
    return round(probe_timeout * max(1.0, hosts / 8), 3)



_CONNECT_PY = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()"


def port_check_command(python: str, address: str, port: int) -> str:
    """Exit 0 if ``address:port`` accepts a TCP connection from the host (within 2 s)."""
    return f"{q(python)} -c {q(_CONNECT_PY)} {q(address)} {port}"
