"""launcher/backends/ssh/preflight.py: the ssh preflight of a plan only reports (typed: the hosts
that answered, their GPUs, the absent ones with kind, since and text, the problems by kind), over
a scripted pool and agents' probe; and the pool does not dial a host again that failed a moment
ago (the probe of the plan without it, right after, reports it as it was)."""

from __future__ import annotations

from pathlib import Path

from launcher.app.up import plan_for
from launcher.backends.ssh import preflight as ssh_preflight
from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.pool import HostPool
from launcher.backends.ssh.probe import ProbeFindings
from launcher.loader.load import parse_spec
from launcher.plan.hostreport import Absent, AbsentKind, Problem, ProblemKind

SPEC = """
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts: [{name: h1}, {name: h2}, {name: h3}, {name: h4}]
tasks: {worker: 3}
"""


class Host:
    def __init__(self, gpus=None) -> None:
        self.gpus = gpus


class Pool:
    """connect(names, recent): the scripted problems; the hosts' GPUs; forgotten connections."""

    def __init__(self, down: dict[str, str]) -> None:
        self.opts = SSHOptions()
        self.down = down
        self.hosts = {f"h{i}": Host(((0, "A100", "u0"),)) for i in range(1, 5)}
        self.dialled: list[list[str]] = []
        self.forgotten: list[str] = []

    def connect(self, names, recent=0.0):
        self.dialled.append(list(names))
        return {n: self.down[n] for n in names if n in self.down}

    def refused_since(self, name):
        return 7.0

    def forget_connection(self, hs):
        self.forgotten.append(next(n for n, h in self.hosts.items() if h is hs))


def scripted(monkeypatch, pool, *findings):
    """The agents' probe answering ``findings`` in turn; the plans it was asked about."""
    asked, left = [], list(findings)

    def agents(p, state_sync, plan, names, countdown=None):
        asked.append(list(names))
        return left.pop(0)

    monkeypatch.setattr(ssh_preflight.ssh_probe, "probe", agents)
    monkeypatch.setattr(ssh_preflight.time, "sleep", lambda s: None)
    return ssh_preflight.Preflight(pool, None, None), asked


def test_a_plan_host_not_answering_is_reported_and_no_agent_runs(monkeypatch):
    plan = plan_for(parse_spec(SPEC))
    pool = Pool({"h2": "host h2: timed out after 10 s", "h4": "host h4: timed out after 10 s"})
    preflight, asked = scripted(monkeypatch, pool)
    report = preflight.report(plan, ["h4"])
    assert pool.dialled == [["h1", "h2", "h3", "h4"]] and asked == []  # the spares with the plan's hosts, at once
    assert report.absent == (Absent(AbsentKind.NOT_ANSWERING, "h2", 7.0, "host h2: timed out after 10 s"),
                             Absent(AbsentKind.NOT_ANSWERING, "h4", 7.0, "host h4: timed out after 10 s"))
    assert report.answered == ("h1", "h3") and report.problems == ()


def test_every_plan_host_answering_runs_the_agents_and_reports_their_problems_by_kind(monkeypatch):
    plan = plan_for(parse_spec(SPEC))
    pool = Pool({"h4": "host h4: timed out after 10 s"})
    dropped = Problem(ProblemKind.DROPPED, "h3", "host h3: the reachability probe gave no answer; check the host")
    preflight, asked = scripted(monkeypatch, pool, ProbeFindings(problems=(dropped,)), ProbeFindings())
    report = preflight.report(plan, ["h4"])
    assert asked == [["h1", "h2", "h3"]] and report.problems == (dropped,)
    assert [a.host for a in report.absent] == ["h4"]  # a spare absent: reported, the plan probed
    assert pool.forgotten == ["h3"]  # its sessions died: connected afresh next time
    assert set(report.gpus) == {"h1", "h2", "h3"}
    # The plan without h3 next: h3 is a spare now, and not dialled again (its sessions died).
    without = plan_for(parse_spec(SPEC.replace("tasks: {worker: 3}", "tasks: {worker: 2}")))
    preflight.report(without, ["h3", "h4"])
    assert pool.dialled[-1] == ["h1", "h2", "h4"]


def test_ports_in_use_after_an_earlier_probe_are_waited_for_a_few_times(monkeypatch):
    plan = plan_for(parse_spec(SPEC))
    held = ProbeFindings(problems=(Problem(ProblemKind.PORT_IN_USE, "h1", "port 1 on host h1 is in use (worker:0)"),))
    preflight, asked = scripted(monkeypatch, Pool({}), held, held, ProbeFindings(), held, held, held, held)
    assert preflight.report(plan, []).problems == held.problems  # the first probe: its own error, no retry
    assert len(asked) == 1
    assert preflight.report(plan, []).problems == ()  # after one: the earlier agents' ports, waited for
    assert len(asked) == 3
    assert preflight.report(plan, []).problems == held.problems and len(asked) == 7  # (3 more tries, then the error)


def test_the_pool_does_not_dial_a_host_again_that_failed_a_moment_ago(monkeypatch):
    spec = parse_spec(SPEC)
    pool = HostPool(spec.hosts, SSHOptions(), Path("/x"), ("r", "s", "w"))
    dials: list[str] = []
    monkeypatch.setattr(pool, "_dial", lambda hs: dials.append(hs.name) or f"host {hs.name}: refused")
    assert pool.connect(["h2"]) == {"h2": "host h2: refused"}
    since = pool.refused_since("h2")
    assert pool.connect(["h2"], recent=60) == {"h2": "host h2: refused"} and dials == ["h2"]
    assert pool.connect(["h2"]) == {"h2": "host h2: refused"} and dials == ["h2", "h2"]  # (recent=0: dialled)
    assert pool.refused_since("h2") == since  # the first failure in a row
