"""The ssh preflight's probe protocol: one host agent per host (``remote/agent.py``) checks the
interpreter, modules, workdir and ports, uploads the task helpers, then connects from each host
to the address:ports its tasks will dial under TensorFlow (``pairs.py``: O(n) pairs, not every
host to every task). On success each agent stays, waiting to become its host's first task
(``HostState.spare``), so the first start costs no second remote shell.

The probe only reports: what went wrong comes back typed (launcher/plan/hostreport.py's
``Problem``: a GPU refusal, a port in use, sessions that dropped, anything else), for the plans
its findings give (launcher/plan/preflight.py) to read by kind, never by the words of a line."""

from __future__ import annotations

import contextlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ContextManager, Mapping, Optional

from launcher.bounded import escape, one_line
from launcher.plan import gpus
from launcher.errors import LaunchError, exc_text
from launcher.notices import Tally
from launcher.plan.build import Plan
from launcher.plan.hostreport import Problem, ProblemKind
from launcher.remote import task_files
from launcher.remote.pathtrust import SAFE_FIX
from launcher.backends.ssh.commands import agent_command, probe_deadline
from launcher.backends.ssh.pairs import host_targets
from launcher.backends.ssh import zygote as ssh_zygote
from launcher.backends.ssh.statecheck import ask as statecheck_ask, marker_name
from launcher.backends.ssh.runner import BadReply, check_probe_reply, check_probe_results, close_channel, drain_stderr, parse_reply, readline

if TYPE_CHECKING:  # pragma: no cover
    from launcher.backends.ssh.pool import HostPool
    from launcher.backends.ssh.state import StateSync


def no_answer(name: str, what: str, seconds: float) -> str:
    """The one line for a host whose agent is connected but silent past its time."""
    return (f"host {name}: {what} did not answer within {seconds:g} s (ssh.preflight_timeout); the host is "
            "overloaded or its Python is stalled: check its load, or raise ssh.preflight_timeout")


@dataclass(frozen=True)
class ProbeFindings:
    """What a probe found wrong: the hosts it could not connect to (host -> the one line) and
    the problems of those it reached (none of either: it passed)."""

    unreachable: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.unreachable and not self.problems


def other(name: str, text: str, key: Optional[tuple] = None) -> Problem:
    return Problem(ProblemKind.OTHER, name, text, key)


def probe(pool: "HostPool", state_sync: "StateSync", plan: Plan, names: list[str],
          countdown: Optional[Callable[[Callable[[], str]], ContextManager]] = None) -> ProbeFindings:
    """One host agent per host (connecting first if needed): interpreter, deps, workdir,
    upload helpers, bind every planned port, then connect from each host to the task
    address:ports its tasks will dial (pairs.py). On success each agent stays, waiting to
    become its host's first task. ``countdown`` (``Notices.countdown``): how many hosts answered
    so far, shown on a terminal while they do (``probing hosts 37/64``). What went wrong comes
    back (``ProbeFindings``), at the first stage where something did."""
    tally = Tally("connecting to hosts", len(names))
    with (countdown or _no_countdown)(tally.text):
        return _probe(pool, state_sync, plan, names, tally)


def probe_or_raise(pool: "HostPool", state_sync: "StateSync", plan: Plan, names: list[str]) -> None:
    """``probe``, its findings as the one error (a host reconnecting before its first task)."""
    found = probe(pool, state_sync, plan, names)
    if found.unreachable:
        raise LaunchError(*found.unreachable.values())
    if found.problems:
        raise LaunchError(*[p.text for p in found.problems], "no task was started")


def _no_countdown(_text: Callable[[], str]) -> ContextManager:
    return contextlib.nullcontext()


def _reserved(pool: "HostPool", plan: Plan) -> dict[str, tuple[str, str]]:
    """Host -> (the key, the pid file) of its first task not started yet: that task's session is
    the probe's own, kept for it (``hs.spare``)."""
    reserved: dict[str, tuple[str, str]] = {}
    for task in plan.tasks:
        if task.host not in reserved and pool.starts.get(task.key, 0) == 0:
            hs = pool.hosts[task.host]
            reserved[task.host] = (task.key, hs.pidfile(task, 0))  # hs.run_dir may be relative yet
    return reserved


