"""Membership decisions of the real supervisor against scripted hosts and tasks (tests/support/
fakes.py) that the lab tests once checked with TensorFlow on sshd hosts: a parameter_server group
that starts without an absent worker host and grows onto it. No processes, no wall-clock waits."""

from __future__ import annotations

import json
import signal

from launcher.app.up import plan_for
from launcher.plan.elastic import start_without
from tests.support.fakes import Counter, Script, supervise
from tests.unit.supervise.test_supervisor_scripted import PSS_ELASTIC, of, returning


def test_a_parameter_server_group_starts_without_an_absent_worker_host_and_grows_onto_it(tmp_path):
    """h3 (worker:1's host) does not answer at `up` (tasks.worker.min: 1): the group starts as the
    chief, worker:0 and the ps; once h3 has answered for elastic.settle the whole group is stopped
    gracefully and restarted with worker:1 on h3, the chief and ps where they were, no restart
    spent, nothing lost."""
    spec = PSS_ELASTIC.replace("elastic: {host_wait: 5}", "elastic: {host_wait: 5, settle: 3}").replace(
        "stop_grace: 0", "stop_grace: 3")
    backend = returning({("chief:0", 1): Script(code=0, polls=6)}, losses={}, back=["h3"], after=3,
                        default=Script(code=None))
    result = supervise(tmp_path, spec, backend, clock=Counter(),
                       plan=lambda spec: start_without(spec, plan_for(spec), ["h3"]).plan,
                       absent={"h3": "not answering"}, short_why="h3 not answering")
    code, out, events = result.code, result.err + result.out, result.events
    assert code == 0, out
    assert backend.hosts.asked[0] == (["h3"], 3.0)  # watched from the start, elastic.settle
    started = backend.tasks.hosts_started
    assert started[:3] == [("chief:0", "h1"), ("worker:0", "h2"), ("ps:0", "h1")], started
    assert sorted(started[3:]) == [("chief:0", "h1"), ("ps:0", "h1"), ("worker:0", "h2"), ("worker:1", "h3")], started
    assert all(h.signals[:1] == [signal.SIGTERM] for h in backend.tasks.handles[:3])  # the grow: a graceful stop
    assert "worker: 1 of 2 (h3 not answering)" in out, out
    assert "h3 back; worker:1 added on h3" in out, out
    (start,) = of(events, "run_start")
    assert start["group"] == {"type": "worker", "size": 1, "of": 2, "why": "h3 not answering"}, start
    assert [e["event"] for e in events if e["event"] in ("host_lost", "replan", "host_added", "restart",
                                                         "task_restart")] == ["host_added", "replan"]
    run = tmp_path / "runs" / "s" / "latest"
    assert [t["host"] for t in json.loads((run / "plan.json").read_text())["tasks"]] == ["h1", "h2", "h1"]
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1", "h2", "h3", "h1"]