def _probe(pool: "HostPool", state_sync: "StateSync", plan: Plan, names: list[str], tally: Tally) -> ProbeFindings:
    # Uploaded into each run dir on the hosts by the probe (the agent writes them).
    files = task_files()
    argv0 = plan.tasks[0].command[0] if plan.tasks else ""
    sessions: dict[str, object] = {}
    replies: dict[str, dict] = {}
    unreachable: dict[str, str] = {}
    reserved = _reserved(pool, plan)

    def launch(name: str) -> Optional[Problem]:
        """Connect and start the agent; it waits for its request, so nothing is written on
        any host until every host is known to be reachable."""
        problem = pool.connect_one(name)
        if problem:
            unreachable[name] = problem
            return None
        tally.one()
        hs = pool.hosts[name]
        pidfile = reserved[name][1] if name in reserved else None
        try:
            chan = hs.transport.open_session(timeout=pool.opts.connect_timeout)
            chan.set_combine_stderr(False)
            chan.settimeout(pool.opts.preflight_timeout)
            chan.exec_command(agent_command(hs.python, pidfile))
            sessions[name] = chan
        except Exception as exc:  # noqa: BLE001
            from launcher.backends.ssh.connect import describe_channel_error  # (late: paramiko is the [ssh] extra's)

            return Problem(ProblemKind.DROPPED, name, f"host {name}: preflight could not run "
                           f"({describe_channel_error(exc, pool.opts.connect_timeout)}); check the host")
        return None

    # state.sync auto over several hosts: the chief's agent writes the marker in its first exchange
    # (_second_round: the others look, the chief's removes it; one round trip instead of three).
    marks = state_sync.marker_hosts(plan)

    def prepare(name: str) -> Optional[Problem]:
        hs, chan = pool.hosts[name], sessions[name]
        ports = sorted({t.port for t in plan.tasks if t.host == name and t.port is not None})
        req = {"require": list(pool.opts.require), "workdir": hs.workdir, "run_dir": hs.run_dir,
               "state_dir": hs.state_dir, "share": pool.share, "files": files, "ports": ports, "argv0": argv0,
               "gpus": any(t.gpus.request for t in plan.tasks)}  # every host: a replan by GPUs needs all counts
        if marks and name == marks[0]:
            req["marker"] = {"op": "write", "path": _marker_path(pool, state_sync, name)}
        zygote = ssh_zygote.order(pool, plan, name)
        if zygote is not None:  # the host's fork server: its import runs while the preflight goes on
            req["zygote"] = zygote
        reply, problem = first_exchange(name, hs.python, chan, req, pool.opts.preflight_timeout)
        tally.one()
        if reply is not None:
            replies[name] = reply
        return problem

    try:
        with pool.executor(len(names)) as ex:
            problems = [p for p in ex.map(launch, names) if p]
            if unreachable:
                return ProbeFindings(unreachable=dict(unreachable))
            if problems:
                return ProbeFindings(problems=tuple(problems))
            tally.next("probing hosts")
            problems = [p for p in ex.map(prepare, names) if p]
        problems = problems or unsafe_dirs(pool, state_sync.cfg.dir, names, replies)
        problems = problems or _judge(pool, plan, names, replies)
        if problems:
            return ProbeFindings(problems=tuple(problems))
        for name in names:
            hs, rep = pool.hosts[name], replies[name]
            hs.run_dir, hs.state_dir, hs.workdir, hs.ready = rep["run_dir"], rep["state_dir"], rep["workdir"], True
        tally.next("checking reachability from hosts")
        problems = _second_round(pool, state_sync, plan, names, sessions, replies, marks, tally)
        if problems:
            return ProbeFindings(problems=tuple(problems))
        _hand_over(pool, names, replies, reserved, sessions)
        return ProbeFindings()
    finally:
        for chan in sessions.values():
            close_channel(chan)


def _hand_over(pool: "HostPool", names: list[str], replies: dict[str, dict], reserved: dict, sessions: dict) -> None:
    """Each host's agent, the preflight passed: its fork server's keeper where it started one
    (ssh/zygote.py), else left waiting to become the host's first task (``hs.spare``)."""
    for name in names:
        said = replies[name].get("zygote")
        socket_path = said.get("socket") if isinstance(said, dict) else None
        warm = ssh_zygote.warm_event(name, said) if isinstance(said, dict) else None
        if warm is not None:  # (maybe before the record exists: then its first lines)
            pool.write_early(warm)
        if isinstance(socket_path, str) and socket_path:
            ssh_zygote.keep(pool, pool.hosts[name], sessions.pop(name), socket_path)
        elif name in reserved:
            pool.hosts[name].spare = (reserved[name][0], sessions.pop(name))


def first_exchange(name: str, python: str, chan, req: dict, timeout: float) -> tuple[Optional[dict], Optional[Problem]]:
    """Send the agent its first request and read the reply: (reply, None), or (None, the
    problem: its one line, DROPPED where the host's session went away under it). An agent that ended without a reply is diagnosed from its exit status
    and stderr, also when it ended before the request could be sent (a missing interpreter
    exits at once: the send then finds the channel closed)."""
    try:
        chan.sendall(json.dumps(req).encode() + b"\n")
        line = readline(chan)
    except TimeoutError:
        return None, other(name, no_answer(name, "the preflight agent", timeout))
    except Exception as exc:  # noqa: BLE001
        if not (chan.closed or chan.exit_status_ready()):
            return None, Problem(ProblemKind.DROPPED, name, f"host {name}: preflight could not run ({exc_text(exc)}); "
                                 "check the host")
        line = b""  # the command is over: say why below
    if line:
        try:
            reply = parse_reply(line)
            check_probe_reply(reply)
        except BadReply as exc:
            return None, other(name, f"host {name}: the preflight agent answered {exc}; the host is treated as failing: "
                                     f"check it (is '{python}' a plain Python 3, and does its login print nothing?)")
        return reply, None
    err = drain_stderr(chan)
    code = chan.recv_exit_status() if chan.exit_status_ready() else None
    if code == 127 or "not found" in err:
        return None, other(name, f"host {name}: python '{python}' not found; install Python 3 there or set "
                                 f"hosts[{name}].python / ssh.python to its full path")
    if code in (None, -1) and not err.strip():  # no exit status, no words: the session went away
        return None, Problem(ProblemKind.DROPPED, name, f"host {name}: the connection closed during preflight (sshd "
                             "stopped, the host went down or the link dropped); check the host")
    return None, other(name, f"host {name}: preflight failed (exit {code}): {err.strip()[-300:]}; check '{python}'")


def unsafe_dirs(pool: "HostPool", state_dir: Optional[str], names: list[str],
                replies: dict[str, dict]) -> list[Problem]:
    """One line per host whose run, state or work dir another user could swap (the agent's
    "unsafe": launcher/remote/pathtrust.py), each with the spec key that names that dir."""
    opts, problems = pool.opts, []
    for name in names:
        unsafe = replies[name].get("unsafe")
        if not (isinstance(unsafe, list) and len(unsafe) == 2 and all(isinstance(u, str) for u in unsafe)):
            continue
        which, problem = unsafe
        key = {"run_dir": ("ssh", "remote_dir"),
               "state_dir": ("state", "dir") if state_dir else ("ssh", "remote_dir"),
               "workdir": ("ssh", "workdir") if opts.workdir or not opts.sync else ("ssh", "remote_dir")}.get(
                   which, ("ssh", "remote_dir"))
        problems.append(other(name, f"{'.'.join(key)}: host {name}: {escape(problem)[:400]}; fix: {SAFE_FIX}", key))
    return problems


def _judge(pool: "HostPool", plan: Plan, names: list[str], replies: dict[str, dict]) -> list[Problem]:
    problems: list[Problem] = []
    versions: dict[str, dict[str, list[str]]] = {}
    said_gpus: dict[str, tuple] = {}  # host -> its GPUs, for the hosts that said
    for name in names:
        rep, hs = replies[name], pool.hosts[name]

        def add(text: str, kind: ProblemKind = ProblemKind.OTHER) -> None:
            problems.append(Problem(kind, name, text))

        if rep.get("error"):
            add(f"host {name}: {rep['error']}; fix ssh.remote_dir or the permissions there")
        if tuple(int(x) for x in rep["python"].split(".")[:2]) < (3, 8):
            add(f"host {name}: {hs.python} is Python {rep['python']}; tfcluster needs 3.8 or newer")
        if rep.get("workdir") is None:
            add(f"host {name}: workdir {hs.workdir} does not exist there; create it, set ssh.workdir, "
                "or use ssh.sync to upload the project")
        if rep.get("argv0_found") is False:
            argv0 = plan.tasks[0].command[0]
            fix = (f"install tfcluster there for {hs.python} (pip install 'tfcluster[tf]'), or, with the project "
                   "uploaded by ssh.sync, use `python -m worker`") if argv0 == "tfcluster-worker" \
                else "install it there or give its full path"
            add(f"host {name}: entrypoint command '{argv0}' not found on PATH; {fix}")
        for module, (found, version) in rep["deps"].items():
            if not found:
                add(f"host {name}: {hs.python} cannot import {module}; install it there or point "
                    f"hosts[{name}].python / ssh.python at the interpreter that has it")
            elif version:
                versions.setdefault(module, {}).setdefault(version, []).append(name)
        for port, problem in rep["ports"].items():
            if problem:
                keys = ", ".join(t.key for t in plan.tasks if t.host == name and str(t.port) == port)
                add(f"port {port} on host {name} is {problem} ({keys}); stop what holds it or "
                    "change ports.base / the task's ports", ProblemKind.PORT_IN_USE)
        if rep.get("gpus") is not None:
            said = rep.get("gpus_failure")  # the host's nvidia-smi, in its words: outside bytes, bounded
            failure = one_line(said, 240) if isinstance(said, str) else None
            hs.gpus = tuple(tuple(g) for g in rep["gpus"])
            # Its nvidia-smi failed where GPUs are required: no placement mends that. Else a refusal
            # of the plan's GPU placement, which a placement by each host's GPUs may mend.
            kind = ProblemKind.OTHER if gpus.failure_refuses(plan, name, hs.gpus, failure) else ProblemKind.GPU
            for line in gpus.host_problems(plan, name, hs.gpus, failure):
                add(line, kind)
            said_gpus[name] = hs.gpus
    unequal = gpus.hosts_problem(plan, said_gpus)
    if unequal:
        problems.append(Problem(ProblemKind.GPU, "", unequal))
    for module, by_version in versions.items():
        if len(by_version) > 1:
            desc = "; ".join(f"{v} on {', '.join(hs)}" for v, hs in sorted(by_version.items()))
            problems.append(other("", f"{module} versions differ between hosts ({desc}); install the same version "
                                      "everywhere"))
    return problems


def _second_round(pool: "HostPool", state_sync: "StateSync", plan: Plan, names: list[str], sessions: dict,
                  replies: dict[str, dict], marks: Optional[tuple[str, list[str]]], tally: Tally) -> list[Problem]:
    """The reachability probe, the other hosts' look for the chief's marker riding on it, the
    marker's removal, and the state dir's mode decided from what they saw: the problems."""
    def marker_path(name: str) -> str:
        return _marker_path(pool, state_sync, name)

    seen: dict[str, object] = {}  # host -> whether it saw the chief's marker
    checks = {h: marker_path(h) for h in marks[1] if h != marks[0]} if marks and replies[marks[0]].get("marker") else {}
    problems = _reachability(pool, plan, names, sessions, tally, checks, seen)
    if checks:  # every host looked: the marker goes (its agent would remove it at its end, too late to be sure)
        try:
            statecheck_ask(sessions[marks[0]], "remove", marker_path(marks[0]))
        except Exception:  # noqa: BLE001 - a leftover marker is harmless (run-unique name)
            pass
    said = state_sync.detect(plan, names, sessions, marked=_marked(pool, marks, replies, seen))
    return problems + [other("", line) for line in said]


def _marker_path(pool: "HostPool", state_sync: "StateSync", name: str) -> str:
    return posixpath.join(pool.hosts[name].state_dir, marker_name(state_sync.run_id))


def _marked(pool: "HostPool", marks: Optional[tuple[str, list[str]]], replies: dict[str, dict],
            seen: dict[str, object]) -> Optional[tuple[dict[str, bool], list[str]]]:
    """What ``StateSync.detect`` reads of the marker the preflight's exchanges carried: (host ->
    saw it, problem lines), or None where they carried none (detect asks then)."""
    if not marks:
        return None
    chief, hosts = marks
    wrote = replies[chief].get("marker")
    if wrote is None:
        return None
    if wrote is not True:
        said = replies[chief].get("marker_error")
        return {}, [f"host {chief}: cannot write in the state dir {pool.hosts[chief].state_dir}: "
                    f"{one_line(said, 200) if isinstance(said, str) else 'no answer'}; fix state.dir or its permissions"]
    return {chief: True, **{h: seen.get(h) is True for h in hosts if h != chief}}, []


def _reachability(pool: "HostPool", plan: Plan, names: list[str], sessions: dict, tally: Tally,
                  checks: Optional[Mapping[str, str]] = None, seen: Optional[dict] = None) -> list[Problem]:
    """Each host dials only what its tasks will dial under TensorFlow (pairs.py: O(n) pairs).
    ``checks``: host -> the marker path it looks for in the same exchange (its answer into
    ``seen``)."""
    wanted = host_targets(plan)
    checks = checks or {}
    if not wanted and not checks:
        return []
    timeout = pool.opts.probe_timeout
    deadline = probe_deadline(timeout, len(names))
    known = set(plan.keys)

    def one(name: str) -> list[Problem]:
        chan = sessions[name]
        targets = [[t.key, t.address, t.port] for t in wanted.get(name, ())]
        if not targets and name not in checks:
            return []
        req = {"targets": targets, "timeout": timeout, "deadline": deadline}
        if name in checks:
            req["marker"] = {"op": "check", "path": checks[name]}
        try:
            chan.settimeout(deadline + pool.opts.preflight_timeout)  # the probe's own deadline, then the slack
            chan.sendall(json.dumps(req).encode() + b"\n")
            line = readline(chan)
            reply = parse_reply(line) if line else None
            results = check_probe_results(reply) if reply is not None else None
            if reply is not None and seen is not None and name in checks:
                seen[name] = reply.get("marker") is True
        except TimeoutError:
            return [other(name, no_answer(name, "the reachability probe", deadline + pool.opts.preflight_timeout))]
        except BadReply as exc:
            return [other(name, f"host {name}: the reachability probe answered {exc}; the host is treated as failing: "
                                "check it")]
        except Exception:  # noqa: BLE001
            results = None
        if results is None:  # its session went away under it
            return [Problem(ProblemKind.DROPPED, name, f"host {name}: the reachability probe gave no answer; check "
                                                        "the host")]
        out = []
        for key, problem in results:
            if problem and key in known:  # (a key the plan lacks: not what its agent was asked)
                t = plan.task(key)
                out.append(other(name, f"host {name} cannot reach {t.host} {t.address}:{t.port} ({key}): {problem}; "
                                       f"open that port between the hosts or fix hosts[{t.host}].address"))
        return out

    def counted(name: str) -> list[Problem]:
        try:
            return one(name)
        finally:
            tally.one()

    with pool.executor(len(names)) as ex:
        return [p for ps in ex.map(counted, names) for p in ps]
